"""walk.cpp, the ``fused`` strategy's CPU kernel, built once per machine and loaded; the
C struct of its tables (:class:`Tables`), field for field.

The library is built the first time a machine needs it (or by ``make install`` and
``make demo``) into the folder of native code (:mod:`.native_cache`; also where per-model
packages are ``off``), named by a digest of its source, its flags and this CPU's
instruction set, under that folder's build lock and by its atomic rename, so that workers
starting together build it once; a machine without a compiler loads one built before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

from ..errors import CompileError
from .native_cache import build_lock, cache_root, digest, private, publishing

__all__ = ["Tables", "kernel_library"]

_SOURCE = Path(__file__).with_name("walk.cpp")
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-ffp-contract=off", "-fno-math-errno",
          "-shared", "-fPIC")  # fmt: skip

_P = ctypes.c_void_p


class Tables(ctypes.Structure):
    """``struct Tables`` of walk.cpp, field for field."""

    _fields_ = [
        ("n_trees", ctypes.c_int64), ("n_features", ctypes.c_int64),
        ("n_outputs", ctypes.c_int64), ("top_depth", ctypes.c_int32),
        ("vector_leaves", ctypes.c_int32), ("top_packed", _P), ("top_threshold", _P),
        ("top_node", _P), ("top_exit", _P), ("tree_levels", _P), ("compact", _P), ("packed", _P),
        ("threshold", _P), ("child", _P), ("value", _P), ("group", _P), ("cat_row", _P),
        ("cat_unknown_left", _P), ("bits_left", _P), ("bits_known", _P),
        ("words", ctypes.c_int32), ("cat_check_before_trunc", ctypes.c_int32),
        ("zero", ctypes.c_double), ("used", _P), ("n_used", ctypes.c_int64),
        ("width", ctypes.c_int64),
    ]  # fmt: skip


# -- the library: built once per machine --------------------------------------------------

_library: ctypes.CDLL | None = None
_library_lock = threading.Lock()


def kernel_library() -> ctypes.CDLL:
    """The walk's shared library, built on first use on this machine (see the module)."""
    global _library
    with _library_lock:
        if _library is None:
            _library = _load(_built_library())
        return _library


def _compiler() -> str:
    return os.environ.get("CXX") or "c++"


def _library_digest() -> str:
    """What decides the library's code: its source, the flags and this CPU (a plain C
    ABI, so not the compiler's version: any build of the same source will do)."""
    return digest(_SOURCE.read_bytes(), " ".join(_FLAGS), platform.machine(), _cpu_flags())


def _cpu_flags() -> str:
    """This CPU's instruction set: ``-march=native`` code must not run on another."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    return platform.processor()


def _built_library() -> Path:
    root = _library_root()
    target = root / f"walk-{_library_digest()}.so"
    if target.exists():  # a machine without a compiler can load one built before
        return target
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with build_lock(root, target.name):  # a worker starting beside us builds it once
            if not target.exists():
                with publishing(target) as partial:
                    _compile_library(partial)
    except OSError as exc:  # read-only, no permission, disk full, a file in the way
        raise CompileError(
            f"strategy 'fused' builds its kernel once into {root}, which cannot be written "
            f"({exc.strerror or exc}: {exc.filename or root}); make it writable, or set "
            "SCORING_COMPILE_CACHE to a folder you can write"
        ) from exc
    return target


def _library_root() -> Path:
    """``$SCORING_COMPILE_CACHE``, else the user's cache, also when per-model packages are
    ``off`` (the kernel is the product's, not a model's); a private folder of this
    process where that folder is not the user's alone (the library is native code)."""
    root = cache_root()
    if root.exists() and not private(root):
        return Path(tempfile.mkdtemp(prefix="scoring-walk-"))
    return root


def _compile_library(out: Path) -> None:
    args = [_compiler(), *_FLAGS, "-o", str(out), str(_SOURCE)]
    try:
        done = subprocess.run(args, capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(
            f"strategy 'fused' builds its kernel once per machine with a C++ compiler "
            f"({_compiler()!r}: {exc.strerror}); install g++ or set CXX, or use "
            "strategy='tree_traversal'"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CompileError(f"strategy 'fused': building its kernel failed ({last}); "
                           "use strategy='tree_traversal'")  # fmt: skip


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.walk_score.restype = ctypes.c_int32
    lib.walk_score.argtypes = [
        ctypes.POINTER(Tables), *[ctypes.c_int32] * 4, _P, ctypes.c_int64, _P,
        *[ctypes.c_int32] * 6,
    ]  # fmt: skip
    lib.walk_score_columns.restype = ctypes.c_int32
    lib.walk_score_columns.argtypes = [
        ctypes.POINTER(Tables), *[ctypes.c_int32] * 4, ctypes.POINTER(_P), ctypes.c_int64,
        ctypes.c_int64, _P, *[ctypes.c_int32] * 6,
    ]  # fmt: skip
    lib.walk_leaf_ids.restype = ctypes.c_int32
    lib.walk_leaf_ids.argtypes = [
        ctypes.POINTER(Tables), *[ctypes.c_int32] * 3, _P, ctypes.c_int64, _P, _P,
    ]  # fmt: skip
    lib.walk_vector_lanes.restype = ctypes.c_int32
    lib.walk_packs.restype = ctypes.c_int32
    lib.walk_wide_lanes.restype = ctypes.c_int32
    return lib

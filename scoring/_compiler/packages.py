"""Ahead-of-time packages of the ``fused`` walk, so that a second process skips compiling.

A process that compiles a block with ``torch.compile`` pays for importing Dynamo and
tracing the walk again even when inductor's cache holds the kernel (4.7 s on the 2-core
machine for XGBoost 500x8, benchmarks/results/compile_cache_cpu.md).  So after the first
block is scored, the walk is exported (``torch.export``) and a child process builds an
AOTInductor package from it; the next process (a Ray actor, a Spark worker, tomorrow's
run) loads that package with torch's C++ loader, without importing Dynamo or inductor.

Why a child process: AOTInductor takes 10-25 s of compiler time; in the scoring process
it would delay the first rows, and it changes inductor's process-wide settings.

Packages are native code, so they live in a folder private to the user on this machine
(``$SCORING_COMPILE_CACHE``, default ``~/.cache/scoring/compiled``; ``off`` turns them
off), never in a registry shared with others.  A package's name is a digest of
everything that decides its code: the module's tables and settings, the block shape and
dtype, the device kind and its instruction set or architecture, torch's version and this
compiler's own source.  A retrained model, a new torch or an edited walk therefore never
loads a stale package.  Files appear by atomic rename; one that cannot be loaded is
deleted and built again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

__all__ = ["PackageStore", "build", "cache_root", "default_store"]

#: Settings of the generated code, shared with the in-process ``torch.compile``: no index
#: bound assertions, since every index the walk gathers with comes from our own tables.
INDUCTOR_OPTIONS = {"assert_indirect_indexing": False}
#: The C++ wrapper of a package is plain glue: -O0 saves compiler seconds, not run time.
_PACKAGE_OPTIONS = {**INDUCTOR_OPTIONS, "aot_inductor.compile_wrapper_opt_level": "O0"}
#: A build marker older than this belongs to a builder that died: build again.
_STALE_BUILD_S = 15 * 60
#: The builder's command line (``-m`` would import this module twice).
_CHILD = "import sys; from scoring._compiler.packages import build; build(*sys.argv[1:])"
_SOURCES = ("kernels.py", "fused.py", "__init__.py", "tables.py", "packages.py")


def default_store() -> PackageStore | None:
    """The store named by ``$SCORING_COMPILE_CACHE`` (``off``: none), else the user's."""
    if os.environ.get("SCORING_COMPILE_CACHE", "").lower() == "off":
        return None
    root = cache_root()
    if root.exists() and not _private(root):
        warnings.warn(
            f"compiled packages are off: {root} is not a folder only you can write to "
            "(they are native code); chmod 700 it, or set SCORING_COMPILE_CACHE to another",
            RuntimeWarning, stacklevel=2,
        )  # fmt: skip
        return None
    return PackageStore(root)


def cache_root() -> Path:
    """``$SCORING_COMPILE_CACHE`` where it names a folder, else the user's cache (what
    ``off`` turns off is per-model packages, not this folder)."""
    setting = os.environ.get("SCORING_COMPILE_CACHE", "")
    if setting and setting.lower() != "off":
        return Path(setting)
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache_home / "scoring" / "compiled"


def _private(root: Path) -> bool:
    status = root.stat()
    return root.is_dir() and status.st_uid == os.getuid() and not status.st_mode & 0o022


class PackageStore:
    """Packages in ``root`` by digest; builders run as child processes (``pending``)."""

    def __init__(self, root: Path):
        self.root = root
        self.pending: list[subprocess.Popen[bytes]] = []

    def digest(self, module: nn.Module, example: torch.Tensor) -> str:
        h = hashlib.sha256()
        for part in (_CODE_VERSION, torch.__version__, _device_kind(example.device)):
            h.update(part.encode() + b"\0")
        h.update(f"{tuple(example.shape)} {example.dtype}".encode())
        for name, sub in module.named_modules():
            h.update(f"{name} {type(sub).__qualname__} {_settings(sub)}".encode())
        for name, tensor in module.named_buffers():
            h.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
            h.update(_bytes(tensor))
        return h.hexdigest()[:32]

    def load(self, digest: str, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
        """The package's runner, or ``KeyError`` when there is none (or it was unusable)."""
        path = self.root / f"{digest}.pt2"
        if not path.is_file():
            raise KeyError(digest)
        try:
            index = device.index if device.index is not None else -1
            loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, index)
        except RuntimeError as exc:  # truncated by a crash, or built for another torch
            path.unlink(missing_ok=True)
            raise KeyError(digest) from exc
        return lambda x: loader.run([x])[0]

    def build_later(self, module: nn.Module, example: torch.Tensor, digest: str) -> None:
        """Export ``module`` at ``example``'s shape and build its package in a child."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = self.root / f"{digest}.building"
        if not _claim(marker):
            return  # another process is building it
        exported = self.root / f"{digest}.{os.getpid()}.export.pt2"
        args = [sys.executable, "-c", _CHILD, str(exported), str(self.root / f"{digest}.pt2")]
        try:
            torch.export.save(torch.export.export(module, (example,)), str(exported))
            with open(self.root / f"{digest}.log", "wb") as log:
                child = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        except Exception:
            marker.unlink(missing_ok=True)
            exported.unlink(missing_ok=True)
            raise
        self.pending.append(child)

    def wait(self) -> list[int]:
        """Wait for this store's builders; their exit codes."""
        codes = [p.wait() for p in self.pending]
        self.pending.clear()
        return codes


def _claim(marker: Path) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if time.time() - marker.stat().st_mtime < _STALE_BUILD_S:
            return False
        marker.unlink(missing_ok=True)
        return _claim(marker)
    os.close(fd)
    return True


def _code_version() -> str:
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in _SOURCES)).hexdigest()


#: The compiler's source as this process imported it (an edit on disk afterwards does
#: not change the code that runs here, so it must not change the digests either).
_CODE_VERSION = _code_version()


def _device_kind(device: torch.device) -> str:
    if device.type == "cuda":
        name, arch = torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)
        return f"cuda {name} {arch}"
    return f"{device.type} {torch.backends.cpu.get_cpu_capability()}"


def _settings(module: nn.Module) -> str:
    """A module's plain attributes (depths, stages, flags) that shape its traced code."""
    plain = (bool, int, float, str, tuple, list)
    items = sorted((k, v) for k, v in vars(module).items() if not k.startswith("_"))
    return repr([(k, v) for k, v in items if isinstance(v, plain)])


def _bytes(tensor: torch.Tensor) -> bytes:
    return np.ascontiguousarray(tensor.detach().cpu().numpy()).tobytes()


def build(exported_path: str, target_path: str) -> None:
    """Child process: an exported walk -> an AOTInductor package, published atomically
    (its log is kept only when it fails)."""
    from torch._inductor import aoti_compile_and_package

    exported, target = Path(exported_path), Path(target_path)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial.pt2")
    try:
        program = torch.export.load(str(exported))
        aoti_compile_and_package(
            program, package_path=str(partial), inductor_configs=dict(_PACKAGE_OPTIONS)
        )
        os.replace(partial, target)
        target.with_suffix(".log").unlink(missing_ok=True)
    finally:
        partial.unlink(missing_ok=True)
        exported.unlink(missing_ok=True)
        target.with_suffix(".building").unlink(missing_ok=True)

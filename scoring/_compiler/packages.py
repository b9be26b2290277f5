"""Ahead-of-time packages of the ``fused`` walk, so that a second process skips compiling.

A process that compiles a block with ``torch.compile`` pays for importing Dynamo and
tracing the walk again even when inductor's cache holds the kernel (4.7 s on the 2-core
machine for XGBoost 500x8, benchmarks/results/compile_cache_cpu.md).  So after the first
block is scored, the walk is exported (``torch.export``) and a child process builds an
AOTInductor package from it; the next process (a Ray actor, a Spark worker, tomorrow's
run) loads that package with torch's C++ loader, without importing Dynamo or inductor.

Why a child process: AOTInductor takes 10-25 s of compiler time; in the scoring process
it would delay the first rows, and it changes inductor's process-wide settings.

Packages are native code, so they live in the folder of native code built on this
machine (:mod:`.native_cache`: ``$SCORING_COMPILE_CACHE``, default
``~/.cache/scoring/compiled``, private to the user; ``off`` turns packages off), never in
a registry shared with others.  A package's name is a digest of everything that decides
its code: the module's tables and settings, the block shape and dtype, the device kind
and its instruction set or architecture, torch's version and this compiler's own source.
A retrained model, a new torch or an edited walk therefore never loads a stale package.
The child holds the package's build lock until it is done (a second process finds it held
and leaves the build to it), and the package appears by atomic rename; one that cannot be
loaded is deleted and built again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .native_cache import build_lock, cache_root, digest, private, publishing

__all__ = ["PackageStore", "build", "default_store"]

#: Settings of the generated code, shared with the in-process ``torch.compile``: no index
#: bound assertions, since every index the walk gathers with comes from our own tables.
INDUCTOR_OPTIONS = {"assert_indirect_indexing": False}
#: The C++ wrapper of a package is plain glue: -O0 saves compiler seconds, not run time.
_PACKAGE_OPTIONS = {**INDUCTOR_OPTIONS, "aot_inductor.compile_wrapper_opt_level": "O0"}
#: The builder's command line (``-m`` would import this module twice).
_CHILD = "import sys; from scoring._compiler.packages import build; build(*sys.argv[1:])"
_SOURCES = ("kernels.py", "fused.py", "__init__.py", "tables.py", "packages.py")


def default_store() -> PackageStore | None:
    """The store named by ``$SCORING_COMPILE_CACHE`` (``off``: none), else the user's."""
    if os.environ.get("SCORING_COMPILE_CACHE", "").lower() == "off":
        return None
    root = cache_root()
    if root.exists() and not private(root):
        warnings.warn(
            f"compiled packages are off: {root} is not a folder only you can write to "
            "(they are native code); chmod 700 it, or set SCORING_COMPILE_CACHE to another",
            RuntimeWarning, stacklevel=2,
        )  # fmt: skip
        return None
    return PackageStore(root)


class PackageStore:
    """Packages in ``root`` by digest; builders run as child processes (``pending``)."""

    def __init__(self, root: Path):
        self.root = root
        self.pending: list[subprocess.Popen[bytes]] = []

    def digest(self, module: nn.Module, example: torch.Tensor) -> str:
        parts: list[str | bytes] = [_CODE_VERSION, torch.__version__,
                                    _device_kind(example.device),
                                    f"{tuple(example.shape)} {example.dtype}"]  # fmt: skip
        for name, sub in module.named_modules():
            parts.append(f"{name} {type(sub).__qualname__} {_settings(sub)}")
        for name, tensor in module.named_buffers():
            parts += [f"{name} {tensor.dtype} {tuple(tensor.shape)}", _bytes(tensor)]
        return digest(*parts)

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
        """Export ``module`` at ``example``'s shape and build its package in a child, which
        keeps the package's build lock until it is done."""
        with build_lock(self.root, f"{digest}.pt2", wait=False) as lock:
            if lock is None:
                return  # another process is building it
            exported = self.root / f"{digest}.{os.getpid()}.export.pt2"
            args = [sys.executable, "-c", _CHILD, str(exported), str(self.root / f"{digest}.pt2")]
            try:
                torch.export.save(torch.export.export(module, (example,)), str(exported))
                with open(self.root / f"{digest}.log", "wb") as log:
                    child = subprocess.Popen(args, stdout=log, stderr=log, pass_fds=(lock,),
                                             start_new_session=True)  # fmt: skip
            except Exception:
                exported.unlink(missing_ok=True)
                raise
        self.pending.append(child)

    def wait(self) -> list[int]:
        """Wait for this store's builders; their exit codes."""
        codes = [p.wait() for p in self.pending]
        self.pending.clear()
        return codes


def _code_version() -> str:
    here = Path(__file__).parent
    return digest(*((here / name).read_bytes() for name in _SOURCES))


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
    try:
        program = torch.export.load(str(exported))
        with publishing(target) as partial:
            aoti_compile_and_package(
                program, package_path=str(partial), inductor_configs=dict(_PACKAGE_OPTIONS)
            )
        target.with_suffix(".log").unlink(missing_ok=True)
    finally:
        exported.unlink(missing_ok=True)

"""The ``compiled`` strategy (``fused`` on CUDA): each block of rows walks every tree in
one kernel generated and compiled per model.  ``fused`` on CPU is :mod:`.generic`'s
shared kernel instead, which needs no per-model compile and scores faster there.

The eager strategies materialise several ``[rows, trees]`` tensors per tree level.
Here the same modules (:class:`~.kernels.PerfectTreeTraversal` up to depth 10, else
:class:`~.kernels.TreeTraversal`, and :class:`~.kernels.LeafSum`) run trees-outermost
(``[trees, rows]``) under ``torch.compile``: every step is elementwise over that grid
but the final sum over trees, so inductor emits one loop nest (C++/OpenMP on CPU,
Triton on CUDA) that keeps a row's node id in registers through every level and adds
its leaf in the same pass.  Node semantics stay in :class:`~.kernels.NodeTest`, so the
leaves are those of every other strategy; ``predict_leaf`` runs the eager walk.

Why generated rather than a hand-written kernel: one source for the node test on both
devices, nothing to install beyond torch, and CI can test the very code CUDA runs on
the CPU.  Measured on the 2-core CPU machine (XGBoost 500x8, 4,096-row blocks):
rows-outermost 132k rows/s, trees-outermost 193k, against native XGBoost's 140-170k;
index bound assertions cost a further 30% and are off, since every index comes from
tables this compiler built and inputs whose width was checked; int32 node tables
(:class:`~.kernels.NodeTest`) took the integrated walk from 109k to 158-198k rows/s.
Later, on the same machine: the LightGBM zero snap and ``isnan`` were recomputed at
every gathered node; ``v != v`` is one vector compare, and the snap now runs once per
block before the kernel (XGBoost 500x8: 113k -> 167k rows/s in one A/B run).  Walking
trees in depth stages (:func:`~.kernels.depth_stages`) took LightGBM 500x256 from 29k
to 42k in another (benchmarks/results/compile_throughput_cpu.md: 1.27x and 1.52x native).
Later still: every table lookup as an embedding (:func:`~.kernels.take`), which the
generated code reads without wrapping negative indices, and int32 node ids (half the
vector lanes of int64): LightGBM 500x256 1.51x -> 2.0x native in one alternated run,
20 XGBoost 100x6 forests combined 66k -> 72k rows/s.  Not kept, measured no faster:
a node's flags and threshold interleaved in one table (read through a bitcast), rows
feature-major, blocks of 2,048 or 8,192 rows, 6 or 8 depth stages, and a perfect walk
that tests all 63 nodes of a depth-6 tree into a bitmask instead of gathering.  What
did pay is that bitmask's first levels alone: a perfect walk's top 3 levels test every
node of the level, whose parameters are the same for every row
(:data:`~.kernels.UNIFORM_LEVELS`): those 20 forests 61-69k -> 85-89k rows/s.
On an H100 the Triton code it generates ran 8x the best eager strategy and 4x
Hummingbird's best (benchmarks/results/gpu/).  Deep LightGBM trees stay its weakest
case: a row still takes every level of its stage where native stops at the leaf.

Shapes are fixed: rows go through in blocks of :data:`BLOCK_ROWS` (a short last block
padded), so a job compiles once per block size and input dtype, never per batch.  The
first process on a machine compiles with ``torch.compile`` and, once its first block is
scored, leaves an ahead-of-time package for every later process (:mod:`.packages`),
which then loads it without tracing or compiling (benchmarks/results/compile_cache_cpu.md).
"""

from __future__ import annotations

import threading
import types
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import translated
from .packages import INDUCTOR_OPTIONS, default_store

__all__ = ["BLOCK_ROWS", "FusedBlocks"]

#: Row blocks per device: CPU caches favour small blocks; a GPU needs many rows in
#: flight (a short batch uses the small block, so one row does not cost a large one).
BLOCK_ROWS = {"cpu": (4096,), "cuda": (4096, 1 << 18)}

_Run = Callable[[torch.Tensor], torch.Tensor]


class FusedBlocks:
    """``walk(prepare(x))`` run in compiled row blocks, one compiled runner per block
    shape and dtype: a package from :mod:`.packages` when this machine has one, else
    ``torch.compile`` (then a package is built for the next process)."""

    def __init__(self, walk: nn.Module, *, prepare: _Run, device: torch.device):
        self.blocks = BLOCK_ROWS[device.type]
        self.walk = walk
        self.prepare = prepare
        self.store = default_store()
        self._runners: dict[tuple[int, torch.dtype], _Run] = {}
        self._compiled: _Run | None = None
        self._lock = threading.Lock()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts, start = [], 0
        if x.shape[0] == 0:  # the smallest block, so that no new shape is compiled
            return self._run(F.pad(x, (0, 0, 0, min(self.blocks))))[:0]
        while start < x.shape[0]:
            block = self._block_for(x.shape[0] - start)
            rows = x[start : start + block]
            padded = F.pad(rows, (0, 0, 0, block - rows.shape[0])) if len(rows) < block else rows
            parts.append(self._run(padded)[: rows.shape[0]])
            start += block
        return torch.cat(parts)

    def _block_for(self, remaining: int) -> int:
        fitting = [b for b in self.blocks if b >= remaining]
        return min(fitting) if fitting else max(self.blocks)

    def _run(self, rows: torch.Tensor) -> torch.Tensor:
        prepared = self.prepare(rows)
        key = (prepared.shape[0], prepared.dtype)
        if key in self._runners:
            return self._runners[key](prepared)
        # Threads scoring side by side wait here for the first one's runner: one compile,
        # and no export traced while another thread runs the walk.
        with self._lock:
            if key in self._runners:
                return self._runners[key](prepared)
            digest = self.store.digest(self.walk, prepared) if self.store else ""
            try:
                run = self.store.load(digest, prepared.device) if self.store else None
            except KeyError:
                run = None
            if run is None:
                run = self._compile()
            out = run(prepared)
            if self.store and run is self._compiled:  # first rows out, then the package
                self._build_package(prepared, digest)
            self._runners[key] = run
            return out

    def _compile(self) -> _Run:
        if self._compiled is None:
            compiled = torch.compile(
                _own_code(self.walk.forward),
                dynamic=False, fullgraph=True, options=dict(INDUCTOR_OPTIONS),
            )  # fmt: skip
            fix = "use strategy='tree_traversal', or 'auto'"
            what = "strategy 'fused' could not be compiled"

            def run(prepared: torch.Tensor) -> torch.Tensor:
                with translated("torch.compile", what, fix=fix, first_line=True):
                    return compiled(prepared)

            self._compiled = run
        return self._compiled

    def _build_package(self, example: torch.Tensor, digest: str) -> None:
        assert self.store is not None
        try:
            self.store.build_later(self.walk, example, digest)
        except Exception as exc:  # scoring goes on; only the next process's start is slower
            warnings.warn(
                f"strategy 'fused': no compiled package for later processes ({exc}); "
                "they will compile again", RuntimeWarning, stacklevel=2,
            )  # fmt: skip


def _own_code(
    method: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The bound method over a copy of its code object.  Dynamo keeps compiled graphs per
    code object, at most 8 of them: shared by every model, a process that scores its
    ninth fails; copied, each model's graphs (one per block size and dtype) stand alone."""
    fn = method.__func__  # type: ignore[attr-defined]
    own = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    return types.MethodType(own, method.__self__)  # type: ignore[attr-defined]

"""The ``fused`` strategy: each block of rows walks every tree in one generated kernel.

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
On an H100 the Triton code it generates ran 8x the best eager strategy and 4x
Hummingbird's best (benchmarks/results/gpu/).  Deep LightGBM trees are its weak case:
every tree takes every level up to the forest's depth, where native stops at the leaf.

Shapes are fixed: rows go through in blocks of :data:`BLOCK_ROWS` (a short last block
padded), so a job compiles once per block size and input dtype, never per batch.
Compiled code is cached by torch's inductor on disk (keyed by the traced graph, input
shapes and dtypes, device and torch version; the model's tables are graph inputs, not
constants): a second process traces the walk again (about 2 s on the 2-core machine) but
builds no kernel (benchmarks/results/compile_cache_cpu.md).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import translated

__all__ = ["BLOCK_ROWS", "FusedBlocks"]

#: Row blocks per device: CPU caches favour small blocks; a GPU needs many rows in
#: flight (a short batch uses the small block, so one row does not cost a large one).
BLOCK_ROWS = {"cpu": (4096,), "cuda": (4096, 1 << 18)}
#: Every index the kernel gathers with comes from our own tables (see module docstring).
_INDUCTOR_OPTIONS = {"assert_indirect_indexing": False}


class FusedBlocks:
    """``margins(x)`` of a :class:`~._compiler.TensorForest` run in compiled blocks."""

    def __init__(self, margins: Callable[[torch.Tensor], torch.Tensor], *, device: torch.device):
        self.blocks = BLOCK_ROWS[device.type]
        self.compiled: Callable[[torch.Tensor], torch.Tensor] = torch.compile(
            _own_code(margins), dynamic=False, fullgraph=True, options=dict(_INDUCTOR_OPTIONS)
        )

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
        fix = "use strategy='tree_traversal', or 'auto'"
        what = "strategy 'fused' could not be compiled"
        with translated("torch.compile", what, fix=fix, first_line=True):
            return self.compiled(rows.contiguous())


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

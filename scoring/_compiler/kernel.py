"""How a forest's margins are computed: one small protocol that every way implements.

A :class:`Kernel` takes rows ``[B, F]`` (already read at the model's precision, LightGBM's
near-zero values snapped) and returns each row's start plus every tree's leaf, added in
tree order at the accumulation dtype (``sums``), and each row's native leaf id per tree
(``leaf_ids``); ``selection`` is what was measured to set it up.  A compiled model is
then one kernel and one output transform (:class:`~scoring._compiler.TensorForest`):

* :class:`EagerKernel`: the eager strategies (``gemm``, ``tree_traversal``,
  ``perfect_tree_traversal``), a walk module to leaf positions, then the leaf sum;
* :class:`WalkKernel`: the walk every forest shares, the forest passed as tables
  (``fused``: walk.cpp on CPU, Triton on CUDA; ``triton``);
* :class:`CompiledKernel`: the walk generated and compiled per model (``compiled``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from .._inputs import Columns
from .fused import FusedBlocks
from .generic import GenericWalk
from .kernels import LeafSum
from .triton_walk import TritonWalk

__all__ = ["CompiledKernel", "EagerKernel", "Kernel", "WalkKernel"]

#: Each row's start (the base score, or zero): ``[B, K]`` for rows ``[B, F]`` (a tensor
#: or :class:`~scoring._inputs.Columns`: what has a ``shape``).
Start = Callable[[Any], torch.Tensor]


class Kernel(Protocol):
    name: str

    def sums(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, K]``: each row's start plus its leaves, in tree order (acc dtype)."""

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T]``: the native predictor's leaf id per row and tree."""

    def selection(self) -> dict[str, float]:
        """What was measured to choose how this kernel runs (empty: nothing)."""


class EagerKernel:
    """A walk module (rows -> leaf positions) and the leaf sum, over row chunks that keep
    the widest intermediate within a budget."""

    def __init__(self, name: str, paths: nn.Module, leaves: LeafSum, *, start: Start,
                 chunk_rows: int):  # fmt: skip
        self.name, self.paths, self.leaves = name, paths, leaves
        self.start, self.chunk_rows = start, chunk_rows

    def sums(self, x: torch.Tensor) -> torch.Tensor:
        parts = [self.leaves(self.paths(c), self.start(c)) for c in torch.split(x, self.chunk_rows)]
        return torch.cat(parts) if parts else self.leaves(self.paths(x), self.start(x))

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        parts = [self.leaves.native_ids(self.paths(c)) for c in torch.split(x, self.chunk_rows)]
        return torch.cat(parts) if parts else self.leaves.native_ids(self.paths(x))

    def selection(self) -> dict[str, float]:
        return {}


class WalkKernel:
    """The walk shared by every forest, over this forest's tables, for sums and leaf ids.
    Its sums also read a batch feature-major as it was read
    (:class:`~scoring._inputs.Columns`)."""

    def __init__(self, name: str, walk: GenericWalk | TritonWalk, *, start: Start):
        self.name, self.walk, self.start = name, walk, start

    def sums(self, x: torch.Tensor | Columns) -> torch.Tensor:
        return self.walk.sums(x, self.start(x))

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        return self.walk.leaf_ids(x)

    def selection(self) -> dict[str, float]:
        chosen = self.walk.schedule.selection()
        if isinstance(self.walk, GenericWalk):  # rows per call on a thread, measured too
            chosen["fused.chunk_rows"] = float(self.walk.chunk_rows)
        return chosen


class CompiledKernel:
    """The eager walk run trees-outermost under ``torch.compile`` in row blocks
    (:mod:`.fused`); leaf ids from the eager walk.  Its compiled blocks hold the
    interpreter lock, so calls side by side take turns."""

    name = "compiled"

    def __init__(self, blocks: FusedBlocks, *, eager: EagerKernel):
        self.blocks, self.eager = blocks, eager

    def sums(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        return self.eager.leaf_ids(x)

    def selection(self) -> dict[str, float]:
        return {}

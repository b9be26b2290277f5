"""Forest IR -> a torch module on a device, with the strategy picked and recorded.

``compile_forest`` is the stage's verb.  Strategy choice (``strategy="auto"``):

* on CPU ``fused``, the kernel every forest shares, wherever its tables fit (int32
  node ids: :func:`fused_fits`): it scored 5-14x the eager strategies on the benchmark
  shapes and ahead of them on the trivial one (``benchmarks/results``);
* ``gemm`` for shallow forests (depth <= 3, or <= 6 for small batches on CUDA): one
  batched matmul beats per-level gathers when trees are tiny;
* ``perfect_tree_traversal`` up to depth 10 while its 2**depth layout fits the memory
  limit: no child gathers;
* ``tree_traversal`` otherwise: any depth, memory linear in nodes.

Every strategy's tables are sized before anything is allocated (:data:`LAYOUT_BYTES`):
``auto`` passes over a layout past ``max_layout_bytes``, and a forced strategy past it
raises :class:`ResourceLimitError` naming the strategies that fit.

``fused`` walks every tree of a row block in one kernel, the forest passed as tables
built by one layout builder for both devices (:mod:`.generic`).  On CPU that is one C++
kernel compiled once per machine, with its layout and schedule chosen per model by
measurement; the backend ``auto`` times it against native (``scoring._model``).  On CUDA it is one
Triton kernel (:mod:`.triton_walk`), compiled once per machine and variant, never per
model, its schedule measured per model with device events; ``auto`` picks it for
forests large enough to repay that measurement (:func:`fused_pays`).  ``triton`` is
that kernel by name: on CUDA the same as ``fused``, on CPU under Triton's interpreter
(``TRITON_INTERPRET=1``), so anyone can check the CUDA kernel without a GPU.
``compiled`` is the older walk generated and compiled per model by torch.compile
(:mod:`.fused`), on either device.  A forced ``perfect_tree_traversal`` past the limit
raises :class:`ResourceLimitError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from .._inputs import Columns
from .._ir import Forest
from ..errors import CompileError, ResourceLimitError
from .chain import ChainForest
from .fused import FusedBlocks
from .generic import GenericWalk
from .kernel import CompiledKernel, EagerKernel, Kernel, WalkKernel
from .kernels import (
    ZERO_THRESHOLD,
    Gemm,
    LeafSum,
    NodeTest,
    PerfectTreeTraversal,
    TreeTraversal,
)
from .tables import (
    LeafTables,
    NodeParams,
    bitset_tables,
    gemm_layout,
    gemm_layout_bytes,
    perfect_layout,
    perfect_layout_bytes,
    traversal_layout,
    traversal_layout_bytes,
)
from .transforms import divided, transform
from .triton_walk import TritonWalk

__all__ = [
    "STRATEGIES",
    "Kernel",
    "TensorForest",
    "compile_forest",
    "choose_strategy",
    "fused_fits",
    "fused_pays",
    "transform",
]


@dataclass(frozen=True)
class _Built:
    """What a strategy builds: the eager walk, its leaf tables and the per-row cost
    (elements of the widest intermediate)."""

    paths: nn.Module
    leaves: LeafTables
    row_cost: int


#: A strategy builds a :class:`_Built` for a forest from its node test; a new strategy
#: is one function and one row of :data:`_BUILDERS`.
_Builder = Callable[[Forest, Callable[[NodeParams], NodeTest], int], _Built]
#: Default ceiling for a layout's tables.
LAYOUT_MAX_BYTES = 1 << 30
#: What each layout's tables take, computed from the Forest before any is built.
LAYOUT_BYTES: dict[str, Callable[[Forest], int]] = {
    "gemm": gemm_layout_bytes,
    "tree_traversal": traversal_layout_bytes,
    "perfect_tree_traversal": perfect_layout_bytes,
}
#: Elements of the widest intermediate per chunk of rows (bounds scratch memory).
_CHUNK_ELEMENTS = {"cpu": 1 << 22, "cuda": 1 << 27}
#: Node tests per row (trees x depth) from which ``fused`` is worth its set-up (a compile
#: on CUDA, tables and a measured schedule on CPU).
FUSED_MIN_TESTS = 1000


@dataclass(frozen=True)
class StrategyChoice:
    name: str
    reason: str


def choose_strategy(
    forest: Forest,
    *,
    device: torch.device,
    batch_size: int | None = None,
    max_layout_bytes: int = LAYOUT_MAX_BYTES,
) -> StrategyChoice:
    if device.type == "cpu" and fused_fits(forest):
        kept = _kept_layout(forest, max_layout_bytes)  # the eager walk fused keeps too
        if LAYOUT_BYTES[kept](forest) <= max_layout_bytes:
            return StrategyChoice("fused", "CPU: the kernel every forest shares")
    if device.type == "cuda" and fused_pays(forest):
        return StrategyChoice("fused", "CUDA, forest large enough to repay measuring a schedule")
    depth = forest.max_depth
    gemm_depth = 6 if device.type == "cuda" and (batch_size or 1 << 20) <= 4096 else 3
    if depth <= gemm_depth and gemm_layout_bytes(forest) <= max_layout_bytes:
        return StrategyChoice("gemm", f"max depth {depth} <= {gemm_depth}")
    need = perfect_layout_bytes(forest)
    if _perfect_fits(forest, max_layout_bytes):
        return StrategyChoice(
            "perfect_tree_traversal", f"max depth {depth} <= 10, layout {need >> 20} MiB"
        )
    reason = f"max depth {depth} > 10 or perfect layout {need >> 20} MiB too large"
    if traversal_layout_bytes(forest) > max_layout_bytes >= gemm_layout_bytes(forest):
        return StrategyChoice("gemm", f"{reason}, and the traversal layout too")
    return StrategyChoice("tree_traversal", reason)


def _perfect_fits(forest: Forest, max_bytes: int) -> bool:
    """Whether the perfect layout is worth it (depth <= 10) and within its memory limit."""
    return forest.max_depth <= 10 and perfect_layout_bytes(forest) <= max_bytes


def fused_fits(forest: Forest) -> bool:
    """Whether the shared walk's tables address the forest (int32 ids: every tree takes
    as many slots as the largest)."""
    return forest.n_trees * max((t.n_nodes for t in forest.trees), default=1) < 2**31


def fused_pays(forest: Forest) -> bool:
    """Whether the forest is large enough for ``fused``: on CUDA its schedule is measured
    first; on CPU ``auto`` times it (its schedule measured first) against native."""
    return forest.n_trees * max(forest.max_depth, 1) >= FUSED_MIN_TESTS


class TensorForest(nn.Module):
    """Rows ``[B, F]`` -> margins ``[B, K]`` (base score and averaging included): one
    :class:`~.kernel.Kernel` for the sums and leaf ids, then the output's arithmetic.

    ``kernel_for`` builds the kernel from the module on its device (default: the eager
    walk over ``paths`` and ``leaves``, which every strategy keeps for what its kernel
    does not give).
    """

    base_score: torch.Tensor

    def __init__(
        self,
        forest: Forest,
        paths: nn.Module,
        leaves: LeafSum,
        *,
        device: torch.device,
        row_cost: int,
        name: str = "eager",
        kernel_for: Callable[[TensorForest], Kernel] | None = None,
    ):
        super().__init__()
        self.paths = paths
        self.leaves = leaves
        self.acc_dtype = torch.float32 if forest.accumulate_dtype == "float32" else torch.float64
        self.register_buffer(
            "base_score", torch.tensor(forest.base_score, dtype=self.acc_dtype), persistent=False
        )
        # Averaging forests (scikit-learn's) add from zero and divide by the tree count.
        self.divisor = (forest.average_over or forest.n_trees) if forest.average else 1
        # CatBoost adds its trees from zero, then scales and adds the bias.
        self.base_last, self.scale = forest.base_last, forest.scale
        self.zero_snap = forest.zero_snap
        self.to(device)
        # Rows per chunk so that the widest intermediate stays within a fixed budget.
        chunk_rows = max(1, _CHUNK_ELEMENTS[device.type] // max(row_cost, 1))
        self.eager = EagerKernel(name, paths, leaves, start=self._start, chunk_rows=chunk_rows)
        self.kernel: Kernel = kernel_for(self) if kernel_for else self.eager

    def forward(self, x: torch.Tensor | Columns) -> torch.Tensor:
        """Margins of rows ``x``; :class:`Columns` only where the kernel is the shared
        walk (:attr:`takes_columns`)."""
        return self._finish(self.kernel.sums(self._snapped(x)))

    @property
    def takes_columns(self) -> bool:
        """Whether :meth:`forward` reads a batch feature-major, as it was read."""
        return isinstance(self.kernel, WalkKernel)

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        """The native predictor's leaf id per row and tree, ``[B, T]``."""
        return self.kernel.leaf_ids(self._snapped(x))

    def _snapped(self, x: Any) -> Any:
        """LightGBM's near-zero values as zero (copied columns where one changes)."""
        if not self.zero_snap:
            return x
        if isinstance(x, Columns):
            zero = ZERO_THRESHOLD[torch.float64 if x.dtype == np.float64 else torch.float32]
            return Columns([_snap(a, zero) for a in x.arrays])
        zero = ZERO_THRESHOLD[x.dtype]
        if x.device.type == "cpu":  # numpy's three ops cost a third of torch's on few rows
            return torch.from_numpy(_snap(x.detach().numpy(), zero))
        return torch.where(x.abs() <= zero, torch.zeros_like(x), x)

    def _sums(self, x: torch.Tensor) -> torch.Tensor:
        """The eager walk's sums (the reference the other kernels are held to)."""
        return self.eager.sums(self._snapped(x))

    def _prepared_sums(self, x: torch.Tensor) -> torch.Tensor:
        # Trees outermost: a block's walk is elementwise over [T, B] (see .fused).
        positions = self.paths(x.t(), transposed=True)
        return self.leaves(positions, self._start(x), transposed=True)

    def _start(self, x: torch.Tensor) -> torch.Tensor:
        """What the trees are added to, per row: the base score (zero when averaging or
        when it comes last)."""
        start = self.base_score.expand(x.shape[0], -1)
        return torch.zeros_like(start) if self.base_last else start

    def _finish(self, total: torch.Tensor) -> torch.Tensor:
        total = divided(total, self.divisor) if self.divisor != 1 else total
        if not self.base_last:
            return total
        return (total * self.scale if self.scale != 1.0 else total) + self.base_score


def _snap(column: np.ndarray, zero: float) -> np.ndarray:
    near = np.abs(column) <= zero
    return np.where(near, column.dtype.type(0), column) if near.any() else column


class _PreparedWalk(nn.Module):
    """Snapped rows -> sums, trees outermost: the unit ``compiled`` compiles (and
    packages); the output's arithmetic stays outside, as for every kernel."""

    def __init__(self, forest: TensorForest):
        super().__init__()
        self.forest = forest

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forest._prepared_sums(x)


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    """Row-major rows for a compiled block: a block of rows' features then share cache
    lines (feature-major measured slower)."""
    return x.contiguous()


def _kernel_for(forest: Forest, name: str, device: torch.device
                ) -> Callable[[TensorForest], Kernel] | None:  # fmt: skip
    """How strategy ``name`` computes the sums on ``device`` (None: the eager walk)."""
    if name == "triton" or (name == "fused" and device.type == "cuda"):
        return lambda m: WalkKernel(name, TritonWalk(forest, acc=m.acc_dtype, device=device),
                                    start=m._start)  # fmt: skip
    if name == "fused":
        return lambda m: WalkKernel(name, GenericWalk(forest, acc=m.acc_dtype), start=m._start)
    if name == "compiled":
        return lambda m: CompiledKernel(
            FusedBlocks(_PreparedWalk(m), prepare=_contiguous, device=device), eager=m.eager
        )
    return None


def compile_forest(
    forest: Forest,
    *,
    device: torch.device,
    strategy: str = "auto",
    batch_size: int | None = None,
    max_layout_bytes: int = LAYOUT_MAX_BYTES,
) -> tuple[TensorForest | ChainForest, StrategyChoice]:
    if forest.stages:  # a chain: its stages compiled one by one, run in order
        return _compile_chain(forest, device=device, strategy=strategy, batch_size=batch_size,
                              max_layout_bytes=max_layout_bytes)  # fmt: skip
    if forest.n_trees == 0:
        raise CompileError(f"{forest.described} has no trees to compile")
    if strategy == "auto":
        choice = choose_strategy(
            forest, device=device, batch_size=batch_size, max_layout_bytes=max_layout_bytes
        )
    elif strategy in STRATEGIES:
        choice = StrategyChoice(strategy, "requested")
    else:
        raise CompileError(f"unknown strategy {strategy!r}; expected 'auto' or one of {STRATEGIES}")
    bits = bitset_tables(forest)

    def test(params: NodeParams) -> NodeTest:
        return NodeTest(params, bits, cat_check_before_trunc=forest.cat_check_before_trunc)

    acc = torch.float32 if forest.accumulate_dtype == "float32" else torch.float64
    _check_fits(forest, choice.name, max_layout_bytes)
    built = _BUILDERS[choice.name](forest, test, max_layout_bytes)
    leaf_sum = LeafSum(built.leaves, n_outputs=forest.n_outputs, dtype=acc)
    module = TensorForest(forest, built.paths, leaf_sum, device=device, row_cost=built.row_cost,
                          name=choice.name,
                          kernel_for=_kernel_for(forest, choice.name, device)).eval()  # fmt: skip
    kernel = module.kernel
    if isinstance(kernel, WalkKernel):
        described = kernel.walk.schedule.described()
        choice = StrategyChoice(choice.name, f"{choice.reason}; one kernel for every forest, "
                                f"{described}")  # fmt: skip
    elif isinstance(kernel, CompiledKernel):
        walk = getattr(built.paths, "name", "tree")
        choice = StrategyChoice(choice.name, f"{choice.reason}; {walk} compiled in row blocks")
    return module, choice


def _compile_chain(
    forest: Forest,
    *,
    device: torch.device,
    strategy: str,
    batch_size: int | None,
    max_layout_bytes: int,
) -> tuple[ChainForest, StrategyChoice]:
    modules: list[nn.Module] = []
    choices: list[StrategyChoice] = []
    for stage in forest.stages:
        module, choice = compile_forest(
            stage, device=device, strategy=strategy, batch_size=batch_size,
            max_layout_bytes=max_layout_bytes,
        )  # fmt: skip
        modules.append(module)
        choices.append(choice)
    chain = ChainForest(modules, forest.stages, forest.stage_targets)
    return chain, StrategyChoice(choices[0].name, f"a chain of {len(modules)}: {choices[0].reason}")


def _kept_layout(forest: Forest, max_bytes: int) -> str:
    """The eager layout a kernel strategy keeps beside its kernel (for leaf ids): the
    perfect one where it fits, else the traversal one."""
    return "perfect_tree_traversal" if _perfect_fits(forest, max_bytes) else "tree_traversal"


def _check_fits(forest: Forest, strategy: str, max_bytes: int) -> None:
    """Refuse a strategy whose tables would pass ``max_bytes``, before building any
    (``fused`` builds the perfect layout where it fits, else the traversal one)."""
    kernels = ("fused", "compiled", "triton")
    layout = _kept_layout(forest, max_bytes) if strategy in kernels else strategy
    need = LAYOUT_BYTES[layout](forest)
    if need <= max_bytes:
        return
    fits = [name for name, size in LAYOUT_BYTES.items() if size(forest) <= max_bytes]
    fix = (
        f"use strategy='auto' (or {' or '.join(map(repr, fits))})"
        if fits
        else ("no strategy fits: raise the limit or score with backend='native'")
    )
    raise ResourceLimitError(
        f"strategy {strategy!r} needs {need / 2**20:,.1f} MiB for {forest.described} "
        f"({forest.n_trees} trees, depth {forest.max_depth}; limit {max_bytes >> 20} MiB); {fix}"
    )


def _perfect(forest: Forest, test: Callable[[NodeParams], NodeTest], max_bytes: int) -> _Built:
    perfect = perfect_layout(forest)
    walk = PerfectTreeTraversal(perfect, test(perfect.params))
    return _Built(walk, perfect.leaves, _traversal_cost(forest))


def _gemm(forest: Forest, test: Callable[[NodeParams], NodeTest], max_bytes: int) -> _Built:
    gemm = gemm_layout(forest)
    cost = int(gemm.path.shape[0] * (gemm.path.shape[1] + gemm.path.shape[2]))
    return _Built(Gemm(gemm, test(gemm.params)), gemm.leaves, cost)


def _traversal(forest: Forest, test: Callable[[NodeParams], NodeTest], max_bytes: int) -> _Built:
    trav = traversal_layout(forest)
    return _Built(TreeTraversal(trav, test(trav.params)), trav.leaves, _traversal_cost(forest))


def _fused(forest: Forest, test: Callable[[NodeParams], NodeTest], max_bytes: int) -> _Built:
    """The perfect walk where it fits (no child gathers), else the plain one: compiled,
    or (``fused`` on CPU) the eager walk for leaf ids beside the shared kernel."""
    built = (_perfect if _perfect_fits(forest, max_bytes) else _traversal)(forest, test, max_bytes)
    return replace(built, row_cost=forest.n_features)  # no [B, T] scratch


def _traversal_cost(forest: Forest) -> int:
    return forest.n_trees * 8  # traversals: a handful of [B, T] temporaries


#: The strategy table: name -> builder.
_BUILDERS: dict[str, _Builder] = {
    "gemm": _gemm,
    "tree_traversal": _traversal,
    "perfect_tree_traversal": _perfect,
    "fused": _fused,
    "compiled": _fused,
    "triton": _fused,
}
STRATEGIES = tuple(_BUILDERS)

"""The tensor strategies as torch modules: rows in, leaf positions out.

Every strategy maps ``x [B, F]`` to leaf positions ``[B, T]`` in its own leaf table;
:class:`LeafSum` turns those into margins.  The node test is shared by all of them
(:meth:`NodeTest.go_left`): ``x <= t``, then missing values, then categorical bitsets,
so the three strategies cannot disagree on a branch.  Features are gathered per node,
never multiplied by a one-hot matrix, so a NaN in a feature a node does not use cannot
poison the row and TF32 matmuls cannot round a feature.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import CompileError
from .tables import (
    BitsetTables,
    GemmLayout,
    LeafTables,
    NodeParams,
    PerfectLayout,
    TraversalLayout,
    threshold32,
    zero_threshold,
)


def take(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` for indices this compiler made, int32 or int64, always in range.

    As an embedding lookup, inductor's generated code reads the table directly, where
    ``table[index]`` first wraps negative indices (a compare and a blend per lookup,
    on every level of every tree)."""
    if table.ndim == 1:
        return F.embedding(index, table.unsqueeze(1)).squeeze(-1)
    return F.embedding(index, table)


def _id_dtype(size: int) -> type[np.signedinteger]:
    """Node ids for a table of ``size`` entries: int32 where they fit (see :func:`take`)."""
    return np.int32 if size < 2**31 else np.int64


def _buffer(module: nn.Module, name: str, array: np.ndarray) -> None:
    module.register_buffer(name, torch.from_numpy(np.ascontiguousarray(array)), persistent=False)


#: Bits above the feature index in :attr:`NodeTest.packed` (feature < 2**28): int32
#: halves the bytes the walk moves per node against int64.
_DEFAULT_LEFT, _MISSING_ZERO, _IS_CAT = 1 << 28, 1 << 29, 1 << 30
_FEATURE_MASK = (1 << 28) - 1
#: :func:`zero_threshold` by input dtype, as plain floats: the node test is traced by
#: torch.compile, which cannot call numpy.
ZERO_THRESHOLD = {
    torch.float32: float(zero_threshold(np.float32)),
    torch.float64: float(zero_threshold(np.float64)),
}


def pack_node_flags(p: NodeParams) -> np.ndarray:
    """Each node's feature and flags in one int32 (:class:`NodeTest`, walk.cpp)."""
    if p.feature.size and int(p.feature.max()) > _FEATURE_MASK:
        raise CompileError(f"a split on feature {int(p.feature.max())}: at most 2**28 features")
    return (
        p.feature.astype(np.int32)
        | np.where(p.default_left, _DEFAULT_LEFT, 0).astype(np.int32)
        | np.where(p.missing_zero, _MISSING_ZERO, 0).astype(np.int32)
        | np.where(p.is_cat, _IS_CAT, 0).astype(np.int32)
    )


class NodeTest(nn.Module):
    """Flattened node parameters ``[T * N]`` and the decision at a node.

    A node's feature and its flags (default left, missing-as-zero, categorical) share one
    int32 so a level of every tree costs one gather for them instead of four: on CPU the
    gathers, not the comparisons, are the cost.
    """

    packed: torch.Tensor
    thr32: torch.Tensor
    thr64: torch.Tensor
    cat_row: torch.Tensor
    cat_unknown_left: torch.Tensor
    bits_left: torch.Tensor
    bits_known: torch.Tensor

    def __init__(self, p: NodeParams, bits: BitsetTables, *, cat_check_before_trunc: bool):
        super().__init__()
        self.width = int(p.feature.shape[1])
        _buffer(self, "packed", pack_node_flags(p).reshape(-1))
        _buffer(self, "thr32", threshold32(p.threshold).reshape(-1))
        _buffer(self, "thr64", p.threshold.reshape(-1))
        self.has_zero = bool(p.missing_zero.any())
        self.has_cat = bool(p.is_cat.any())
        _buffer(self, "cat_row", p.cat_row.reshape(-1))
        _buffer(self, "cat_unknown_left", p.cat_unknown_left.reshape(-1))
        _buffer(self, "bits_left", bits.left.reshape(-1))
        _buffer(self, "bits_known", bits.known.reshape(-1))
        self.words = int(bits.left.shape[1])
        self.cat_check_before_trunc = cat_check_before_trunc

    def go_left(
        self, x: torch.Tensor, node: torch.Tensor, *, transposed: bool = False
    ) -> torch.Tensor:
        """Decision of flat node ids ``node [B, M]`` for rows ``x [B, F]``.

        ``transposed``: ``x`` is ``[F, B]`` and ``node`` ``[M, B]`` (trees outermost).
        ``node [1, M]`` (``[M, 1]`` transposed): the same nodes for every row, their
        parameters read once.
        """
        packed = take(self.packed, node)
        feature = (packed & _FEATURE_MASK).to(torch.int64)
        if node.shape[0] == 1 and x.shape[0] != 1 and not transposed:
            v = x[:, feature[0]]
        elif node.shape[1] == 1 and x.shape[1] != 1 and transposed:
            v = take(x, feature[:, 0])  # a feature row per tree: strided loads, no gather
        else:
            v = torch.gather(x, 0 if transposed else 1, feature)
        thr = take(self.thr32 if x.dtype == torch.float32 else self.thr64.to(x.dtype), node)
        left = v <= thr
        missing = v != v  # isnan, as one vector compare in generated code
        if self.has_zero:
            zero = ZERO_THRESHOLD[x.dtype]
            missing = missing | ((packed & _MISSING_ZERO) != 0) & (v.abs() <= zero)
        left = torch.where(missing, (packed & _DEFAULT_LEFT) != 0, left)
        if self.has_cat:
            is_cat = ((packed & _IS_CAT) != 0) & ~torch.isnan(v)
            left = torch.where(is_cat, self._category_left(v, node), left)
        return left

    def _category_left(self, v: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
        trunc = torch.trunc(v)
        valid = (v >= 0) if self.cat_check_before_trunc else (trunc >= 0)
        valid = valid & (trunc < self.words * 32)  # also false for +inf and NaN
        code = torch.where(valid, trunc, torch.zeros_like(trunc)).to(torch.int64)
        at = self.cat_row[node] * self.words + (code >> 5)
        bit = code & 31
        in_left = ((self.bits_left[at] >> bit) & 1).bool()
        known = ((self.bits_known[at] >> bit) & 1).bool()
        return torch.where(valid & known, in_left, self.cat_unknown_left[node])


def _across(per_tree: torch.Tensor, x: torch.Tensor, transposed: bool) -> torch.Tensor:
    """A per-tree vector broadcast over the rows of ``x``: ``[B, T]``, or ``[T, B]``."""
    if transposed:
        return per_tree[:, None].expand(-1, x.shape[1])
    return per_tree.expand(x.shape[0], -1)


#: Depth stages of :class:`TreeTraversal` (see :func:`depth_stages`).  For LightGBM
#: 500x256 (tree depths 10 to 30), 4 stages walk 9,775 tree-levels per row instead of
#: 15,000; measured on 2 cores: 29k -> 42k rows/s under ``fused``, 8.6k -> 12.4k eager
#: (8 stages: 9,016 tree-levels and no faster, for twice the copies).
WALK_STAGES = 4


def depth_stages(tree_depth: np.ndarray, *, stages: int) -> list[tuple[int, int]]:
    """``(trees, levels)`` per stage for trees sorted deepest first: a stage walks only
    the trees that have not all reached a leaf yet, so a forest of mixed depths (LightGBM
    grows leaf-wise: depths 10 to 30 in one model) skips the levels its shallow trees do
    not have.  Stage ends are depth quantiles, so few stages capture most of the saving
    (each stage costs a copy of the node ids)."""
    depths = np.sort(tree_depth)
    cuts = np.quantile(depths, np.arange(1, stages) / stages, method="lower").astype(int)
    ends = sorted({*cuts.tolist(), int(depths[-1])} - {0}) if depths.size else []
    out, done = [], 0
    for end in ends:
        out.append((int((depths > done).sum()), end - done))
        done = end
    return out


class TreeTraversal(nn.Module):
    """Walk every tree one level per step with gathers; any depth.

    Trees run deepest first, in :func:`depth_stages`: a tree stops being walked once
    every path of it has reached its leaf (leaves loop to themselves, so walking more
    levels than a tree has never changes its leaf).
    """

    name = "tree_traversal"
    base: torch.Tensor
    child: torch.Tensor
    restore: torch.Tensor
    test: NodeTest

    def __init__(self, layout: TraversalLayout, test: NodeTest, *, stages: int = WALK_STAGES):
        super().__init__()
        self.test = test
        self.depth = layout.depth
        n_trees, width = layout.left.shape
        base = np.arange(n_trees, dtype=np.int64)[:, None] * width
        # Flat ids like `node`; a node's right child right after its left: one gather.
        children = np.stack([layout.left + base, layout.right + base], axis=-1)
        ids = _id_dtype(children.size)
        _buffer(self, "child", children.reshape(-1).astype(ids))
        deepest_first = np.argsort(-layout.tree_depth, kind="stable")
        _buffer(self, "base", base[deepest_first, 0].astype(ids))
        _buffer(self, "restore", np.argsort(deepest_first))
        self.stages = depth_stages(layout.tree_depth, stages=stages)

    def forward(self, x: torch.Tensor, *, transposed: bool = False) -> torch.Tensor:
        """Leaf positions ``[B, T]``; ``transposed``: ``x [F, B]`` -> ``[T, B]``."""
        trees = 0 if transposed else 1
        base = _across(self.base, x, transposed)
        node = base
        for count, levels in self.stages:
            walking = node.narrow(trees, 0, count)
            for _ in range(levels):
                right = ~self.test.go_left(x, walking, transposed=transposed)
                walking = take(self.child, 2 * walking + right.to(walking.dtype))
            node = torch.cat([walking, node.narrow(trees, count, node.shape[trees] - count)], trees)
        # IR node id == leaf table position; trees back in the forest's order.
        return (node - base).index_select(trees, self.restore)


#: Levels of :class:`PerfectTreeTraversal`'s compiled walk taken by testing every node
#: of the level and keeping each row's: those nodes are the same for every row, so their
#: parameters are read once per tree and a feature is a strided load, where a per-row
#: node costs three gathers.  Measured on 2 cores (20 XGBoost 100x6 forests combined,
#: one run each): 61-69k rows/s with none, 70k with 1, 76-79k with 2, 89k with 3, 88-92k
#: with 4 (a level of 16 nodes).
UNIFORM_LEVELS = 3


class PerfectTreeTraversal(nn.Module):
    """Complete trees in heap order: the next node is index arithmetic, no child gather.

    Trees outermost (the compiled walk), the first :data:`UNIFORM_LEVELS` levels test
    all their nodes; eagerly that would materialise a tensor per node, so they gather.
    """

    name = "perfect_tree_traversal"
    base: torch.Tensor
    test: NodeTest

    def __init__(self, layout: PerfectLayout, test: NodeTest):
        super().__init__()
        self.test = test
        self.depth = layout.depth
        n_trees, width = layout.params.feature.shape
        _buffer(self, "base", np.arange(n_trees, dtype=_id_dtype(n_trees * width)) * width)

    def forward(self, x: torch.Tensor, *, transposed: bool = False) -> torch.Tensor:
        """Leaf positions ``[B, T]``; ``transposed``: ``x [F, B]`` -> ``[T, B]``."""
        base = _across(self.base, x, transposed)
        pos = torch.zeros_like(base)
        for level in range(self.depth):
            if transposed and level < UNIFORM_LEVELS:
                right = self._right_of_level(x, level, pos)
            else:
                right = ~self.test.go_left(x, base + pos, transposed=transposed)
            pos = 2 * pos + 1 + right.to(pos.dtype)
        return pos - (2**self.depth - 1)

    def _right_of_level(self, x: torch.Tensor, level: int, pos: torch.Tensor) -> torch.Tensor:
        """Which rows go right at ``level``, ``x [F, B]`` and heap positions ``pos [T, B]``
        on it: every node of the level tested, each row keeping its own node's answer."""
        first = 2**level - 1
        right = self._goes_right(x, first)  # the rows at any other node replace theirs
        for k in range(first + 1, 2 * first + 1):
            right = torch.where(pos == k, self._goes_right(x, k), right)
        return right

    def _goes_right(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Every row tested at heap position ``k`` of its tree: ``[T, B]``."""
        return ~self.test.go_left(x, (self.base + k)[:, None], transposed=True)


class Gemm(nn.Module):
    """All node tests at once, then one batched matmul against the path matrix."""

    name = "gemm"
    nodes: torch.Tensor
    path: torch.Tensor
    n_left: torch.Tensor
    test: NodeTest

    def __init__(self, layout: GemmLayout, test: NodeTest):
        super().__init__()
        self.test = test
        n_trees, n_inner = layout.params.feature.shape
        _buffer(self, "nodes", np.arange(n_trees * n_inner, dtype=np.int64))
        _buffer(self, "path", layout.path)
        _buffer(self, "n_left", layout.n_left)
        self.shape = (n_trees, n_inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        left = self.test.go_left(x, self.nodes.expand(rows, -1))
        left = left.to(torch.float32).view(rows, *self.shape).transpose(0, 1)  # [T, B, I]
        # Integer-valued float32 matmul is exact (|sums| <= depth), TF32 or not.
        counts = torch.bmm(left, self.path)  # [T, B, L]
        hit = counts == self.n_left.unsqueeze(1)
        return hit.to(torch.int8).argmax(dim=2).transpose(0, 1)  # [B, T]


class LeafSum(nn.Module):
    """Leaf positions ``[B, T]`` -> margins ``[B, K]``, added tree by tree from a start
    (the base score), in the accumulation dtype.

    A float sum's bits depend on its order, and every framework adds its trees one by
    one in tree order from its base score (per output group), so that is the order
    here: eagerly a loop over the trees, each step vectorised over the rows; compiled
    (``fused``) a reduction over the trees with the start as its first term, which
    inductor's CPU code runs in order, one accumulator per row.
    """

    base: torch.Tensor
    value: torch.Tensor
    native_id: torch.Tensor
    members: torch.Tensor

    def __init__(self, leaves: LeafTables, *, n_outputs: int, dtype: torch.dtype):
        super().__init__()
        n_trees, width = leaves.native_id.shape
        self.n_outputs = n_outputs
        self.vector = leaves.value.ndim == 3
        _buffer(self, "base", np.arange(n_trees, dtype=np.int64) * width)
        shape = (n_trees * width, -1) if self.vector else (n_trees * width,)
        _buffer(self, "value", leaves.value.reshape(shape))
        self.value = self.value.to(dtype)
        _buffer(self, "native_id", leaves.native_id.reshape(-1))
        group = np.zeros(n_trees, np.int64) if leaves.group is None else leaves.group
        # Each output's trees in tree order, one row per output (padded with -1).
        per_output = [np.flatnonzero(group == k) for k in range(n_outputs)]
        members = np.full((n_outputs, max(map(len, per_output))), -1, dtype=np.int64)
        for k, trees in enumerate(per_output):
            members[k, : len(trees)] = trees
        self.ragged = bool((members < 0).any())
        _buffer(self, "members", members)

    def forward(
        self, pos: torch.Tensor, start: torch.Tensor, *, transposed: bool = False
    ) -> torch.Tensor:
        """Margins ``[B, K]`` of leaf positions ``[B, T]`` (``transposed``: ``[T, B]``)
        added to ``start`` ``[B, K]``."""
        trees_first = pos if transposed else pos.t()
        vals = take(self.value, trees_first + self.base[:, None])  # [T, B] or [T, B, K]
        if self.vector:  # rows innermost: the compiled reduction vectorises over them
            return self._in_order(vals.permute(0, 2, 1), start.t()).t()
        outputs = [self._in_order(self._of_output(vals, k), start[:, k]) for k in
                   range(self.n_outputs)]  # fmt: skip
        return torch.stack(outputs, dim=1)

    def _of_output(self, vals: torch.Tensor, k: int) -> torch.Tensor:
        """Output ``k``'s trees, in order (zeros pad an output with fewer trees)."""
        if self.n_outputs == 1:
            return vals
        trees = self.members[k]
        if not self.ragged:
            return vals[trees]
        picked = vals[trees.clamp(min=0)]
        return torch.where((trees >= 0)[:, None], picked, torch.zeros_like(picked))

    @staticmethod
    def _in_order(terms: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """``start + terms[0] + terms[1] + ...``, rounded after every addition."""
        if torch.compiler.is_compiling() and reduces_in_order(terms.device):
            return torch.cat([start.unsqueeze(0), terms]).sum(dim=0)
        total = start.clone()
        for term in terms:
            total.add_(term)
        return total

    def native_ids(self, pos: torch.Tensor) -> torch.Tensor:
        return self.native_id[pos + self.base]


def reduces_in_order(device: torch.device) -> bool:
    """Whether inductor's sum over a leading dimension adds its terms in order there:
    its C++ loops on CPU do; its Triton reductions on CUDA add in a tree (an H200 found
    averaging forests 1-2 ulp off), so there the sum stays a chain of additions."""
    return device.type == "cpu"

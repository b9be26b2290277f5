"""Exact path-dependent TreeSHAP as a tensor program: per-feature contributions to the
margin for a batch of rows, on CPU or CUDA.

This is the algorithm behind XGBoost's ``pred_contribs``, LightGBM's ``pred_contrib``
and ``shap.TreeExplainer(feature_perturbation="tree_path_dependent")``, batched the way
GPUTreeShap decomposes it: every root-to-leaf path of every tree is one row of a table.
For the ``d`` distinct features split on along a path, the table holds ``z_j``, the
share of training cover that follows the path's edges on feature ``j`` (the product of
child over parent cover along them, as the framework's own TreeSHAP reads cover), and
for a batch the node test of scoring (:class:`~.kernels.NodeTest`: thresholds, missing
values and default sides, categorical bitsets) gives ``o_j``, 1 when the row follows
every one of those edges.  The path's leaf value ``v`` then gives feature ``i``

    phi_i = v (o_i - z_i) sum_s w(s, d) [t^s] prod_{j != i} (z_j + o_j t),
    w(s, d) = s! (d - 1 - s)! / d!,

its Shapley value in the game "the leaf's weight when the features of S are known"
(Lundberg et al., 2020).  Since ``w(s, d)`` is the Beta integral of
``t^s (1 - t)^(d - 1 - s)``, the sum is the integral over ``[0, 1]`` of
``prod_{j != i} (z_j + t (o_j - z_j))``, a polynomial that Gauss-Legendre quadrature
integrates exactly (the formulation of Linear TreeShap and GPUTreeShap's successors).
Paths are grouped by ``d`` so that each group is dense ``[rows, paths, nodes, d]``
arithmetic with no loop over ``d``; and since a path's answer depends on a row only
through which of its slots the row follows, short paths answer from a table of all
``2**d`` cases built once.  Everything runs in float64.

The bias column is the expected margin: the base score plus each tree's leaf values
weighted by cover (a node's mean is its children's cover-weighted means over its own
cover, as XGBoost fills it).  Averaging forests and scaled sums (CatBoost) weight
contributions as they weight leaves, so every row sums to the model's margin.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn

from .._ir import Forest, Tree
from ..errors import UnsupportedModelError
from .kernels import ZERO_THRESHOLD, NodeTest, take
from .tables import NodeParams, bitset_tables, node_params

__all__ = ["ContributionTables", "Contributions", "contribution_tables"]

#: Elements of the widest intermediate per chunk of rows (bounds scratch memory).
_CHUNK_ELEMENTS = {"cpu": 1 << 23, "cuda": 1 << 27}
#: Elements of every group's answer table together (float64: 256 MiB).
_TABLE_ELEMENTS = 1 << 25
#: Paths of a group differ in length by less than this many edges (the shorter ones are
#: padded: LightGBM's paths of 3 features run from 3 to 20 edges).
_EDGE_STEP = 4

#: A path as built: its edges (node column, went left, slot), each slot's cover share
#: and output column, and its leaf value.
_Path = tuple[list[tuple[int, bool, int]], np.ndarray, np.ndarray, float]


@dataclass
class PathGroup:
    """Every path with ``d`` distinct features, padded to its longest (``E`` edges)."""

    d: int
    node: np.ndarray  # int64 [P, E]: the edge's node, as an index into the inner-node table
    left: np.ndarray  # bool [P, E]: the edge is its node's left branch
    slot: np.ndarray  # int64 [P, E]: the edge's feature slot in [0, d); d for padding
    zero: np.ndarray  # float64 [P, d]: cover share of the slot's edges
    target: np.ndarray  # int64 [P, d]: feature * n_outputs + output, the slot's column
    value: np.ndarray  # float64 [P]: the leaf value, weighted as the margin adds it


@dataclass
class ContributionTables:
    params: NodeParams  # [T, I]: every tree's inner nodes
    groups: list[PathGroup]
    bias: np.ndarray  # float64 [K]: the expected margin
    n_features: int
    n_outputs: int


def contribution_tables(forest: Forest) -> ContributionTables:
    """The path tables of ``forest``; refused for models TreeSHAP does not apply to."""
    _check(forest)
    weight = 1.0 / (forest.average_over or forest.n_trees) if forest.average else 1.0
    weight *= forest.scale if forest.base_last else 1.0
    inner = [np.flatnonzero(~t.is_leaf) for t in forest.trees]
    width = max(max(i.size for i in inner), 1)
    k = forest.n_outputs
    expected = np.zeros(k)
    paths: dict[tuple[int, int], list[_Path]] = defaultdict(list)
    for t, tree in enumerate(forest.trees):
        expected += _node_means(tree)[0]
        column = {int(n): t * width + i for i, n in enumerate(inner[t])}
        for leaf, edges, zero, features in _paths(tree):
            edges_at = [(column[parent], left, slot) for parent, left, slot in edges]
            for output in np.flatnonzero(tree.value[leaf]):
                target = features * k + output
                key = (len(features), -(-len(edges) // _EDGE_STEP))  # no long padding
                paths[key].append((edges_at, zero, target, tree.value[leaf, output]))
    return ContributionTables(
        params=node_params(forest, [np.asarray(i) for i in inner], width),
        groups=[_group(d, rows, weight) for (d, _), rows in sorted(paths.items()) if d > 0],
        bias=forest.base_score + weight * expected,
        n_features=forest.n_features,
        n_outputs=k,
    )


def _check(forest: Forest) -> None:
    what = forest.described
    if forest.stages:
        raise UnsupportedModelError(f"contributions of a chain ({what}) are not supported")
    if forest.post_transform == "isolation":
        raise UnsupportedModelError(f"{what} has no margin to explain (isolation path lengths)")
    if any(t.cover is None for t in forest.trees):
        raise UnsupportedModelError(
            f"{what} carries no node covers, which TreeSHAP needs; contributions are "
            "available for XGBoost, LightGBM and scikit-learn tree models"
        )


def _node_means(tree: Tree) -> np.ndarray:
    """Each node's cover-weighted mean leaf value ``[n_nodes, K]`` (children follow their
    parents in every importer, so one reverse sweep fills it)."""
    assert tree.cover is not None
    mean = tree.value.copy()
    for node in np.flatnonzero(~tree.is_leaf)[::-1]:
        left, right = tree.left[node], tree.right[node]
        total = tree.cover[left] * mean[left] + tree.cover[right] * mean[right]
        own = tree.cover[node]
        mean[node] = total / own if own > 0 else 0.0
    return mean


def _paths(
    tree: Tree,
) -> list[tuple[int, list[tuple[int, bool, int]], np.ndarray, np.ndarray]]:
    """Per leaf: its edges (parent, went left, feature slot), each slot's cover share, and
    each slot's feature, from a walk down the tree."""
    assert tree.cover is not None
    cover = tree.cover
    out = []
    stack: list[tuple[int, list[tuple[int, bool, int]]]] = [(0, [])]
    while stack:
        node, edges = stack.pop()
        if tree.left[node] < 0:
            slots: dict[int, int] = {}
            zero: list[float] = []
            for parent, went_left, _ in edges:
                child = tree.left[parent] if went_left else tree.right[parent]
                slot = slots.setdefault(int(tree.feature[parent]), len(slots))
                if slot == len(zero):
                    zero.append(1.0)
                share = cover[child] / cover[parent] if cover[parent] > 0 else 0.0
                zero[slot] *= share
            marked = [(p, went, slots[int(tree.feature[p])]) for p, went, _ in edges]
            out.append((node, marked, np.asarray(zero), np.asarray(list(slots), np.int64)))
            continue
        stack.append((int(tree.right[node]), [*edges, (node, False, 0)]))
        stack.append((int(tree.left[node]), [*edges, (node, True, 0)]))
    return out


def _group(d: int, rows: list[_Path], weight: float) -> PathGroup:
    n_edges = max(len(edges) for edges, *_ in rows)
    node = np.zeros((len(rows), n_edges), np.int64)
    left = np.zeros((len(rows), n_edges), bool)
    slot = np.full((len(rows), n_edges), d, np.int64)
    for p, (edges, *_) in enumerate(rows):
        for e, (at, went_left, s) in enumerate(edges):
            node[p, e], left[p, e], slot[p, e] = at, went_left, s
    return PathGroup(
        d=d,
        node=node,
        left=left,
        slot=slot,
        zero=np.stack([zero for _, zero, _, _ in rows]),
        target=np.stack([target for _, _, target, _ in rows]),
        value=np.array([value for *_, value in rows]) * weight,
    )


class _Group(nn.Module):
    """One :class:`PathGroup` on the device: rows' decisions in, contributions added."""

    node: torch.Tensor
    left: torch.Tensor
    slot: torch.Tensor
    zero: torch.Tensor
    target: torch.Tensor
    value: torch.Tensor
    nodes_t: torch.Tensor
    nodes_w: torch.Tensor
    bits: torch.Tensor
    table: torch.Tensor | None

    def __init__(self, group: PathGroup, *, tabulate: bool):
        super().__init__()
        self.d = group.d
        for name in ("node", "slot", "zero", "target", "value"):
            array = np.ascontiguousarray(getattr(group, name))
            self.register_buffer(name, torch.from_numpy(array), persistent=False)
        left = torch.from_numpy(group.left.astype(np.uint8))  # 1: the edge goes left
        self.register_buffer("left", left, persistent=False)
        t, w = np.polynomial.legendre.leggauss(group.d // 2 + 1)  # on [-1, 1]: to [0, 1]
        self.register_buffer("nodes_t", torch.from_numpy((t + 1) / 2), persistent=False)
        self.register_buffer("nodes_w", torch.from_numpy(w / 2), persistent=False)
        self.register_buffer("bits", 1 << torch.arange(self.d), persistent=False)
        self.register_buffer("table", None, persistent=False)
        if tabulate:  # a buffer, so that it moves with the module to its device
            self.register_buffer("table", self._tabulated(), persistent=False)

    @staticmethod
    def table_elements(group: PathGroup) -> int:
        return int(group.zero.shape[0]) * group.d << group.d

    def _tabulated(self) -> torch.Tensor:
        """A path's contributions depend on a row only through which of its ``d`` slots
        the row follows: all ``2**d`` answers per path, computed once, make a batch one
        gather per path and slot instead of ``d**2`` arithmetic (Fast TreeSHAP's idea).
        ``[P * 2**d, d]``, row ``p * 2**d + pattern``."""
        patterns = torch.arange(1 << self.d)[:, None] & self.bits != 0  # [2**d, d]
        one = patterns[:, None, :].expand(-1, self.zero.shape[0], -1)  # [2**d, P, d]
        phi = self._phi(one)  # [2**d, P, d]
        return phi.transpose(0, 1).reshape(-1, self.d).contiguous()

    @property
    def width(self) -> int:
        """Elements per row of the widest intermediate."""
        quadrature = 0 if self.table is not None else 4 * (self.d // 2 + 1) * self.d
        return int(self.node.shape[0]) * (int(self.node.shape[1]) + self.d + 1 + quadrature)

    def add_to(self, go_left: torch.Tensor, out: torch.Tensor) -> None:
        """Add this group's contributions for rows with decisions ``go_left [B, T * I]``
        to ``out [B, F * K]``."""
        rows, (n_paths, d) = go_left.shape[0], self.zero.shape
        # uint8: a stray edge is one XOR, counted without conversions (a path of 256
        # edges or more, which uint8 could not count, counts in int32).
        stray = go_left.view(torch.uint8)[:, self.node] ^ self.left  # [B, P, E]
        stray = stray if self.node.shape[1] < 256 else stray.to(torch.int32)
        strays = torch.zeros((rows, n_paths, d + 1), dtype=stray.dtype, device=out.device)
        strays.scatter_add_(2, self.slot.expand(rows, -1, -1), stray)
        one = strays[:, :, :d] == 0  # [B, P, d]: the row follows every edge of the slot
        if self.table is None:
            phi = self._phi(one)
        else:
            pattern = (one.to(torch.int64) * self.bits).sum(-1)  # [B, P]
            at = pattern + (torch.arange(n_paths, device=out.device) << d)
            phi = take(self.table, at)  # [B, P, d]
        out.index_add_(1, self.target.reshape(-1), phi.reshape(rows, -1))

    def _phi(self, one: torch.Tensor) -> torch.Tensor:
        """Contributions ``[B, P, d]`` of rows that follow the slots where ``one``:
        ``v (o_i - z_i)`` times the integral over ``[0, 1]`` of
        ``prod_{j != i} (z_j + t (o_j - z_j))`` (the Shapley weights are Beta integrals),
        a polynomial of degree ``d - 1`` that Gauss-Legendre quadrature on ``d // 2 + 1``
        nodes integrates exactly.  The product without slot ``i`` is the whole product
        over slot ``i``'s factor: the nodes lie inside ``(0, 1)``, so that factor is 0
        only where ``o_i = z_i = 0``, a slot whose contribution is 0 whatever is divided."""
        diff = one.to(torch.float64) - self.zero  # [B, P, d]
        at = self.zero[:, None, :] + self.nodes_t[:, None] * diff[:, :, None, :]  # [B, P, Q, d]
        whole = at.prod(-1, keepdim=True)
        others = whole / torch.where(at == 0.0, 1.0, at)
        integral = torch.einsum("bpqd,q->bpd", others, self.nodes_w)
        return diff * integral * self.value[:, None]


def _tabulated(groups: list[PathGroup]) -> list[tuple[PathGroup, bool]]:
    """Which groups get an answer table: the shortest paths first, within the budget
    (a table grows as ``2**d``; long paths keep the arithmetic)."""
    out, room = [], _TABLE_ELEMENTS
    for group in groups:  # ascending d
        size = _Group.table_elements(group)
        out.append((group, size <= room))
        room -= size if size <= room else 0
    return out


class Contributions(nn.Module):
    """Rows ``[B, F]`` (validated, at the model's input dtype) -> contributions
    ``[B, K, F + 1]`` in float64, the last column the bias; rows in chunks that bound
    scratch memory."""

    nodes: torch.Tensor
    bias: torch.Tensor

    def __init__(self, forest: Forest, *, device: torch.device):
        super().__init__()
        tables = contribution_tables(forest)
        self.test = NodeTest(
            tables.params,
            bitset_tables(forest),
            cat_check_before_trunc=forest.cat_check_before_trunc,
        )
        groups = [_Group(g, tabulate=t) for g, t in _tabulated(tables.groups)]
        self.groups = nn.ModuleList(groups)
        n_nodes = int(tables.params.feature.size)
        self.register_buffer("nodes", torch.arange(n_nodes)[None], persistent=False)
        self.register_buffer("bias", torch.from_numpy(tables.bias), persistent=False)
        self.n_features, self.n_outputs = tables.n_features, tables.n_outputs
        self.zero_snap = forest.zero_snap
        widest = max([n_nodes * 4, *(g.width for g in groups)])
        self.chunk_rows = max(1, _CHUNK_ELEMENTS[device.type] // widest)
        self.to(device)

    @torch.inference_mode()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.bias.device)
        parts = [self._chunk(c) for c in torch.split(x, self.chunk_rows)]
        return torch.cat(parts) if parts else self._chunk(x)

    def _chunk(self, x: torch.Tensor) -> torch.Tensor:
        rows, f, k = x.shape[0], self.n_features, self.n_outputs
        if self.zero_snap:  # LightGBM reads |x| <= 1e-35 as 0.0 before any tree
            x = torch.where(x.abs() <= ZERO_THRESHOLD[x.dtype], torch.zeros_like(x), x)
        go_left = self.test.go_left(x, self.nodes)
        out = torch.zeros((rows, (f + 1) * k), dtype=torch.float64, device=x.device)
        for group in self.groups:
            cast(_Group, group).add_to(go_left, out)
        out = out.view(rows, f + 1, k)
        out[:, f, :] += self.bias
        return out.transpose(1, 2)

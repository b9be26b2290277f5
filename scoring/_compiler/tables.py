"""Pack a Forest into padded per-tree node tables, one layout per strategy.

All layouts share the node parameter columns of :class:`NodeParams` (shape ``[T, N]``)
and the categorical bitset tables; they differ in how nodes are numbered:

* traversal: the IR's own node numbering, leaves loop to themselves;
* perfect: heap order of a complete tree of the forest's depth (children 2i+1, 2i+2),
  a shallow leaf copied to every heap leaf below it;
* gemm: internal nodes and leaves numbered apart, with the +-1 path matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._ir import SPLIT_CATEGORICAL, ZERO_THRESHOLD, Forest, Tree, largest_float32_at_most


@dataclass
class NodeParams:
    feature: np.ndarray  # int64 [T, N]
    threshold: np.ndarray  # float64 [T, N]
    default_left: np.ndarray  # bool [T, N]
    missing_zero: np.ndarray  # bool [T, N]
    is_cat: np.ndarray  # bool [T, N]
    cat_row: np.ndarray  # int64 [T, N]: row of the bitset tables
    cat_unknown_left: np.ndarray  # bool [T, N]


@dataclass
class BitsetTables:
    left: np.ndarray  # int64 [C, W] (uint32 words widened: torch has no uint32 shifts)
    known: np.ndarray  # int64 [C, W]

    @property
    def n_bits(self) -> int:
        return int(self.left.shape[1]) * 32


@dataclass
class LeafTables:
    value: np.ndarray  # float64 [T, L, K] (vector leaves) or [T, L] (scalar leaves)
    native_id: np.ndarray  # int64 [T, L]
    group: np.ndarray | None  # int64 [T]: the output a scalar-leaf tree adds to


def bitset_tables(forest: Forest) -> BitsetTables:
    """Every categorical node's bitsets stacked in tree then node order (row 0: none)."""
    rows_left: list[np.ndarray] = [np.zeros(1, np.uint32)]
    rows_known: list[np.ndarray] = [np.zeros(1, np.uint32)]
    for tree in forest.trees:
        for node, words in tree.cat_left.items():
            rows_left.append(words)
            rows_known.append(tree.cat_known[node])
    width = max(r.size for r in rows_left)
    left = np.zeros((len(rows_left), width), dtype=np.int64)
    known = np.zeros_like(left)
    for i, (lw, kw) in enumerate(zip(rows_left, rows_known, strict=True)):
        left[i, : lw.size] = lw
        known[i, : kw.size] = kw
    return BitsetTables(left=left, known=known)


def _cat_rows(forest: Forest) -> list[dict[int, int]]:
    """Per tree, categorical node -> its row in :func:`bitset_tables` (row 0: none)."""
    rows, out = 1, []
    for tree in forest.trees:
        out.append({node: rows + i for i, node in enumerate(tree.cat_left)})
        rows += len(tree.cat_left)
    return out


def leaf_tables(forest: Forest, leaves: list[np.ndarray], width: int) -> LeafTables:
    """Leaf values and native ids for ``leaves[t]`` (IR node ids) padded to ``width``."""
    n_trees, k = forest.n_trees, forest.n_outputs
    groups = [_single_output(t, leaf) for t, leaf in zip(forest.trees, leaves, strict=True)]
    scalar = k > 1 and all(g is not None for g in groups)
    native = np.zeros((n_trees, width), dtype=np.int64)
    value = np.zeros((n_trees, width) if scalar or k == 1 else (n_trees, width, k))
    for t, (tree, leaf) in enumerate(zip(forest.trees, leaves, strict=True)):
        native[t, : leaf.size] = tree.leaf_id[leaf]
        if scalar:
            value[t, : leaf.size] = tree.value[leaf, groups[t]]
        elif k == 1:
            value[t, : leaf.size] = tree.value[leaf, 0]
        else:
            value[t, : leaf.size] = tree.value[leaf]
    group = np.asarray(groups, dtype=np.int64) if scalar else None
    return LeafTables(value=value, native_id=native, group=group)


def _single_output(tree: Tree, leaves: np.ndarray) -> int | None:
    """The one output column a tree writes to, or None when its leaves are vectors."""
    nonzero = np.flatnonzero(np.any(tree.value[leaves] != 0.0, axis=0))
    if nonzero.size > 1:
        return None
    return int(nonzero[0]) if nonzero.size else 0


def node_params(forest: Forest, nodes: list[np.ndarray], width: int) -> NodeParams:
    """Parameters of ``nodes[t]`` (IR node ids, -1 for a dummy) padded to ``width``."""
    cat_index = _cat_rows(forest)
    shape = (forest.n_trees, width)
    p = NodeParams(
        feature=np.zeros(shape, np.int64),
        threshold=np.zeros(shape),
        default_left=np.zeros(shape, bool),
        missing_zero=np.zeros(shape, bool),
        is_cat=np.zeros(shape, bool),
        cat_row=np.zeros(shape, np.int64),
        cat_unknown_left=np.zeros(shape, bool),
    )
    for t, (tree, ids) in enumerate(zip(forest.trees, nodes, strict=True)):
        real = ids >= 0
        n = ids[real]
        cols = np.flatnonzero(real)
        p.feature[t, cols] = np.maximum(tree.feature[n], 0)
        p.threshold[t, cols] = tree.threshold[n]
        p.default_left[t, cols] = tree.default_left[n]
        if tree.missing_zero is not None:
            p.missing_zero[t, cols] = tree.missing_zero[n]
        p.is_cat[t, cols] = tree.split_kind[n] == SPLIT_CATEGORICAL
        if tree.cat_unknown_left is not None:
            p.cat_unknown_left[t, cols] = tree.cat_unknown_left[n]
        p.cat_row[t, cols] = [cat_index[t].get(int(i), 0) for i in n]
    return p


def threshold32(threshold: np.ndarray) -> np.ndarray:
    """Thresholds for float32 inputs: the largest float32 at most each threshold."""
    return largest_float32_at_most(threshold).astype(np.float32)


def zero_threshold(dtype: type) -> float:
    """LightGBM's zero test ``|x| <= 1e-35`` at the input's precision."""
    if dtype is np.float32:
        return float(largest_float32_at_most(np.array([ZERO_THRESHOLD]))[0])
    return ZERO_THRESHOLD


# -- traversal: IR numbering, leaves loop to themselves --------------------------------


@dataclass
class TraversalLayout:
    params: NodeParams
    left: np.ndarray  # int64 [T, N]
    right: np.ndarray  # int64 [T, N]
    leaves: LeafTables  # indexed by IR node id
    tree_depth: np.ndarray  # int64 [T]: edges on each tree's longest path

    @property
    def depth(self) -> int:
        return int(self.tree_depth.max(initial=0))


def traversal_layout(forest: Forest) -> TraversalLayout:
    width = max(t.n_nodes for t in forest.trees)
    ids = [np.arange(t.n_nodes) for t in forest.trees]
    left = np.zeros((forest.n_trees, width), np.int64)
    right = np.zeros_like(left)
    for t, tree in enumerate(forest.trees):
        own = np.arange(tree.n_nodes)
        left[t, : tree.n_nodes] = np.where(tree.is_leaf, own, tree.left)
        right[t, : tree.n_nodes] = np.where(tree.is_leaf, own, tree.right)
    return TraversalLayout(
        params=node_params(forest, ids, width),
        left=left,
        right=right,
        leaves=leaf_tables(forest, ids, width),
        tree_depth=np.array([t.depth() for t in forest.trees], dtype=np.int64),
    )


# -- perfect: heap order of a complete tree ---------------------------------------------


@dataclass
class PerfectLayout:
    params: NodeParams  # [T, 2**depth - 1] internal heap nodes
    leaves: LeafTables  # [T, 2**depth] heap leaves
    depth: int


#: Bytes of one node's test (feature, threshold, categorical row, flags) and of one
#: leaf (its id and its value per output) in every layout's tables.
_NODE_BYTES = 8 * 3 + 4


def _leaf_bytes(forest: Forest) -> int:
    return 8 * (1 + forest.n_outputs)


def perfect_layout_bytes(forest: Forest) -> int:
    """Bytes the perfect layout would take: it grows as 2**depth per tree."""
    depth = forest.max_depth
    return forest.n_trees * ((2**depth - 1) * _NODE_BYTES + 2**depth * _leaf_bytes(forest))


def traversal_layout_bytes(forest: Forest) -> int:
    """Bytes the traversal layout would take: every tree padded to the widest, with its
    two child tables."""
    width = max((t.n_nodes for t in forest.trees), default=0)
    return forest.n_trees * width * (_NODE_BYTES + 2 * 8 + _leaf_bytes(forest))


def gemm_layout_bytes(forest: Forest) -> int:
    """Bytes the gemm layout would take: a float32 path matrix of internal nodes x
    leaves per tree, which grows as the square of a tree's size."""
    n_inner = max((int((~t.is_leaf).sum()) for t in forest.trees), default=0)
    n_leaf = max((int(t.is_leaf.sum()) for t in forest.trees), default=0)
    per_tree = max(n_inner, 1) * (n_leaf * 4 + _NODE_BYTES) + n_leaf * (4 + _leaf_bytes(forest))
    return forest.n_trees * per_tree


def perfect_layout(forest: Forest) -> PerfectLayout:
    depth = max(forest.max_depth, 1)
    inner, leaves = [], []
    for tree in forest.trees:
        heap = np.full(2 ** (depth + 1) - 1, -1, dtype=np.int64)
        heap[0] = 0
        for pos in range(2**depth - 1):
            node = heap[pos]
            if tree.left[node] >= 0:
                heap[2 * pos + 1], heap[2 * pos + 2] = tree.left[node], tree.right[node]
            else:  # a leaf above the last level: copy it down both sides
                heap[2 * pos + 1] = heap[2 * pos + 2] = node
        ids = heap[: 2**depth - 1]
        inner.append(np.where(tree.left[ids] >= 0, ids, -1))
        leaves.append(heap[2**depth - 1 :])
    return PerfectLayout(
        params=node_params(forest, inner, 2**depth - 1),
        leaves=leaf_tables(forest, leaves, 2**depth),
        depth=depth,
    )


# -- gemm: internal nodes x leaves path matrix ------------------------------------------


@dataclass
class GemmLayout:
    params: NodeParams  # [T, I] internal nodes
    path: np.ndarray  # float32 [T, I, L]: +1 leaf under the left child, -1 under the right
    n_left: np.ndarray  # float32 [T, L]: left-ancestor count; -1 for padding
    leaves: LeafTables  # [T, L]


def gemm_layout(forest: Forest) -> GemmLayout:
    inner = [np.flatnonzero(~t.is_leaf) for t in forest.trees]
    leaves = [np.flatnonzero(t.is_leaf) for t in forest.trees]
    n_inner = max(max((i.size for i in inner), default=0), 1)
    n_leaf = max(leaf.size for leaf in leaves)
    path = np.zeros((forest.n_trees, n_inner, n_leaf), np.float32)
    n_left = np.full((forest.n_trees, n_leaf), -1.0, np.float32)
    for t, tree in enumerate(forest.trees):
        col_of_inner = {int(n): i for i, n in enumerate(inner[t])}
        parents = _parents(tree)
        for j, leaf in enumerate(leaves[t]):
            n_left[t, j] = 0
            for parent, went_left in _ancestors(parents, int(leaf)):
                path[t, col_of_inner[parent], j] = 1.0 if went_left else -1.0
                n_left[t, j] += went_left
    return GemmLayout(
        params=node_params(forest, [np.asarray(i) for i in inner], n_inner),
        path=path,
        n_left=n_left,
        leaves=leaf_tables(forest, leaves, n_leaf),
    )


def _parents(tree: Tree) -> dict[int, tuple[int, bool]]:
    """child -> (parent, whether the child is the left one)."""
    parent = {}
    for node in np.flatnonzero(~tree.is_leaf):
        parent[int(tree.left[node])] = (int(node), True)
        parent[int(tree.right[node])] = (int(node), False)
    return parent


def _ancestors(parent: dict[int, tuple[int, bool]], leaf: int) -> list[tuple[int, bool]]:
    out, node = [], leaf
    while node in parent:
        out.append(parent[node])
        node = parent[node][0]
    return out

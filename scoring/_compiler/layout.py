"""A forest as the tables every ``fused`` kernel walks (walk.cpp on CPU, the Triton walk
on CUDA): the linked tables, each tree's nodes breadth first so that siblings sit side
by side, and a heap-ordered top of any depth cut from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._ir import Forest, Tree
from ..errors import CompileError
from .kernels import _DEFAULT_LEFT, pack_node_flags
from .tables import bitset_tables, leaf_tables, node_params, threshold32

__all__ = ["linked_tables", "top_tables"]


def linked_tables(forest: Forest, acc: np.dtype[Any]) -> dict[str, np.ndarray]:
    """The whole forest flat, tree t's nodes from ``t * width`` in breadth-first order
    (so siblings sit side by side; walk.cpp's linked tables)."""
    walked = [_breadth_first(tree) for tree in forest.trees]
    orders = [order for order, _ in walked]
    width = max(order.size for order in orders)
    n_trees = forest.n_trees
    if n_trees * width >= 2**31:
        raise CompileError(f"{forest.described} has too many nodes for strategy 'fused'")
    base = np.arange(n_trees, dtype=np.int64)[:, None] * width
    p = node_params(forest, _padded(orders, width), width)
    leaves = leaf_tables(forest, orders, width)
    first = np.arange(n_trees * width, dtype=np.int64).reshape(n_trees, width)  # leaves: self
    leaf = np.ones((n_trees, width), bool)
    for t, (tree, order) in enumerate(zip(forest.trees, orders, strict=True)):
        inner = tree.left[order] >= 0
        leaf[t, : order.size] = ~inner
        position = np.empty(tree.n_nodes, np.int64)
        position[order] = np.arange(order.size)
        first[t, : order.size][inner] = base[t, 0] + position[tree.left[order[inner]]]
    packed = np.where(leaf, _DEFAULT_LEFT, pack_node_flags(p))  # a leaf goes left ...
    threshold = np.where(leaf, np.inf, p.threshold)  # ... whatever the value
    bits = bitset_tables(forest)
    value = leaves.value
    value = value.reshape(n_trees * width, -1) if value.ndim == 3 else value.reshape(-1)
    arrays = {
        "packed": packed.reshape(-1),
        "thr32": threshold32(threshold).reshape(-1),
        "thr64": threshold.reshape(-1),
        "child": first.reshape(-1),
        "depth": np.array([depth for _, depth in walked]),
        "value": value.astype(acc),
        "native_id": leaves.native_id.reshape(-1),  # the native leaf id at each linked id
        "cat_row": p.cat_row.reshape(-1),
        "cat_unknown_left": p.cat_unknown_left.reshape(-1).astype(np.uint8),
        "bits_left": bits.left.astype(np.uint32),
        "bits_known": bits.known.astype(np.uint32),
        "used": np.unique(p.feature[~leaf]),  # what the vector path copies per block
    }
    offset = np.where(leaf, 0, first - np.arange(first.size).reshape(first.shape))
    if p.feature.max(initial=0) < 1 << 16 and offset.max(initial=0) < 1 << 13:
        arrays["compact"] = (
            np.where(leaf, 0, p.feature) | (leaf | p.default_left) << 16
            | (~leaf & p.missing_zero) << 17 | offset << 19
        ).reshape(-1).astype(np.uint32).view(np.int32)  # fmt: skip
    if leaves.group is not None:
        arrays["group"] = leaves.group
    return {k: _c_array(v) for k, v in arrays.items()}


def _breadth_first(tree: Tree) -> tuple[np.ndarray, int]:
    """IR node ids level by level, each node's two children side by side; the depth."""
    levels, frontier = [np.zeros(1, np.int64)], np.zeros(1, np.int64)
    while frontier.size:
        inner = frontier[tree.left[frontier] >= 0]
        frontier = np.stack([tree.left[inner], tree.right[inner]], 1).reshape(-1).astype(np.int64)
        levels.append(frontier)
    return np.concatenate(levels), len(levels) - 2


def _padded(orders: list[np.ndarray], width: int) -> list[np.ndarray]:
    return [np.concatenate([o, np.full(width - o.size, -1, np.int64)]) for o in orders]


def _c_array(a: np.ndarray) -> np.ndarray:
    """Ids and counts as int32 (the kernel's), other types as they are, contiguous."""
    return np.ascontiguousarray(a.astype(np.int32) if a.dtype == np.int64 else a)


def top_tables(linked: dict[str, np.ndarray], top_depth: int) -> dict[str, np.ndarray]:
    """Every tree's top ``top_depth`` levels in heap order: the linked ids at each heap
    position, a leaf copied down both sides (its first child is itself)."""
    first = linked["child"]
    n_trees = linked["depth"].size
    level = np.zeros((n_trees, 1), np.int64)  # the roots' linked ids
    level[:, 0] = np.arange(n_trees) * (first.size // max(n_trees, 1))
    levels = [level]
    for _ in range(top_depth):
        left = first[level]
        right = np.where(left == level, level, left + 1)
        level = np.stack([left, right], -1).reshape(n_trees, -1)
        levels.append(level)
    inner = np.concatenate(levels[:-1], axis=1).reshape(-1) if top_depth else np.zeros(0, np.int64)
    return {
        "top_packed": _c_array(linked["packed"][inner]),
        "top_thr32": _c_array(linked["thr32"][inner]),
        "top_thr64": _c_array(linked["thr64"][inner]),
        "top_node": _c_array(inner),
        "top_exit": _c_array(levels[-1].reshape(-1)),
        "tree_levels": _c_array(np.maximum(linked["depth"] - top_depth, 0)),
    }

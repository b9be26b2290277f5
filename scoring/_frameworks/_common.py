"""Helpers shared by the framework importers: bitsets and numeric trees."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .._ir import SPLIT_NUMERIC, Tree


def bitset_words(categories: Iterable[int], n_words: int | None = None) -> np.ndarray:
    """Pack non-negative category codes into little-endian uint32 words."""
    cats = np.asarray(list(categories), dtype=np.int64)
    need = int(cats.max()) // 32 + 1 if cats.size else 1
    words = np.zeros(max(need, n_words or 0), dtype=np.uint32)
    for c in cats:
        words[c // 32] |= np.uint32(1) << np.uint32(c % 32)
    return words


def numeric_tree(
    *,
    feature: np.ndarray,
    threshold: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    default_left: np.ndarray,
    value: np.ndarray,
    leaf_id: np.ndarray | None = None,
) -> Tree:
    """A :class:`Tree` with numeric splits only; leaves are marked by ``left < 0``."""
    n = feature.shape[0]
    is_leaf = np.asarray(left) < 0
    return Tree(
        feature=np.where(is_leaf, -1, feature).astype(np.int32),
        threshold=np.where(is_leaf, 0.0, threshold).astype(np.float64),
        left=np.where(is_leaf, -1, left).astype(np.int32),
        right=np.where(is_leaf, -1, right).astype(np.int32),
        default_left=np.asarray(default_left, dtype=bool) & ~is_leaf,
        split_kind=np.full(n, SPLIT_NUMERIC, dtype=np.int8),
        value=np.where(is_leaf[:, None], value, 0.0).astype(np.float64),
        leaf_id=np.arange(n, dtype=np.int64) if leaf_id is None else leaf_id.astype(np.int64),
    )

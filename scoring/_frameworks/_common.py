"""Helpers shared by the framework importers: bitsets, numeric trees, and asking the
native predictor which values it refuses."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._ir import SPLIT_NUMERIC, Forest, Tree


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
    cover: np.ndarray | None = None,
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
        cover=None if cover is None else np.asarray(cover, dtype=np.float64),
    )


def probe_refusals(
    forest: Forest,
    score: Callable[[np.ndarray], Any],
    leaf: Callable[[np.ndarray], Any] | None = None,
) -> dict[str, str]:
    """Which kinds of value (:data:`scoring._ir.REFUSABLE`) the native predictor refuses
    when scoring and, with ``leaf_`` before the kind, when giving leaf ids; asked of the
    predictor itself on one row each, its own first line kept as the reason, so that a
    library version that accepts or refuses more is followed, not guessed.  ``score``
    and ``leaf`` take a float64 row ``[1, n_features]`` and raise ValueError on a
    refusal; a call that fails on a plain row of zeros is not asked."""
    n = forest.n_features
    groups = forest.column_groups()
    kinds = [("nan", groups[""], np.nan)]
    kinds += [(f"{group}inf", columns, np.inf) for group, columns in groups.items()]
    refuses: dict[str, str] = {}
    for prefix, call in (("", score), ("leaf_", leaf)):
        if call is None or _refusal(call, np.zeros((1, n))) is not None:
            continue
        for kind, columns, value in kinds:
            row = np.zeros((1, n))
            row[0, columns[:1]] = value
            reason = _refusal(call, row) if columns else None
            if reason is not None:
                refuses[prefix + kind] = reason
    return refuses


def _refusal(call: Callable[[np.ndarray], Any], row: np.ndarray) -> str | None:
    try:
        with warnings.catch_warnings():  # e.g. a model fitted on a frame, asked with an array
            warnings.simplefilter("ignore")
            call(row)
    except ValueError as exc:
        return _LOG_PREFIX.sub("", str(exc).strip().splitlines()[0])
    return None


#: XGBoost's log prefix on its errors: ``[06:48:44] /path/data.cc:1196: Check failed: valid: ``.
_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+: (Check failed: \w+: )?")


def sklearn_forest(model: Any, *, kind: str, task: str, trees: list[Tree], n_outputs: int,
                   **rest: Any) -> Forest:  # fmt: skip
    """A scikit-learn estimator's forest: its kind, task, trees, outputs and features,
    and ``rest`` (base score, post-transform, classes, ...)."""
    return Forest(framework="sklearn", model_kind=kind, task=task,  # type: ignore[arg-type]
                  trees=trees, n_features=int(model.n_features_in_), n_outputs=n_outputs,
                  **rest)  # fmt: skip

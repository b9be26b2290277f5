"""Several models as one forest: their trees side by side, one walk for all of them.

A set of models scored over the same rows (champion and challengers, one model per
segment) would otherwise cost one traversal per model.  :func:`combine` concatenates
their trees into one :class:`~scoring._ir.Forest` over the union of their input
columns, each model's outputs a slice of the combined margins, so one compiled module
(``fused``: one kernel per block of rows) walks every tree of every model.

Exactness: each output is still its own model's trees added in their order from its
base score (:class:`~.kernels.LeafSum` groups trees by output), and a column two models
share holds the same value for both (:func:`shared_key`), so every slice equals what
the model computes alone.  Only forests whose semantics are forest-wide in the same way
(:func:`semantics`) and whose margins need nothing after the sum (no averaging, no
base score last, no chain) are combined; the caller scores any other model alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace

import numpy as np

from .._ir import Forest, Tree

__all__ = ["combinable", "combine", "semantics", "shared_key"]


def combinable(forest: Forest) -> bool:
    """Whether a forest's margins are a plain sum that a combined forest can carry."""
    if forest.stages or forest.average or forest.base_last or not forest.trees:
        return False
    return forest.n_outputs == 1 or all(_single_output(t) for t in forest.trees)


def semantics(forest: Forest) -> tuple[Hashable, ...]:
    """What must be equal for forests to share one compiled walk (forest-wide flags of
    the node test, the accumulation and the input precision)."""
    return (forest.input_dtype, forest.accumulate_dtype, forest.zero_snap,
            forest.cat_check_before_trunc)  # fmt: skip


def shared_key(forest: Forest, j: int, name: str) -> Hashable | None:
    """The key under which feature ``j`` (read from input column ``name``) may share a
    combined column with other models, or None when its value is this model's own (a
    categorical code, an imputed or encoded value, a model-specific missing marker)."""
    own = (
        j in forest.categorical_features or j in forest.fill_missing or j in forest.encoded
        or j in forest.dropped or forest.missing_value is not None
    )  # fmt: skip
    return None if own else name


def combine(forests: Sequence[Forest], columns: Sequence[Sequence[int]], width: int) -> Forest:
    """One forest of every tree of ``forests``; ``columns[m][j]`` is the combined column
    of model ``m``'s feature ``j`` and ``width`` the number of combined columns.  The
    outputs are each model's, side by side in model order."""
    first = forests[0]
    n_outputs = sum(f.n_outputs for f in forests)
    trees: list[Tree] = []
    offset = 0
    for forest, cols in zip(forests, columns, strict=True):
        remap = np.asarray(cols, dtype=np.int32)
        for tree in forest.trees:
            trees.append(_moved(tree, remap, offset, n_outputs))
        offset += forest.n_outputs
    return Forest(
        framework=first.framework,
        model_kind=f"{len(forests)} models",
        task="regression",
        trees=trees,
        n_features=width,
        n_outputs=n_outputs,
        base_score=np.concatenate([np.asarray(f.base_score, np.float64) for f in forests]),
        input_dtype=first.input_dtype,
        accumulate_dtype=first.accumulate_dtype,
        zero_snap=first.zero_snap,
        cat_check_before_trunc=first.cat_check_before_trunc,
    )


def _moved(tree: Tree, remap: np.ndarray, offset: int, n_outputs: int) -> Tree:
    """``tree`` reading combined columns and writing its outputs at ``offset``."""
    inner = tree.feature >= 0
    feature = np.where(inner, remap[np.where(inner, tree.feature, 0)], -1).astype(np.int32)
    value = np.zeros((tree.n_nodes, n_outputs), dtype=np.float64)
    value[:, offset : offset + tree.value.shape[1]] = tree.value
    return replace(tree, feature=feature, value=value)


def _single_output(tree: Tree) -> bool:
    """Whether every leaf of ``tree`` writes to at most one output (the same one)."""
    leaves = tree.value[tree.is_leaf]
    return int(np.any(leaves != 0.0, axis=0).sum()) <= 1

"""HistGradientBoosting importer.

HGB reads X as float64 and tests ``x <= num_threshold``.  With categorical features it
routes X through an OrdinalEncoder that moves the categorical columns first and maps
unknown values to NaN; we undo the column move here and record the raw category values
so that the input stage recodes them exactly as the encoder does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._ir import SPLIT_CATEGORICAL, Forest, Tree
from ..errors import UnsupportedModelError
from ._common import numeric_tree, sklearn_forest

_LINKS = {
    "IdentityLink": "identity",
    "LogLink": "exp",
    "LogitLink": "sigmoid",
    "HalfLogitLink": "sigmoid",
    "MultinomialLogit": "softmax",
    "SymmetricMultinomialLogit": "softmax",
}


def import_hist_gradient_boosting(model: Any, kind: str) -> Forest:
    link = type(model._loss.link).__name__
    if link not in _LINKS:
        raise UnsupportedModelError(f"{kind} with link {link} is not supported")
    column_of = _column_permutation(model)
    known, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
    trees = [
        _convert_predictor(pred, k, len(model._predictors[0]), column_of, known, f_idx_map)
        for stage in model._predictors
        for k, pred in enumerate(stage)
    ]
    classes = getattr(model, "classes_", None)
    task = "regression" if classes is None else ("binary" if len(classes) == 2 else "multiclass")
    n_out = len(model._predictors[0])
    forest = sklearn_forest(
        model, kind=kind, task=task, trees=trees, n_outputs=n_out,
        base_score=np.asarray(model._baseline_prediction, dtype=np.float64).reshape(n_out),
        post_transform=_LINKS[link],
        classes=None if classes is None else np.asarray(classes),
        objective=type(model._loss).__name__,
        input_dtype="float64",
        predict_returns="label" if classes is not None else "value",
    )  # fmt: skip
    _record_categories(model, forest, column_of)
    return forest


def _column_permutation(model: Any) -> np.ndarray:
    """Input column index of each column the trees see (categoricals come first)."""
    is_cat = getattr(model, "is_categorical_", None)
    if is_cat is None or getattr(model, "_preprocessor", None) is None:
        return np.arange(model.n_features_in_)
    is_cat = np.asarray(is_cat, dtype=bool)
    return np.concatenate([np.flatnonzero(is_cat), np.flatnonzero(~is_cat)])


def _record_categories(model: Any, forest: Forest, column_of: np.ndarray) -> None:
    pre = getattr(model, "_preprocessor", None)
    if pre is None:
        return
    encoder = pre.named_transformers_["encoder"]
    for code_col, cats in enumerate(encoder.categories_):
        labels = [c for c in cats.tolist() if not (isinstance(c, float) and np.isnan(c))]
        column = int(column_of[code_col])
        forest.categorical_features.append(column)
        forest.categories[column] = labels
    forest.recode_categories = True


def _convert_predictor(
    pred: Any,
    output: int,
    n_outputs: int,
    column_of: np.ndarray,
    known: np.ndarray,
    f_idx_map: np.ndarray,
) -> Tree:
    nodes = pred.nodes
    is_leaf = nodes["is_leaf"].astype(bool)
    value = np.zeros((len(nodes), n_outputs))
    value[:, output] = nodes["value"]
    tree_feature = nodes["feature_idx"].astype(np.int64)
    tree = numeric_tree(
        feature=column_of[tree_feature],
        threshold=nodes["num_threshold"].astype(np.float64),
        left=np.where(is_leaf, -1, nodes["left"].astype(np.int64)),
        right=np.where(is_leaf, -1, nodes["right"].astype(np.int64)),
        default_left=nodes["missing_go_to_left"].astype(bool),
        value=value,
        cover=nodes["count"],
    )
    cat_nodes = np.flatnonzero(nodes["is_categorical"].astype(bool) & ~is_leaf)
    if cat_nodes.size:
        tree.split_kind[cat_nodes] = SPLIT_CATEGORICAL
        tree.cat_unknown_left = tree.default_left.copy()  # unknown -> as missing
        for node in cat_nodes:
            tree.cat_left[int(node)] = pred.raw_left_cat_bitsets[nodes["bitset_idx"][node]].copy()
            tree.cat_known[int(node)] = known[f_idx_map[tree_feature[node]]].astype(np.uint32)
    return tree

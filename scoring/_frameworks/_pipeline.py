"""A scikit-learn ``Pipeline`` whose earlier steps pick columns, fill missing values and
encode categories, ending in a scikit-learn tree model: compiled into the model itself.

The steps are followed column by column: each column the final model reads is computed
from one input column (:class:`._encoders.Column`).  So ``ColumnTransformer``
(passthrough, drop, and the steps below, nested Pipelines too) costs nothing at scoring
time: the trees' feature indices are rewritten to input columns.  A ``SimpleImputer``
is one ``where`` per filled column before the trees (:attr:`~scoring._ir.Forest.fill_missing`),
or, before or after an encoder, part of the encoding.  An ``OrdinalEncoder`` or
``OneHotEncoder`` output column is a value per label of its input column
(:mod:`._encoders`), so a split on it is a categorical split on the input column: the
labels whose value goes left form its bitset, and a label the encoder never saw takes
the side its unknown value goes (:attr:`~scoring._ir.Forest.encoded`).  Any other step
is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from .._ir import SPLIT_CATEGORICAL, Forest, Tree
from ..errors import UnsupportedModelError
from ._common import bitset_words
from ._encoders import ENCODERS, Column, Encoding, encoded_columns

__all__ = ["import_pipeline", "pipeline_input", "pipeline_supported"]


def pipeline_supported(model: Any) -> bool:
    """Whether ``model`` is a Pipeline this module compiles (else it is refused)."""
    return type(model).__name__ == "Pipeline" and _module(model.steps[-1][1]) == "sklearn"


def import_pipeline(model: Any, import_final: Callable[[Any], Forest]) -> Forest:
    final = model.steps[-1][1]
    forest = import_final(final)
    if forest.categorical_features:
        raise UnsupportedModelError(
            f"a Pipeline before {forest.model_kind} with categorical features is not "
            "supported: pass the final estimator and its own input"
        )
    columns = [Column(j) for j in range(int(model.n_features_in_))]
    for name, step in model.steps[:-1]:
        columns = _through(name, step, columns)
    if len(columns) != forest.n_features:
        raise UnsupportedModelError(
            f"the Pipeline's steps give {len(columns)} columns, but {forest.model_kind} "
            f"reads {forest.n_features}"
        )
    return _rewired(forest, columns, int(model.n_features_in_))


def pipeline_input(model: Any, forest: Forest) -> Callable[[np.ndarray], Any]:
    """Float rows ``[n, n_features]`` as the Pipeline (or a HistGradientBoosting model
    with categories of its own) reads them, for asking it what it refuses: a frame when
    it was fitted on one, a labelled column's first label where the row holds 0 (its
    other values, NaN or inf, are what is asked).  Labelled: a Pipeline's encoded
    columns, and recoded category columns whose labels are not numbers (text compared
    with a float is a TypeError in scikit-learn's encoder, not a refusal)."""
    names = getattr(model, "feature_names_in_", None)
    labelled = set(forest.encoded)
    if forest.recode_categories:
        labelled |= {j for j, c in forest.categories.items() if not _numbers(c)}

    def rows(X: np.ndarray) -> Any:
        cols: list[Any] = []
        for j in range(X.shape[1]):
            labels = forest.categories.get(j) if j in labelled else None
            if labels is None:
                cols.append(X[:, j])
                continue
            column = np.array(X[:, j], dtype=object)
            column[X[:, j] == 0] = labels[0]
            cols.append(column)
        if names is not None:
            return pd.DataFrame({str(n): c for n, c in zip(names, cols, strict=True)})
        return np.column_stack(cols)

    return rows


def _numbers(labels: list[object]) -> bool:
    return all(isinstance(v, (int, float, np.number)) for v in labels)


def _through(name: str, step: Any, columns: list[Column]) -> list[Column]:
    """The columns after ``step``."""
    kind = type(step).__name__
    if step is None or step == "passthrough" or _identity(step):
        return columns
    if kind == "SimpleImputer":
        return _imputed(name, step, columns)
    if kind in ENCODERS:
        return encoded_columns(name, step, columns)
    if kind == "Pipeline":  # inside a ColumnTransformer
        for inner, part in step.steps:
            columns = _through(f"{name}.{inner}", part, columns)
        return columns
    if kind == "ColumnTransformer":
        out: list[Column] = []
        for part, transformer, _ in step.transformers_:
            if transformer == "drop":
                continue
            picked = [columns[i] for i in step._transformer_to_input_indices[part]]
            out += _through(f"{name}.{part}", transformer, picked)
        return out
    raise UnsupportedModelError(
        f"Pipeline step {name!r} ({kind}) is not supported: only column selection "
        "(ColumnTransformer with passthrough/drop), SimpleImputer, OrdinalEncoder and "
        "OneHotEncoder compile; apply the step to the data before scoring, or pass the "
        "final estimator"
    )


def _identity(step: Any) -> bool:
    """A fitted ColumnTransformer keeps passthrough columns as an identity function."""
    return type(step).__name__ == "FunctionTransformer" and step.func is None


def _imputed(name: str, imputer: Any, columns: list[Column]) -> list[Column]:
    """SimpleImputer fills NaN (not None) with its statistics and drops the columns it
    could not fill (all missing when fitted); a column filled before has no missing
    value left, and an encoded one has its NaN values filled."""
    missing = imputer.missing_values
    if not (isinstance(missing, float) and np.isnan(missing)) or imputer.add_indicator:
        raise UnsupportedModelError(
            f"Pipeline step {name!r}: only a SimpleImputer of NaN without add_indicator compiles"
        )
    stats = np.asarray(imputer.statistics_).tolist()
    keep_empty = bool(getattr(imputer, "keep_empty_features", False))
    out = []
    for column, fill in zip(columns, stats, strict=True):
        if pd.isna(fill) and not keep_empty:
            continue
        if column.encoding is not None:
            out.append(replace(column, encoding=column.encoding.filled(float(fill))))
        else:
            out.append(column if column.fill is not None else replace(column, fill=fill))
    return out


def _rewired(forest: Forest, columns: list[Column], n_inputs: int) -> Forest:
    """``forest`` reading input columns: tree features rewritten, encoded columns' splits
    made categorical, fills and encodings per input column."""
    readings: dict[int, Any] = {}
    for column in columns:
        reading = column.encoding.reads if column.encoding else ("as is", column.fill)
        if readings.setdefault(column.source, reading) != reading:
            raise UnsupportedModelError(
                f"the Pipeline reads input column {column.source} in two ways (as it is, "
                "filled or encoded): not supported"
            )
    encodings = {c.source: c.encoding for c in columns if c.encoding is not None}

    def rewire(f: Forest) -> Forest:
        trees = [_tree(t, columns, n_inputs, f.input_dtype) for t in f.trees]
        return replace(f, trees=trees, n_features=n_inputs + f.n_features - len(columns))

    return replace(
        rewire(forest),
        stages=[rewire(stage) for stage in forest.stages],  # a chain: each stage's trees
        fill_missing={c.source: float(c.fill) for c in columns if c.fill is not None},
        dropped=[j for j in range(n_inputs) if j not in readings],
        categorical_features=sorted(encodings),
        categories={j: list(e.labels) for j, e in encodings.items()},
        encoded={j: dict(e.refused) for j, e in encodings.items()},
    )


def _tree(tree: Tree, columns: list[Column], n_inputs: int, input_dtype: str) -> Tree:
    """One tree reading input columns.  Features past the steps' columns are a chain's
    earlier predictions, which follow the input columns."""
    inner = tree.feature >= 0
    f = np.maximum(tree.feature, 0)
    sources = np.array([c.source for c in columns], dtype=np.int64)
    past = f >= len(columns)
    feature = np.where(past, n_inputs + f - len(columns), sources[np.minimum(f, len(columns) - 1)])
    tree = replace(tree, feature=np.where(inner, feature, -1).astype(np.int32))
    encoded = [int(n) for n in np.flatnonzero(inner & ~past) if columns[f[n]].encoding]
    if not encoded:
        return tree
    split_kind, unknown_left = tree.split_kind.copy(), np.zeros(len(tree.feature), bool)
    cat_left, cat_known = dict(tree.cat_left), dict(tree.cat_known)
    for node in encoded:
        encoding = columns[f[node]].encoding
        assert encoding is not None
        default = bool(tree.default_left[node])
        goes = _goes_left(encoding, tree.threshold[node], default, input_dtype)
        n_words = len(encoding.labels) // 32 + 1
        cat_left[node] = bitset_words(np.flatnonzero(goes[:-1]), n_words)
        cat_known[node] = bitset_words(range(len(encoding.labels)), n_words)
        unknown_left[node] = goes[-1]
        split_kind[node] = SPLIT_CATEGORICAL
    return replace(tree, split_kind=split_kind, cat_left=cat_left, cat_known=cat_known,
                   cat_unknown_left=unknown_left)  # fmt: skip


def _goes_left(encoding: Encoding, threshold: float, default_left: bool, dtype: str) -> np.ndarray:
    """Where each label's value, then the unknown value, goes at a numeric split, read at
    the final model's precision (NaN: the split's default side)."""
    values = np.append(encoding.values, encoding.unknown).astype(dtype).astype(np.float64)
    return np.where(np.isnan(values), default_left, values <= threshold)


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]

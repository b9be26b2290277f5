"""A scikit-learn ``Pipeline`` whose earlier steps pick columns and fill missing values,
ending in a scikit-learn tree model: compiled into the model itself.

The steps are followed column by column: each column the final model reads is an input
column, perhaps with the value a ``SimpleImputer`` fills its missing values with.  So
``ColumnTransformer`` (passthrough, drop, imputers; any remainder of those) costs
nothing at scoring time (the trees' feature indices are rewritten to input columns), and
an imputer is one ``where`` per filled column before the trees
(:attr:`~scoring._ir.Forest.fill_missing`).  Any other step is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .._ir import Forest
from ..errors import UnsupportedModelError

__all__ = ["import_pipeline", "pipeline_supported"]

#: A column the final model reads: its input column, and its fill for missing values.
_Column = tuple[int, float | None]


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
    columns: list[_Column] = [(j, None) for j in range(int(model.n_features_in_))]
    for name, step in model.steps[:-1]:
        columns = _through(name, step, columns)
    if len(columns) != forest.n_features:
        raise UnsupportedModelError(
            f"the Pipeline's steps give {len(columns)} columns, but {forest.model_kind} "
            f"reads {forest.n_features}"
        )
    return _rewired(forest, columns, int(model.n_features_in_))


def _through(name: str, step: Any, columns: list[_Column]) -> list[_Column]:
    """The columns after ``step``."""
    kind = type(step).__name__
    if step is None or step == "passthrough" or _identity(step):
        return columns
    if kind == "SimpleImputer":
        return _imputed(name, step, columns)
    if kind == "ColumnTransformer":
        out: list[_Column] = []
        for part, transformer, _ in step.transformers_:
            if transformer == "drop":
                continue
            picked = [columns[i] for i in step._transformer_to_input_indices[part]]
            out += _through(f"{name}.{part}", transformer, picked)
        return out
    raise UnsupportedModelError(
        f"Pipeline step {name!r} ({kind}) is not supported: only column selection "
        "(ColumnTransformer with passthrough/drop) and SimpleImputer compile; apply the step "
        "to the data before scoring, or pass the final estimator"
    )


def _identity(step: Any) -> bool:
    """A fitted ColumnTransformer keeps passthrough columns as an identity function."""
    return type(step).__name__ == "FunctionTransformer" and step.func is None


def _imputed(name: str, imputer: Any, columns: list[_Column]) -> list[_Column]:
    """SimpleImputer fills NaN with its statistics and drops the columns it could not fill
    (all missing when fitted); a column filled before has no missing value left."""
    missing = imputer.missing_values
    if not (isinstance(missing, float) and np.isnan(missing)) or imputer.add_indicator:
        raise UnsupportedModelError(
            f"Pipeline step {name!r}: only a SimpleImputer of NaN without add_indicator compiles"
        )
    stats = np.asarray(imputer.statistics_, dtype=np.float64)
    keep = ~np.isnan(stats) | bool(getattr(imputer, "keep_empty_features", False))
    return [(source, float(stats[i]) if fill is None else fill)
            for i, (source, fill) in enumerate(columns) if keep[i]]  # fmt: skip


def _rewired(forest: Forest, columns: list[_Column], n_inputs: int) -> Forest:
    """``forest`` reading input columns: tree features rewritten, fills per column."""
    fills: dict[int, float | None] = {}
    for source, fill in columns:
        if fills.setdefault(source, fill) != fill:
            raise UnsupportedModelError(
                f"the Pipeline reads input column {source} both as it is and filled: not supported"
            )
    sources = np.array([source for source, _ in columns], dtype=np.int64)
    trees = []
    for tree in forest.trees:
        inner = tree.feature >= 0
        feature = np.where(inner, sources[np.maximum(tree.feature, 0)], -1).astype(np.int32)
        trees.append(replace(tree, feature=feature))
    return replace(
        forest,
        trees=trees,
        n_features=n_inputs,
        fill_missing={j: v for j, v in fills.items() if v is not None},
        dropped=[j for j in range(n_inputs) if j not in fills],
    )


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]

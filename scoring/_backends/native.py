"""``backend="native"``: the framework's own predictor, the reference and CPU fallback."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .._frameworks import NativeModel, native_model
from .._inputs import Columns, feature_names
from .._ir import REFUSABLE, Forest
from . import CPU_BATCH_ROWS, Backend, as_rows
from .staged import OnHost

__all__ = ["NativeBackend"]


class NativeBackend(OnHost):
    name = "native"
    strategy: str | None = None
    strategy_reason = "native predictor"
    batch_rows = CPU_BATCH_ROWS
    takes_columns = False

    def __init__(self, model: Any, forest: Forest, *, predictor: NativeModel | None = None):
        self.model = model
        self.forest = forest
        self.device = torch.device("cpu")
        self.predictor = predictor or native_model(model, forest)
        self.names = feature_names(forest)
        # XGBoost's TreeSHAP reads a DMatrix, which refuses the +-inf its scoring takes:
        # a run explains such a model from its trees rather than fail on rows it scores.
        takes_less = any(f"leaf_{k}" in forest.refuses and k not in forest.refuses
                         for k in REFUSABLE)  # fmt: skip
        self.explains = self.predictor.has_contributions and not takes_less

    def for_parallel_calls(self) -> Backend | None:
        return self._one_thread

    @cached_property
    def _one_thread(self) -> NativeBackend | None:
        """Copied once per backend: a Ray actor asks again for every file it scores."""
        one = self.predictor.one_thread()
        if one is None:
            return None
        if one is self.predictor:
            return self
        copy = NativeBackend(one.model, self.forest, predictor=one)
        copy._one_thread = copy  # already one thread per call
        return copy

    def score(
        self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *, raw: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        mat = as_rows(mat)
        X: Any = mat
        if self.forest.categorical_features:
            X = _native_frame(features, self.forest)  # categories go to the framework as labels
        elif self.names:  # numbers only: the validated matrix, named without copies
            X = pd.DataFrame(mat, columns=self.names, copy=False)
        classifier = self.forest.task in ("binary", "multiclass", "multioutput", "multilabel")
        values = self.predict_proba(X) if classifier else self.predict(X)
        if isinstance(values, list):  # several targets: their probabilities side by side
            values = np.hstack(values)
        return np.asarray(values), (self.predict_raw(X) if raw else None)

    def predict(self, X: Any) -> np.ndarray:
        return self.predictor.predict(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        return self.predictor.predict_proba(X)

    def predict_raw(self, X: Any) -> np.ndarray:
        return self.predictor.predict_raw(X)

    def predict_leaf(self, X: Any) -> np.ndarray:
        return self.predictor.predict_leaf(X)

    def predict_contributions(self, X: Any) -> np.ndarray:
        return self.predictor.predict_contributions(X)


def _native_frame(features: pa.Table, forest: Forest) -> pd.DataFrame:
    """What the frameworks read: floats (ints, bools, decimals cast; nulls as NaN) and
    pandas categories for dictionary columns; a Pipeline's encoder reads its columns'
    values as they are (text with None for nulls)."""
    columns = {}
    for j, (name, col) in enumerate(zip(features.schema.names, features.columns, strict=True)):
        typ = col.type
        if j in forest.encoded:
            col = pc.cast(col, typ.value_type) if pa.types.is_dictionary(typ) else col
        elif not (pa.types.is_dictionary(typ) or pa.types.is_floating(typ)):
            col = pc.cast(col, pa.float64())
        columns[name] = col
    return pa.table(columns).to_pandas()

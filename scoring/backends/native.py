"""``backend="native"``: the framework's own predictor, the reference and CPU fallback."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from ..errors import InputError
from ..ir import Forest
from ._outputs import predictions, probabilities, squeeze


def native_input(X: Any) -> Any:
    """What the frameworks accept: numpy or pandas."""
    if isinstance(X, torch.Tensor):
        return X.detach().cpu().numpy()
    if isinstance(X, (pa.Table, pa.RecordBatch)):
        return X.to_pandas()
    return X


class NativeBackend:
    name = "native"

    def __init__(self, model: Any, forest: Forest):
        self.model = model
        self.forest = forest
        self.device = torch.device("cpu")

    def one_thread(self) -> NativeBackend | None:
        """A backend whose every call runs on one thread, for engines that make several
        calls side by side; None where the framework has no such setting (LightGBM
        Boosters, and HistGradientBoosting, whose OpenMP threads follow the process).
        The caller's model is copied, never changed."""
        model, framework = self.model, self.forest.framework
        if self.forest.model_kind == "xgboost.Booster":
            booster = model.copy()
            booster.set_param("nthread", 1)
            return NativeBackend(booster, self.forest)
        if framework == "sklearn" and self.forest.model_kind.startswith("HistGradientBoosting"):
            return None
        if framework == "sklearn" and getattr(model, "n_jobs", None) in (None, 1):
            return self  # scikit-learn's trees predict on the calling thread already
        if hasattr(model, "n_jobs") and hasattr(model, "set_params"):
            clone = copy.deepcopy(model)
            clone.set_params(n_jobs=1)
            return NativeBackend(clone, self.forest)
        return None

    def _call(self, method: str, X: Any, **kwargs: Any) -> np.ndarray:
        target = self.model
        X = native_input(X)
        if self.forest.model_kind == "xgboost.Booster":
            X = self._dmatrix(X)
        try:
            return np.asarray(getattr(target, method)(X, **kwargs))
        except ValueError as exc:  # frameworks report bad input as ValueError
            raise InputError(f"{self.forest.model_kind} rejected the input: {exc}") from exc

    def _dmatrix(self, X: Any) -> Any:
        import xgboost

        if isinstance(X, pd.DataFrame):
            return xgboost.DMatrix(X, enable_categorical=True)
        return xgboost.DMatrix(
            X,
            feature_names=self.model.feature_names,
            feature_types=self.model.feature_types,
            enable_categorical=bool(self.forest.categorical_features),
        )

    def predict(self, X: Any) -> np.ndarray:
        if self.forest.predict_returns == "label" and type(self.model).__name__ == "Booster":
            # A Booster restored from a registered classifier: labels from its classes.
            return predictions(self.forest, self.predict_proba(X))
        return self._call("predict", X)

    def predict_proba(self, X: Any) -> np.ndarray:
        if hasattr(self.model, "predict_proba"):
            return self._call("predict_proba", X)
        if self.forest.predict_returns == "class_index":  # multi:softmax gives labels only
            margin = self.predict_raw(X)
            e = np.exp(margin - margin.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        values = self._call("predict", X)  # Boosters return transformed values
        return probabilities(self.forest, values.reshape(len(values), -1))

    def predict_raw(self, X: Any) -> np.ndarray:
        framework, kind = self.forest.framework, self.forest.model_kind
        if framework == "xgboost":
            return self._call("predict", X, output_margin=True)
        if framework == "lightgbm":
            raw = self._call("predict", X, raw_score=True)
            # boosting=rf: raw_score is the sum; the link is applied to the average.
            return raw / self.forest.n_trees if self.forest.average else raw
        if kind == "IsolationForest":
            return self._call("decision_function", X)
        if "GradientBoosting" in kind and self.forest.task in ("binary", "multiclass"):
            return self._call("decision_function", X)
        if kind.startswith("HistGradientBoosting"):  # regressors: margin before the link
            return squeeze(self._call("_raw_predict", X))
        if self.forest.task in ("binary", "multiclass"):
            return self._call("predict_proba", X)
        return self._call("predict", X)

    def predict_leaf(self, X: Any) -> np.ndarray:
        """The native leaf id per row and tree, in the IR's tree order."""
        framework = self.forest.framework
        if framework == "xgboost":
            if self.forest.model_kind == "xgboost.Booster":
                return self._call("predict", X, pred_leaf=True).astype(np.int64)
            return self._call("apply", X).astype(np.int64)
        if framework == "lightgbm":
            return self._call("predict", X, pred_leaf=True).astype(np.int64)
        if not hasattr(self.model, "apply") and self.forest.model_kind != "IsolationForest":
            raise InputError(f"{self.forest.model_kind} does not report leaves")
        return _sklearn_leaves(self.model, np.asarray(native_input(X), dtype=np.float32))


def _sklearn_leaves(model: Any, X: np.ndarray) -> np.ndarray:
    kind = type(model).__name__
    if kind == "IsolationForest":  # it accepts inf: read leaves as its scorer does
        pairs = zip(model.estimators_, model.estimators_features_, strict=True)
        return np.column_stack([e.tree_.apply(np.ascontiguousarray(X[:, f])) for e, f in pairs])
    leaves = np.asarray(model.apply(X))
    return leaves.reshape(len(X), -1).astype(np.int64)

"""What a model outputs: the column layout of scored data, and the shapes of predict.

:class:`OutputLayout` is derived from the Forest once and used by the Scorer (the
columns it builds), the Spark functions (their return types) and the reports.  Columns,
after any kept ones: binary classifiers ``probability`` (of the positive class) and
``label``; multiclass ``probability_<class>`` per class and ``label``; regression,
ranking and anomaly models ``prediction``; ``raw`` (or ``raw_<class>``) margins when
asked for.  Floats are float64 whatever the backend computed in, labels keep the type
of the model's classes, an anomaly model's prediction is -1/1 as int64.

The functions below turn transformed values ``[B, K]`` into what the native
predictor's ``predict``/``predict_proba`` return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ._ir import Forest
from .errors import ConfigError, UnsupportedModelError

__all__ = [
    "OUTPUT_SETS",
    "OutputLayout",
    "predictions",
    "probabilities",
    "squeeze",
]

OUTPUT_SETS = ("default", "raw", "all")


@dataclass(frozen=True)
class OutputLayout:
    """The output columns of one model: names, Arrow types and class labels."""

    task: str
    names: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    classes: tuple[Any, ...]
    raw: bool

    @classmethod
    def of(cls, forest: Forest, outputs: str = "default") -> OutputLayout:
        if outputs not in OUTPUT_SETS:
            raise ConfigError(f"outputs={outputs!r}: expected one of {', '.join(OUTPUT_SETS)}")
        raw = outputs in ("raw", "all")
        classes = _classes(forest)
        label = pa.from_numpy_dtype(np.asarray(classes).dtype) if classes else pa.int64()
        task, f64 = forest.task, pa.float64()
        if task == "binary":
            columns = [("probability", f64), ("label", label)] + ([("raw", f64)] if raw else [])
        elif task == "multiclass":
            columns = [(f"probability_{c}", f64) for c in classes] + [("label", label)]
            columns += [(f"raw_{c}", f64) for c in classes] if raw else []
        else:
            kind = pa.int64() if forest.post_transform == "isolation" else f64
            columns = [("prediction", kind)]
            columns += [("raw", f64)] if raw and forest.n_outputs == 1 else []
        names, types = zip(*columns, strict=True)
        return cls(task, tuple(names), tuple(types), tuple(classes), raw)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(list(zip(self.names, self.types, strict=True)))

    def group(self, prefix: str) -> list[str]:
        """The per-class columns ``<prefix>_<class>`` of a multiclass model, else the one
        column named ``prefix`` (empty when the model has none)."""
        if self.task == "multiclass" and prefix in ("probability", "raw"):
            return [n for n in self.names if n.startswith(f"{prefix}_")]
        return [prefix] if prefix in self.names else []

    def arrays(self, values: np.ndarray, raw: np.ndarray | None, forest: Forest) -> list[pa.Array]:
        """Output columns from ``predict_proba``-shaped (classifiers) or transformed
        values and, when the layout has them, raw margins."""
        if self.task in ("binary", "multiclass"):
            labels = np.asarray(self.classes)[np.argmax(values, axis=1)]
            probs = [values[:, 1]] if self.task == "binary" else list(values.T)
            cols: list[Any] = [*probs, labels]
        elif forest.post_transform == "isolation":
            cols = [predictions(forest, _by_row(values))]
        else:
            cols = [squeeze(values)]
        if self.raw and raw is not None:
            cols += list(_by_row(raw).T)
        return [pa.array(np.asarray(c), type=t) for c, t in zip(cols, self.types, strict=False)]


def _by_row(a: np.ndarray) -> np.ndarray:
    """``[rows, k]``: a vector as one column (``reshape(len(a), -1)`` fails on 0 rows)."""
    return a if a.ndim == 2 else a.reshape(-1, 1)


def _classes(forest: Forest) -> list[Any]:
    if forest.task not in ("binary", "multiclass"):
        return []
    if forest.classes is not None:
        return list(np.asarray(forest.classes).tolist())
    return list(range(max(forest.n_outputs, 2)))


def squeeze(values: np.ndarray) -> np.ndarray:
    return values[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values


def probabilities(forest: Forest, values: np.ndarray) -> np.ndarray:
    """Transformed values ``[B, K]`` -> ``predict_proba``'s ``[B, n_classes]``."""
    if forest.task not in ("binary", "multiclass"):
        raise UnsupportedModelError(
            f"predict_proba is for classifiers; {forest.model_kind} ({forest.objective}) "
            "predicts values: use predict"
        )
    if forest.task == "binary" and values.shape[1] == 1:
        p = values[:, 0]
        return np.column_stack([1.0 - p, p])
    return values  # one column per class (a forest fitted on one class has one)


def predictions(forest: Forest, values: np.ndarray) -> np.ndarray:
    """Transformed values ``[B, K]`` -> ``predict``'s output."""
    if forest.post_transform == "isolation":
        return np.where(values[:, 0] < 0, -1, 1)
    if forest.predict_returns == "class_index":
        return np.argmax(values, axis=1).astype(np.float32)
    if forest.predict_returns == "label":
        index = np.argmax(probabilities(forest, values), axis=1)
        classes = forest.classes if forest.classes is not None else np.arange(values.shape[1])
        return np.asarray(classes)[index]
    return squeeze(values)

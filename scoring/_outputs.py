"""What a model outputs: the column layout of scored data, and the shapes of predict.

:class:`OutputLayout` is derived from the Forest once and used by the Scorer (the
columns it builds), the Spark functions (their return types) and the reports.  Columns,
after any kept ones: binary classifiers ``probability`` (of the positive class) and
``label``; multiclass ``probability_<class>`` per class and ``label``; classifiers of
several targets ``probability_<k>_<class>`` and ``label_<k>`` for target ``k``, of
several labels ``probability_<k>`` and ``label_<k>`` (0/1) for label ``k``;
regression, ranking and anomaly models ``prediction`` (``prediction_<k>`` per target
of a multi-output regressor); ``raw`` (or ``raw_<class>``, ``raw_<k>``) margins when
asked for.  Floats are float64 whatever the backend computed in, labels keep the type
of the model's classes, an anomaly model's prediction is -1/1 as int64.  Contribution
and reason columns follow when ``outputs`` asks for them (:mod:`scoring._explanations`).

The functions below turn transformed values ``[B, K]`` into what the native
predictor's ``predict``/``predict_proba`` return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ._explanations import Explanations, parse
from ._ir import Forest
from .errors import UnsupportedModelError

__all__ = [
    "OutputLayout",
    "predictions",
    "probabilities",
    "squeeze",
]


@dataclass(frozen=True)
class OutputLayout:
    """The output columns of one model: names, Arrow types and class labels."""

    task: str
    names: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    classes: tuple[Any, ...]
    raw: bool
    explain: Explanations = field(default_factory=Explanations)

    @classmethod
    def of(cls, forest: Forest, outputs: str | Sequence[str] = "default") -> OutputLayout:
        scores, explain = parse(outputs)
        raw = scores in ("raw", "all")
        classes = _classes(forest)
        columns = _COLUMNS.get(forest.task, _predictions)(forest, classes, raw)
        columns += explain.columns(forest, classes)
        names, types = zip(*columns, strict=True)
        return cls(forest.task, tuple(names), tuple(types), tuple(classes), raw, explain)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(list(zip(self.names, self.types, strict=True)))

    def group(self, prefix: str) -> list[str]:
        """The column named ``prefix``, else its per-class or per-target columns
        ``<prefix>_...`` (empty when the model has none)."""
        if prefix in self.names:
            return [prefix]
        return [n for n in self.names if n.startswith(f"{prefix}_")]

    def arrays(
        self,
        values: np.ndarray,
        raw: np.ndarray | None,
        forest: Forest,
        contributions: np.ndarray | None = None,
    ) -> list[pa.Array]:
        """Output columns from ``predict_proba``-shaped (classifiers) or transformed
        values and, when the layout has them, raw margins and the explanations of
        ``contributions [rows, outputs, features + 1]``."""
        if self.task in ("binary", "multiclass"):
            labels = _labels_at(self.classes, _argmax(values))
            probs = [values[:, 1]] if self.task == "binary" else list(values.T)
            cols: list[Any] = [*probs, labels]
        elif self.task == "multioutput":
            cols = []
            for classes, part in zip(forest.targets, _split(forest, values), strict=True):
                cols += [*part.T, np.asarray(classes)[_argmax(part)]]
        elif self.task == "multilabel":
            labels = predictions(forest, _by_row(values)).astype(np.int64).T
            cols = [c for pair in zip(_by_row(values).T, labels, strict=True) for c in pair]
        elif forest.post_transform == "isolation":
            cols = [predictions(forest, _by_row(values))]
        else:
            cols = list(_by_row(values).T)
        if self.raw and raw is not None:
            cols += list(_by_row(raw).T)
        if contributions is not None:
            cols += self.explain.arrays(forest, contributions)
        return [pa.array(np.asarray(c), type=t) for c, t in zip(cols, self.types, strict=False)]


# -- the columns of each task: (name, Arrow type), ``raw`` margins last when asked ----

_Columns = list[tuple[str, pa.DataType]]
_F64 = pa.float64()


def _binary(forest: Forest, classes: list[Any], raw: bool) -> _Columns:
    return [("probability", _F64), ("label", _label_type(classes))] + [("raw", _F64)] * raw


def _multiclass(forest: Forest, classes: list[Any], raw: bool) -> _Columns:
    columns = [(f"probability_{c}", _F64) for c in classes] + [("label", _label_type(classes))]
    return columns + ([(f"raw_{c}", _F64) for c in classes] if raw else [])


def _multioutput(forest: Forest, classes: list[Any], raw: bool) -> _Columns:
    """Per target ``k``: its class probabilities and its label."""
    columns: _Columns = []
    for k, labels in enumerate(forest.targets):
        columns += [(f"probability_{k}_{c}", _F64) for c in labels]
        columns += [(f"label_{k}", _label_type(labels))]
    for k, labels in enumerate(forest.targets) if raw else ():
        columns += [(f"raw_{k}_{c}", _F64) for c in labels]
    return columns


def _multilabel(forest: Forest, classes: list[Any], raw: bool) -> _Columns:
    """Per label ``k``: its probability and whether it is set (0/1)."""
    ks = range(forest.n_outputs)
    columns = [c for k in ks for c in ((f"probability_{k}", _F64), (f"label_{k}", pa.int64()))]
    return columns + ([(f"raw_{k}", _F64) for k in ks] if raw else [])


def _predictions(forest: Forest, classes: list[Any], raw: bool) -> _Columns:
    """Regression, ranking, anomaly: ``prediction`` (``prediction_<k>`` per target)."""
    kind = pa.int64() if forest.post_transform == "isolation" else _F64
    several = forest.n_outputs > 1  # a regressor of several targets
    suffixes = [f"_{k}" for k in range(forest.n_outputs)] if several else [""]
    columns = [(f"prediction{n}", kind) for n in suffixes]
    return columns + ([(f"raw{n}", _F64) for n in suffixes] if raw else [])


_COLUMNS = {
    "binary": _binary,
    "multiclass": _multiclass,
    "multioutput": _multioutput,
    "multilabel": _multilabel,
}


def _label_type(classes: list[Any]) -> pa.DataType:
    return pa.from_numpy_dtype(np.asarray(classes).dtype) if classes else pa.int64()


def _split(forest: Forest, values: np.ndarray) -> list[np.ndarray]:
    """Each target's class probabilities ``[B, n_classes_k]`` from the side-by-side ones."""
    ends = np.cumsum([len(c) for c in forest.targets])[:-1]
    return np.split(_by_row(values), ends, axis=1)


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


def probabilities(forest: Forest, values: np.ndarray) -> Any:
    """Transformed values ``[B, K]`` -> ``predict_proba``'s ``[B, n_classes]`` (for
    several targets, as scikit-learn: a list of each target's ``[B, n_classes_k]``)."""
    if forest.task == "multioutput":
        return _split(forest, values)
    if forest.task == "multilabel":  # XGBoost: each label's probability, side by side
        return values
    if forest.task not in ("binary", "multiclass"):
        raise UnsupportedModelError(
            f"predict_proba is for classifiers; {forest.described} ({forest.objective}) "
            "predicts values: use predict"
        )
    if forest.task == "binary" and values.shape[1] == 1:
        p = values[:, 0]
        both = np.empty((len(p), 2), dtype=np.result_type(p, 1.0), order="F")
        both[:, 0], both[:, 1] = 1.0 - p, p  # each class's column contiguous: an output
        return both  # column is its memory as it is, and the label reads two columns
    return values  # one column per class (a forest fitted on one class has one)


def _argmax(values: np.ndarray) -> np.ndarray:
    """``np.argmax(values, axis=1)``; for two columns by comparison, about twice as fast
    as numpy's argmax along a short axis (the first of equals wins, and a NaN, as there)."""
    if values.ndim != 2 or values.shape[1] != 2:
        return np.argmax(values, axis=1)
    first, second = values[:, 0], values[:, 1]
    return ((second > first) | (np.isnan(second) & ~np.isnan(first))).astype(np.intp)


def _labels_at(classes: Sequence[Any], index: np.ndarray) -> np.ndarray:
    """``classes[index]``; the index itself where the classes are 0, 1, ... (no gather)."""
    labels = np.asarray(classes)
    if labels.dtype.kind in "iu" and np.array_equal(labels, np.arange(len(labels))):
        return index.astype(labels.dtype, copy=False)
    return labels[index]


def predictions(forest: Forest, values: np.ndarray) -> np.ndarray:
    """Transformed values ``[B, K]`` -> ``predict``'s output."""
    if forest.post_transform == "isolation":
        return np.where(values[:, 0] < 0, -1, 1)
    if forest.task == "multilabel":  # XGBoost's 0.0/1.0 per label
        return np.where(values > 0.5, 1.0, 0.0)
    if forest.task == "multioutput":  # scikit-learn's array: the first target's dtype
        parts = zip(forest.targets, _split(forest, values), strict=True)
        labels = [np.asarray(c)[_argmax(p)] for c, p in parts]
        return np.column_stack(labels).astype(np.asarray(forest.targets[0]).dtype)
    if forest.predict_returns == "class_index":
        return _argmax(values).astype(np.float32)
    if forest.predict_returns == "label":
        index = _argmax(probabilities(forest, values))
        classes = forest.classes if forest.classes is not None else np.arange(values.shape[1])
        labels = np.asarray(classes)[index]
        return labels[:, None] if forest.labels_as_column else labels
    return squeeze(values)

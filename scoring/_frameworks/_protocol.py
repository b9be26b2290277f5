"""The seam every framework fills: recognise, import, safe bytes, native predictor.

A framework module defines one :class:`Framework` (what the registry, the compiler and
the engines ask of it) and one :class:`NativeModel` subclass (its own predictor behind
the calls the backends make).  Nothing outside a framework's module compares its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from .._ir import Forest
from .._outputs import predictions, probabilities
from ..errors import InputError, UnsupportedModelError

__all__ = ["FRAMEWORKS", "Framework", "NativeModel", "native_input", "register"]


def native_input(X: Any) -> Any:
    """What the frameworks accept: numpy or pandas."""
    if isinstance(X, torch.Tensor):
        return X.detach().cpu().numpy()
    if isinstance(X, (pa.Table, pa.RecordBatch)):
        return X.to_pandas()
    return X


class NativeModel:
    """The framework's own predictor, answering in the shapes our backends return."""

    #: Whether the framework computes contributions itself (:meth:`predict_contributions`).
    has_contributions = False

    def __init__(self, model: Any, forest: Forest):
        self.model = model
        self.forest = forest

    @property
    def sklearn_api(self) -> bool:
        """Whether the object is a scikit-learn-style estimator (not a raw Booster)."""
        return hasattr(self.model, "get_params")

    def one_thread(self) -> NativeModel | None:
        """This predictor with every call on one thread (the caller's model is copied,
        never changed); None where the framework has no such setting."""
        return None

    def prepare(self, X: Any, method: str) -> Any:
        """``X`` (numpy or pandas) as the framework's ``method`` takes it."""
        return X

    def call(self, method: str, X: Any, **kwargs: Any) -> np.ndarray:
        return np.asarray(self.answer(method, X, **kwargs))

    def answer(self, method: str, X: Any, **kwargs: Any) -> Any:
        """What ``model.method(X)`` returns, as it returns it (bad input: InputError).

        Zero rows, which scikit-learn and LightGBM refuse, get the answer to one row
        the model accepts, cut to none: the shape and dtype the model would return."""
        X = native_input(X)
        empty = len(X) == 0
        rows = self.one_row(X) if empty else X
        value = self.asked(
            lambda: getattr(self.model, method)(self.prepare(rows, method), **kwargs)
        )
        if not empty:
            return value
        return [v[:0] for v in value] if isinstance(value, list) else value[:0]

    def one_row(self, X: Any) -> Any:
        """One row shaped as ``X``: zeros, and a known category (or label) where the
        column holds categories, as the import's probes asked."""
        if not isinstance(X, pd.DataFrame):
            return np.zeros((1, *np.shape(X)[1:]), dtype=np.asarray(X).dtype)
        labels = self.forest.categories if X.shape[1] == self.forest.n_features else {}
        row = {}
        for j, (name, column) in enumerate(X.items()):
            known = list(labels.get(j, []))
            if isinstance(column.dtype, pd.CategoricalDtype):
                first = list(column.cat.categories[:1]) or known[:1] or [np.nan]
                row[name] = pd.Categorical(first, categories=column.cat.categories)
            elif pd.api.types.is_numeric_dtype(column.dtype):
                row[name] = np.zeros(1, dtype=column.dtype)
            else:
                row[name] = np.array(known[:1] or [None], dtype=object)
        return pd.DataFrame(row)

    def asked(self, call: Callable[[], Any]) -> Any:
        """What ``call`` returns; a ValueError (how frameworks report bad input) as an
        InputError naming the model."""
        try:
            return call()
        except ValueError as exc:
            raise InputError(f"{self.forest.model_kind} rejected the input: {exc}") from exc

    def predict(self, X: Any) -> np.ndarray:
        if self.forest.predict_returns == "label" and not self.sklearn_api:
            # A Booster restored from a registered classifier: labels from its classes.
            return predictions(self.forest, self.predict_proba(X))
        return self.call("predict", X)

    def predict_proba(self, X: Any) -> np.ndarray:
        if hasattr(self.model, "predict_proba"):
            return self.call("predict_proba", X)
        if self.forest.predict_returns == "class_index":  # multi:softmax gives labels only
            margin = self.predict_raw(X)
            e = np.exp(margin - margin.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        values = self.call("predict", X)  # Boosters return transformed values
        return probabilities(self.forest, values if values.ndim == 2 else values[:, None])

    @abstractmethod
    def predict_raw(self, X: Any) -> np.ndarray:
        """Margins before the link, as the framework reports them."""

    @abstractmethod
    def predict_leaf(self, X: Any) -> np.ndarray:
        """The native leaf id per row and tree, in the IR's tree order."""

    def predict_contributions(self, X: Any) -> np.ndarray:
        """The framework's own TreeSHAP, ``[rows, outputs, features + 1]``."""
        raise UnsupportedModelError(
            f"{self.forest.model_kind} has no contributions API of its own; use "
            "backend='tensor', which computes them from the trees"
        )


class Framework(ABC):
    """One supported library: how its models are recognised, imported and stored."""

    #: The name recorded in schemas and Forests, and the package its classes live in.
    name: str
    #: The distribution whose version is recorded with every model.
    distribution: str
    #: The artifact file name in the registry; its suffix says the safe format.
    artifact: str
    #: Model file suffixes this framework reads.
    suffixes: tuple[str, ...]
    #: Whether Hummingbird (the comparison backend) has converters for its models.
    hummingbird: bool = True
    #: Whether the native predictor runs in this process, so that ``auto`` on CPU may
    #: time it against the kernel (Spark's runs in a JVM: it is the reference only).
    in_process: bool = True

    def recognises(self, model: Any) -> bool:
        return type(model).__module__.split(".")[0] == self.name

    def claims(self, path: Path) -> bool:
        """Whether a file with one of :attr:`suffixes` is this framework's (a suffix two
        frameworks share, ``.json``, is told apart by its content)."""
        return True

    @abstractmethod
    def load_file(self, path: Path, *, trusted: bool) -> Any:
        """A model object from a file with one of :attr:`suffixes`."""

    def reads_folder(self, url: str) -> bool:
        """Whether ``url`` (a path or an object-store URL) is a model folder of this
        framework's (Spark ML saves a model as a folder)."""
        return False

    def load_folder(self, url: str) -> Any:
        """The model object saved in a folder :meth:`reads_folder` claims."""
        raise NotImplementedError(f"{self.name} models are not saved as folders")

    def adopt(self, model: Any) -> Any:
        """A recognised model object as this framework keeps it (Spark ML: a fitted
        model's saved files, read back); most keep the object as it is."""
        return model

    @abstractmethod
    def to_forest(self, model: Any) -> Forest:
        """The fitted model in the Forest IR (refusing what cannot be compiled)."""

    @abstractmethod
    def dump(self, model: Any) -> bytes:
        """The model's canonical bytes in the framework's safe format: the same model
        always gives the same bytes, whose sha256 identifies it everywhere."""

    @abstractmethod
    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        """Bytes written by :meth:`dump` -> the model object and its Forest."""

    @abstractmethod
    def native(self, model: Any, forest: Forest) -> NativeModel:
        """The framework's own predictor for ``model``."""

    def named(self, model: Any, names: list[str]) -> Any | None:
        """``model`` with ``names`` recorded as its feature names, in its own format (what
        the registry stores: a model trained on unnamed data, logged with a signature that
        names its columns); None where the format cannot record them."""
        return None


#: Every supported framework by name, in the order they are tried on a model object.
FRAMEWORKS: dict[str, Framework] = {}


def register(framework: Framework) -> Framework:
    """Add a framework to :data:`FRAMEWORKS` (each framework module does, on import)."""
    FRAMEWORKS[framework.name] = framework
    return framework

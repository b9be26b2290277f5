"""Frameworks: one module each behind :class:`Framework`, registered in one table.

Adding a framework is one module (a :class:`Framework` and a :class:`NativeModel`
subclass, ``FRAMEWORK = register(...)``) plus its name on the import line below, which
registers it in :data:`FRAMEWORKS`.  The verbs
here (``framework_of``, ``import_model``, ``load_model_file``, ``dump_model``,
``restore_model``, ``native_model``) are what the rest of the package calls; none of
it compares a framework's name.
"""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import torch

from .._ir import Forest
from ..errors import ModelFileError, UnsupportedModelError, UntrustedModelError, translated
from . import catboost, lightgbm, onnx, sklearn, sparkml, xgboost  # noqa: F401  (registration)
from ._mlflow import (
    MlflowModel,
    check_reachable,
    is_mlflow_ref,
    load_mlflow_model,
    mlflow_client,
    mlflow_name,
    mlflow_tracking,
)
from ._protocol import FRAMEWORKS, Framework, NativeModel, native_input
from ._wrappers import fitted_model

__all__ = [
    "FRAMEWORKS",
    "Framework",
    "NativeModel",
    "dump_model",
    "framework_named",
    "framework_of",
    "import_model",
    "MlflowModel",
    "check_reachable",
    "is_mlflow_ref",
    "library_versions",
    "load_mlflow_model",
    "load_model_file",
    "mlflow_client",
    "mlflow_name",
    "mlflow_tracking",
    "model_object",
    "native_input",
    "native_model",
    "restore_model",
]


_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")


def framework_of(model: Any) -> Framework:
    """The framework a fitted model object belongs to."""
    for framework in FRAMEWORKS.values():
        if framework.recognises(model):
            return framework
    raise UnsupportedModelError(
        f"{type(model).__module__}.{type(model).__name__} is not a supported model: expected "
        "a fitted scikit-learn tree ensemble, an XGBoost, LightGBM, CatBoost or Spark ML tree "
        "model, an ONNX ModelProto, or a model file or saved Spark ML folder"
    )


def framework_named(name: str) -> Framework:
    """The framework a schema or Forest records by name."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise UnsupportedModelError(
            f"framework {name!r} is not supported here (known: {', '.join(FRAMEWORKS)}); "
            "upgrade scoring"
        ) from None


def model_object(model: Any, *, trusted: bool = False) -> Any:
    """The fitted model a caller hands in (an object, a model file or folder, or an MLflow
    model), taken out of a search or a trivial Pipeline (:func:`._wrappers.fitted_model`),
    as its framework keeps it (:meth:`Framework.adopt`: a fitted Spark ML model as its
    saved files hold it)."""
    if is_mlflow_ref(model):
        model = load_mlflow_model(model, trusted=trusted).model
    elif isinstance(model, (str, os.PathLike)):
        model = load_model_file(model, trusted=trusted)
    model = fitted_model(model)
    known = next((f for f in FRAMEWORKS.values() if f.recognises(model)), None)
    return model if known is None else known.adopt(model)


def import_model(model: Any, *, trusted: bool = False) -> Forest:
    """Import a fitted model object or a model file into the Forest IR."""
    model = model_object(model, trusted=trusted)
    return framework_of(model).to_forest(model)


def load_model_file(path: str | os.PathLike[str], *, trusted: bool = False) -> Any:
    """A model object from a file in its framework's own format (by suffix).

    Pickle files (``.pkl``, ``.joblib``) are refused unless ``trusted=True``: unpickling
    runs arbitrary code.
    """
    folders = [f for f in FRAMEWORKS.values() if f.reads_folder(str(path))]
    if folders:  # a saved model folder, on this machine or an object store
        return folders[0].load_folder(str(path))
    if "://" in str(path):
        raise ModelFileError(
            f"model {str(path)!r} is not a saved Spark ML folder: model files are read from "
            "this machine (download it), saved Spark ML folders from object stores too"
        )
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"model file {str(p)!r} does not exist")
    suffix = p.suffix.lower()
    if suffix in _PICKLE_SUFFIXES:
        return _load_pickle(p, trusted=trusted)
    readers = [f for f in FRAMEWORKS.values() if suffix in f.suffixes and f.claims(p)]
    if not readers:
        known = ", ".join(f"{' '.join(f.suffixes)} ({f.name})" for f in FRAMEWORKS.values())
        raise ModelFileError(
            f"model file {str(p)!r} has an unknown suffix {suffix!r}: expected {known}"
        )
    # A parser's reason is its first line (XGBoost's last lines are a backtrace).
    with translated("model file", f"cannot read model file {str(p)!r}", first_line=True):
        return readers[0].load_file(p, trusted=trusted)


def dump_model(model: Any) -> bytes:
    """The model's canonical bytes in its framework's safe format."""
    return framework_of(model).dump(model)


def restore_model(
    framework: str, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool = False
) -> tuple[Any, Forest]:
    """Bytes written by :func:`dump_model` -> (model object, Forest IR)."""
    handler = framework_named(framework)
    with translated("model file", f"cannot read the stored {kind} ({framework})", first_line=True):
        return handler.restore(data, kind=kind, classes=classes, trusted=trusted)


def native_model(model: Any, forest: Forest) -> NativeModel:
    """The framework's own predictor for a model imported into ``forest``."""
    return framework_named(forest.framework).native(model, forest)


def library_versions(framework: str) -> dict[str, str]:
    """Python, torch, scoring and the framework's library versions, as recorded."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("scoring", framework_named(framework).distribution):
        try:
            out[dist] = dist_version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _load_pickle(path: Path, *, trusted: bool) -> Any:
    if not trusted:
        raise UntrustedModelError(
            f"{path} is a pickle: loading it runs arbitrary code. Save the model in its "
            "framework's own format (.skops, XGBoost .json/.ubj, LightGBM .txt), or pass "
            "trusted=True if you trust its author"
        )
    import joblib

    return joblib.load(path)

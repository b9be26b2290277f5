"""Model objects and model files -> :class:`scoring.ir.Forest`.

``import_model`` is the stage's verb; ``load_model_file`` reads a file in its framework's
own format and never unpickles bytes the caller has not marked trusted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ModelFileError, UnsupportedModelError, UntrustedModelError
from ..ir import Forest

__all__ = ["import_model", "load_model_file", "load_skops_bytes", "framework_of"]

_PICKLE_SUFFIXES = {".pkl", ".pickle", ".joblib"}


def framework_of(model: Any) -> str:
    """'sklearn', 'xgboost' or 'lightgbm', from the class's home package."""
    root = type(model).__module__.split(".")[0]
    if root in ("sklearn", "xgboost", "lightgbm"):
        return root
    raise UnsupportedModelError(
        f"{type(model).__module__}.{type(model).__name__} is not a supported model: expected a "
        "fitted scikit-learn tree ensemble, an XGBoost or LightGBM model, or a model file"
    )


def import_model(model: Any, *, trusted: bool = False) -> Forest:
    """Import a fitted model object or a model file into the Forest IR."""
    if isinstance(model, (str, os.PathLike)):
        model = load_model_file(model, trusted=trusted)
    framework = framework_of(model)
    if framework == "sklearn":
        _require_fitted(model)
        from .sklearn import import_sklearn

        return import_sklearn(model)
    if framework == "xgboost":
        from .xgboost import import_xgboost

        return import_xgboost(model)
    from .lightgbm import import_lightgbm

    return import_lightgbm(model)


def _require_fitted(model: Any) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(model)
    except NotFittedError as exc:
        raise UnsupportedModelError(f"{type(model).__name__} is not fitted: {exc}") from None
    except TypeError as exc:  # not an estimator at all (e.g. a Pipeline's step list)
        raise UnsupportedModelError(str(exc)) from None


def load_model_file(path: str | os.PathLike[str], *, trusted: bool = False) -> Any:
    """Load ``.json``/``.ubj`` (XGBoost), ``.txt`` (LightGBM) or ``.skops`` (scikit-learn).

    Pickle files (``.pkl``, ``.joblib``) are refused unless ``trusted=True``: unpickling
    runs arbitrary code.
    """
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"model file {str(p)!r} does not exist")
    suffix = p.suffix.lower()
    try:
        if suffix in (".json", ".ubj"):
            import xgboost

            return xgboost.Booster(model_file=str(p))
        if suffix == ".txt":
            import lightgbm

            return lightgbm.Booster(model_file=str(p))
        if suffix == ".skops":
            return _load_skops(p, trusted=trusted)
        if suffix in _PICKLE_SUFFIXES:
            return _load_pickle(p, trusted=trusted)
    except (ModelFileError, UntrustedModelError):
        raise
    except Exception as exc:  # framework loaders raise their own error types
        raise ModelFileError(f"cannot read model file {str(p)!r}: {exc}") from exc
    raise ModelFileError(
        f"model file {str(p)!r} has an unknown suffix {suffix!r}: expected .json or .ubj "
        "(XGBoost), .txt (LightGBM) or .skops (scikit-learn)"
    )


def _load_skops(path: Path, *, trusted: bool) -> Any:
    return load_skops_bytes(path.read_bytes(), what=str(path), trusted=trusted)


def load_skops_bytes(data: bytes, *, what: str, trusted: bool = False) -> Any:
    """A skops payload; types outside scikit-learn and numpy need ``trusted=True``."""
    import skops.io as sio

    untrusted = sio.get_untrusted_types(data=data)
    # scikit-learn's own classes and functions are safe to reference, and so is a partial
    # (its target is listed on its own); anything else is not.
    safe = ("sklearn.", "numpy.", "builtins.")
    foreign = [t for t in untrusted if not t.startswith(safe) and t != "functools.partial"]
    if foreign and not trusted:
        raise UntrustedModelError(
            f"{what} references types outside scikit-learn: {', '.join(foreign)}; "
            "pass trusted=True only if you trust its author"
        )
    return sio.loads(data, trusted=untrusted)


def _load_pickle(path: Path, *, trusted: bool) -> Any:
    if not trusted:
        raise UntrustedModelError(
            f"{path} is a pickle: loading it runs arbitrary code. Save the model as .skops, "
            "XGBoost .json/.ubj or LightGBM .txt, or pass trusted=True if you trust its author"
        )
    import joblib

    return joblib.load(path)

"""Models <-> bytes in each framework's own safe format (no pickle).

* XGBoost: UBJSON (``.ubj``); the sklearn wrappers keep their attributes in it.
* LightGBM: the model text (``.txt``) of the iterations the model predicts with.  The
  sklearn wrappers come back as a ``lightgbm.Booster``; their class labels are restored
  from the recorded schema, so predictions are unchanged.
* scikit-learn: skops (``.skops``); only scikit-learn and numpy types load without
  ``trusted=True``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError
from ..importers import import_model, load_skops_bytes
from ..ir import Forest
from .schema import ModelSchema

__all__ = ["FILENAMES", "dump_model", "restore_model"]

#: framework -> artifact file name (its suffix says the format).
FILENAMES = {"xgboost": "model.ubj", "lightgbm": "model.txt", "sklearn": "model.skops"}


def dump_model(model: Any, forest: Forest) -> bytes:
    """The model's bytes in its framework's safe format."""
    if forest.framework == "xgboost":
        return _dump_xgboost(model)
    if forest.framework == "lightgbm":
        from ..importers.lightgbm import model_text

        return model_text(model).encode("utf-8")
    import skops.io as sio

    return bytes(sio.dumps(model))


def _dump_xgboost(model: Any) -> bytes:
    import xgboost

    if isinstance(model, xgboost.Booster):
        return bytes(model.save_raw(raw_format="ubj"))
    with tempfile.TemporaryDirectory() as tmp:  # the wrappers only save to a file
        path = Path(tmp) / "model.ubj"
        model.save_model(path)
        return path.read_bytes()


def restore_model(schema: ModelSchema, data: bytes, *, trusted: bool = False) -> tuple[Any, Forest]:
    """Bytes written by :func:`dump_model` -> (model object, Forest IR)."""
    try:
        model = _load(schema, data, trusted=trusted)
    except (ModelFileError, UnsupportedModelError):
        raise
    except Exception as exc:  # framework loaders raise their own error types
        raise ModelFileError(
            f"cannot read the stored {schema.model_kind} ({schema.framework}): {exc}"
        ) from exc
    forest = import_model(model)
    if schema.framework == "lightgbm" and schema.model_kind != "lightgbm.Booster":
        forest.model_kind = schema.model_kind
        if schema.classes is not None:
            forest.classes = np.asarray(schema.classes)
            forest.predict_returns = "label"
    return model, forest


def _load(schema: ModelSchema, data: bytes, *, trusted: bool) -> Any:
    if schema.framework == "xgboost":
        import xgboost

        if schema.model_kind == "xgboost.Booster":
            return xgboost.Booster(model_file=bytearray(data))
        wrapper = getattr(xgboost, schema.model_kind, None)
        if wrapper is None:
            raise UnsupportedModelError(f"xgboost has no model class {schema.model_kind!r}")
        model = wrapper()
        model.load_model(bytearray(data))
        return model
    if schema.framework == "lightgbm":
        import lightgbm

        return lightgbm.Booster(model_str=data.decode("utf-8"))
    return load_skops_bytes(data, what=f"stored {schema.model_kind}", trusted=trusted)

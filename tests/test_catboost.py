"""CatBoost as a fourth framework: stored in its own format, read from ``.cbm`` files, and
refused where CatBoost's own encodings would be needed.  Its scores are held to native by
the parity suite (recipes ``cb_*``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring.errors import UnsupportedModelError

from .conftest import built

cb = pytest.importorskip("catboost")


def test_a_registered_model_is_catboosts_own_file_and_the_same_bytes_twice(
    tmp_path: Path,
) -> None:
    model, _, _ = built("cb_multi")
    registry = scoring.Registry(tmp_path / "reg")
    first, again = registry.register("segments", model), registry.register("segments", model)
    assert first.sha256 == again.sha256 and again.version == 2
    bundle = registry.bundle("segments")
    assert bundle.model_bytes[:4] == b"CBM1"  # CatBoost's own binary format
    rows = np.random.default_rng(1).normal(size=(200, 6))
    cm = scoring.compile(bundle, backend="tensor", device="cpu")
    np.testing.assert_array_equal(cm.predict(rows), model.predict(rows))  # [rows, 1] labels
    np.testing.assert_array_equal(cm.predict_raw(rows), model.predict(rows, "RawFormulaVal"))


def test_a_restored_poisson_model_predicts_counts_as_the_trained_one(tmp_path: Path) -> None:
    model, _, _ = built("cb_poisson")
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("counts", model)
    rows = np.random.default_rng(2).normal(size=(300, 6))
    for backend in ("native", "tensor"):
        cm = scoring.compile(registry.bundle("counts"), backend=backend, device="cpu")
        np.testing.assert_allclose(cm.predict(rows), model.predict(rows), rtol=1e-9)


@pytest.mark.parametrize("fmt", ["cbm", "json"])
def test_a_model_file_is_read_as_the_class_its_loss_says(tmp_path: Path, fmt: str) -> None:
    model, _, _ = built("cb_clf")
    path = tmp_path / f"model.{fmt}"
    model.save_model(str(path), format=fmt)
    cm = scoring.compile(path, backend="tensor", device="cpu")
    assert cm.forest.model_kind == "CatBoostClassifier"
    rows = np.random.default_rng(2).normal(size=(200, 6))
    np.testing.assert_array_equal(cm.predict(rows), model.predict(rows))


def test_an_xgboost_json_file_is_still_xgboosts(tmp_path: Path) -> None:
    model, _, _ = built("xgb_clf")
    path = tmp_path / "model.json"
    model.save_model(path)
    assert scoring.compile(path, backend="tensor", device="cpu").forest.framework == "xgboost"


def test_a_categorical_feature_is_refused_by_name() -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"region": rng.choice(["eu", "us"], 200), "x": rng.normal(size=200)})
    model = cb.CatBoostClassifier(
        iterations=3, depth=2, verbose=0, allow_writing_files=False, cat_features=["region"]
    )
    model.fit(frame, (frame["x"] > 0).astype(int))
    with pytest.raises(UnsupportedModelError, match="categorical feature 'region'"):
        scoring.compile(model, backend="tensor", device="cpu")

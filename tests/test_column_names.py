"""Columns are matched by name whenever the input has the model's names, including the
names frameworks give unnamed features: shuffled ``f0..fN`` are never read by position,
and other names given to an unnamed model are refused, not read by position."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb

import scoring
from scoring._inputs import feature_names
from scoring._parity import probe_rows
from scoring.errors import MissingColumnError

from .conftest import RECIPES, as_model_input, built


@pytest.mark.parametrize(("name", "prefix"), [("xgb_reg", "f"), ("lgb_reg", "Column_"),
                                              ("sk_rf_reg", "f")])  # fmt: skip
def test_shuffled_generic_columns_are_read_by_name(tmp_path: Path, name: str, prefix: str) -> None:
    model, forest, native = built(name)
    X = np.random.default_rng(2).normal(size=(500, forest.n_features))
    frame = pd.DataFrame(X, columns=[f"{prefix}{i}" for i in range(forest.n_features)])
    shuffled = frame[frame.columns[::-1]]
    expected = native.predict_raw(X)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    np.testing.assert_allclose(cm.predict_raw(shuffled), expected, rtol=1e-6, atol=1e-6)
    source = tmp_path / "in"
    source.mkdir()
    pq.write_table(pa.Table.from_pandas(shuffled.assign(id=np.arange(500))), source / "a.parquet")
    scoring.score_parquet(source, tmp_path / "out", cm, keep=["id"], outputs="raw",
                          progress=False)  # fmt: skip
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    np.testing.assert_allclose(out["raw"], expected.ravel(), rtol=1e-6, atol=1e-6)


def test_a_model_whose_real_names_look_generic_names_the_missing_one() -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(300, 5)), columns=[f"f{i}" for i in range(5)])
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(frame, frame["f0"] * 2)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    with pytest.raises(MissingColumnError, match="'f3'"):
        cm.predict(frame.drop(columns="f3").assign(extra=1.0))


def test_an_unnamed_model_refuses_other_names_instead_of_reading_by_position(
    tmp_path: Path,
) -> None:
    model, forest, native = built("xgb_reg")
    assert feature_names(forest) is None  # trained on a bare array
    X = np.random.default_rng(4).normal(size=(200, forest.n_features))
    names = [f"x{i}" for i in range(forest.n_features)]
    source = tmp_path / "in"
    source.mkdir()
    frame = pd.DataFrame(X, columns=names).assign(id=np.arange(200))
    pq.write_table(pa.Table.from_pandas(frame[["id", *names[::-1]]]), source / "a.parquet")
    cm = scoring.compile(model, backend="tensor", device="cpu")
    with pytest.raises(MissingColumnError, match=r"without feature names.*found x\d+.*f0\.\.f"):
        scoring.score_parquet(source, tmp_path / "out", cm, keep=["id"], progress=False)
    assert not list(tmp_path.glob("out/**/*.parquet"))
    # An in-memory frame is the caller's own, in view: read as the framework reads it.
    np.testing.assert_allclose(cm.predict_raw(pd.DataFrame(X, columns=names)),
                               native.predict_raw(X), rtol=1e-6, atol=1e-6)  # fmt: skip


#: Every recipe trained on a named frame (category, text and Pipeline-encoded columns).
NAMED = [name for name, recipe in RECIPES.items() if recipe.frame]


@pytest.mark.parametrize("backend", ["tensor", "native", "auto"])
@pytest.mark.parametrize("name", NAMED)
def test_extra_and_reordered_columns_score_alike_on_every_backend_and_input_kind(
    name: str, backend: str
) -> None:
    """One rule for every backend and input kind: by name, extra columns ignored, any
    order; a missing one refused by name."""
    model, forest, _ = built(name)
    X = as_model_input(RECIPES[name], probe_rows(forest, n_rows=64, special=False), forest)
    cm = scoring.compile(model, backend=backend, device="cpu")
    methods = ["predict", "predict_raw"]
    if forest.task in ("binary", "multiclass"):
        methods.append("predict_proba")
    expected = {m: np.asarray(getattr(cm, m)(X)) for m in methods}
    shuffled = X[list(X.columns[::-1])].assign(row_id=np.arange(len(X)), note="extra")
    for rows in (shuffled, pa.Table.from_pandas(shuffled, preserve_index=False)):
        for method in methods:
            np.testing.assert_array_equal(np.asarray(getattr(cm, method)(rows)), expected[method])
    gone = str(X.columns[1])
    for rows in (shuffled.drop(columns=gone), pa.Table.from_pandas(shuffled.drop(columns=gone))):
        with pytest.raises(MissingColumnError, match=repr(gone)):
            cm.predict(rows)

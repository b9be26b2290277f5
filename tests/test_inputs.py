"""Input kinds, name matching, categories and the typed errors for bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import scoring
from scoring.errors import (
    FeatureCountError,
    InvalidValueError,
    MissingColumnError,
    NonNumericColumnError,
    ScoringError,
)

from .conftest import RECIPES, as_model_input, built


def _tensor_model(name: str) -> scoring.CompiledModel:
    return scoring.compile(built(name)[0], backend="tensor", device="cpu")


@pytest.mark.parametrize("name", ["xgb_clf", "lgb_reg", "sk_rf_clf", "sk_hgb_clf"])
def test_numpy_pandas_arrow_torch_agree(name: str) -> None:
    _model, _forest, native = built(name)
    X, _ = RECIPES[name].data(seed=3)
    cm = _tensor_model(name)
    expected = native.predict_raw(X)
    frame = pd.DataFrame(X)
    for given in (X, frame, pa.Table.from_pandas(frame), torch.from_numpy(X)):
        np.testing.assert_allclose(cm.predict_raw(given), expected, rtol=1e-6, atol=1e-6)


def test_pandas_columns_matched_by_name_not_position() -> None:
    _model, _forest, native = built("sk_hgb_frame")
    X, _ = RECIPES["sk_hgb_frame"].data(seed=4)
    shuffled = X[list(reversed(X.columns))].assign(extra=1.0)
    cm = _tensor_model("sk_hgb_frame")
    np.testing.assert_allclose(cm.predict_proba(shuffled), native.predict_proba(X), atol=1e-6)


def test_arrow_dictionary_and_nulls() -> None:
    _, _forest, native = built("lgb_cat_frame")
    X, _ = RECIPES["lgb_cat_frame"].data(seed=5)
    X.loc[::7, "feat_3"] = np.nan
    table = pa.Table.from_pandas(X, preserve_index=False)
    assert pa.types.is_dictionary(table.schema.field("feat_0").type)
    cm = _tensor_model("lgb_cat_frame")
    np.testing.assert_allclose(cm.predict_proba(table), native.predict_proba(X), atol=1e-6)


def test_unseen_category_in_frame_goes_where_native_sends_it() -> None:
    _, forest, native = built("lgb_cat_frame")
    rows = np.zeros((4, 6))
    rows[:, 0] = [0, 1, 500, np.nan]  # 500 is no known category code -> unseen label
    X = as_model_input(RECIPES["lgb_cat_frame"], rows, forest)
    cm = _tensor_model("lgb_cat_frame")
    np.testing.assert_allclose(cm.predict_proba(X), native.predict_proba(X), atol=1e-6)


def test_float64_input_keeps_float64_branching() -> None:
    """A float64 value strictly between float32 neighbours of a LightGBM threshold."""
    _model, forest, native = built("lgb_reg")
    tree = forest.trees[0]
    t = float(tree.threshold[0])
    f = int(tree.feature[0])
    X = np.zeros((2, forest.n_features))
    X[:, f] = [t, np.nextafter(t, np.inf)]  # at and just above: left then right
    cm = _tensor_model("lgb_reg")
    np.testing.assert_array_equal(cm.predict_leaf(X), native.predict_leaf(X))
    np.testing.assert_allclose(cm.predict(X), native.predict(X), rtol=1e-12)


def test_nan_refused_for_gradient_boosting_with_column_and_count() -> None:
    X, _ = RECIPES["sk_gb_clf"].data(seed=1)
    X[:5, 2] = np.nan
    cm = _tensor_model("sk_gb_clf")
    with pytest.raises(InvalidValueError, match=r"'column 2' has 5 NaN"):
        cm.predict(X)


@pytest.mark.parametrize("name", ["sk_rf_clf", "sk_gb_reg"])
def test_inf_refused_where_native_refuses(name: str) -> None:
    X, _ = RECIPES[name].data(seed=1)
    X[3, 1] = np.inf
    X[4, 1] = -np.inf
    X[5, 1] = -1e39  # finite in float64, past float32's range: the float32 readers refuse it
    assert X.dtype == np.float64
    with pytest.raises(InvalidValueError, match=r"'column 1' has 3 infinite") as refused:
        _tensor_model(name).predict(X)
    assert "Input X contains infinity" in str(refused.value)  # scikit-learn's own reason


@pytest.mark.parametrize("name", ["lgb_clf", "xgb_clf"])
def test_inf_accepted_where_native_accepts(name: str) -> None:
    _, _forest, native = built(name)
    X, _ = RECIPES[name].data(seed=1)
    X[:3, 1] = [np.inf, -np.inf, 1e300]
    np.testing.assert_array_equal(_tensor_model(name).predict_raw(X), native.predict_raw(X))


def test_wrong_feature_count() -> None:
    with pytest.raises(
        FeatureCountError, match="3 feature columns but XGBClassifier was trained on 6"
    ):
        _tensor_model("xgb_clf").predict(np.zeros((2, 3)))


def test_missing_named_column_is_named() -> None:
    X, _ = RECIPES["sk_hgb_frame"].data()
    with pytest.raises(MissingColumnError, match="'feat_4'"):
        _tensor_model("sk_hgb_frame").predict(X.drop(columns=["feat_4"]))


def test_non_numeric_column_is_named() -> None:
    X, _ = RECIPES["sk_hgb_frame"].data()
    X["feat_3"] = "text"
    with pytest.raises(NonNumericColumnError, match="'feat_3'"):
        _tensor_model("sk_hgb_frame").predict(X)


def test_every_error_is_a_scoring_error() -> None:
    for exc in (InvalidValueError, MissingColumnError, NonNumericColumnError, FeatureCountError):
        assert issubclass(exc, ScoringError)

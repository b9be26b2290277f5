"""scikit-learn's meta-estimators around tree models: what is taken apart, what is stored,
and what is refused (with the wrapper or the step named).  Their scores are held to
native by the parity suite (recipes ``sk_mo_*``, ``sk_grid_rf``, ``xgb_search``,
``lgb_pipeline``, ``sk_pipe_*``, ``sk_chain_*``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xgboost as xgb
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.model_selection import GridSearchCV
from sklearn.multioutput import ClassifierChain, MultiOutputClassifier, MultiOutputRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import scoring
from scoring._scorer import Scorer
from scoring.errors import UnsupportedModelError

RNG = np.random.default_rng(9)
X = RNG.normal(size=(300, 4))
SIGNAL = X[:, 0] + X[:, 1]
Y = np.column_stack([SIGNAL, SIGNAL**2])
LABELS = np.column_stack([SIGNAL > 0, np.digitize(SIGNAL, [-1.0, 1.0])]).astype(int)


def test_a_search_is_its_refit_estimator_stored_in_its_own_format(tmp_path: Path) -> None:
    search = GridSearchCV(xgb.XGBClassifier(max_depth=3), {"n_estimators": [2, 4]}, cv=2)
    search.fit(X, LABELS[:, 0])
    registry = scoring.Registry(tmp_path / "reg")
    version = registry.register("churn", search)
    assert version.schema.model_kind == "XGBClassifier"  # stored as XGBoost's own bytes
    cm = scoring.compile(registry.bundle("churn"), backend="tensor", device="cpu")
    margins = search.best_estimator_.predict(X, output_margin=True)
    np.testing.assert_array_equal(cm.predict_raw(X), margins)
    np.testing.assert_allclose(cm.predict_proba(X), search.predict_proba(X), atol=1e-6)


def test_a_multi_output_classifier_scores_each_target_as_its_estimator() -> None:
    model = MultiOutputClassifier(ExtraTreesClassifier(n_estimators=4, random_state=0))
    model.fit(X, LABELS)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    for ours, native in zip(cm.predict_proba(X), model.predict_proba(X), strict=True):
        np.testing.assert_array_equal(ours, native)
    table = pa.table({f"f{i}": X[:, i] for i in range(4)})
    scored = Scorer(cm).score(table)
    assert scored.schema.names == ["probability_0_0", "probability_0_1", "label_0",
                                   "probability_1_0", "probability_1_1", "probability_1_2",
                                   "label_1"]  # fmt: skip
    np.testing.assert_array_equal(scored.column("label_1").to_numpy(), model.predict(X)[:, 1])


def test_a_pipeline_that_fills_and_picks_columns_is_stored_and_scored_whole(
    tmp_path: Path,
) -> None:
    prep = ColumnTransformer([("fill", SimpleImputer(strategy="mean"), [2]),
                              ("skip", "drop", [0])], remainder="passthrough")  # fmt: skip
    model = Pipeline([("prep", prep), ("model", RandomForestRegressor(n_estimators=3))])
    holes = X.copy()
    holes[::7, 2] = np.nan
    model.fit(holes, Y[:, 0])
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("filled", model)
    cm = scoring.compile(registry.bundle("filled"), backend="tensor", device="cpu")
    assert cm.forest.fill_missing == {2: model[0].named_transformers_["fill"].statistics_[0]}
    np.testing.assert_array_equal(cm.predict(holes), model.predict(holes))


def test_forests_of_different_sizes_do_not_stack() -> None:
    model = MultiOutputRegressor(RandomForestRegressor(n_estimators=3, random_state=0)).fit(X, Y)
    model.estimators_[1] = RandomForestRegressor(n_estimators=5, random_state=0).fit(X, Y[:, 1])
    with pytest.raises(UnsupportedModelError, match="MultiOutputRegressor: its estimators differ"):
        scoring.compile(model, backend="tensor", device="cpu")


@pytest.mark.parametrize(
    ("model", "y", "named"),
    [
        (GridSearchCV(RandomForestClassifier(), {"n_estimators": [2]}, cv=2, refit=False),
         LABELS[:, 0], "refit=False"),
        (Pipeline([("scale", StandardScaler()), ("model", RandomForestClassifier())]),
         LABELS[:, 0], "step 'scale' (StandardScaler)"),
        (Pipeline([("impute", SimpleImputer()), ("model", xgb.XGBClassifier())]),
         LABELS[:, 0], "before XGBClassifier"),
        (ClassifierChain(RandomForestClassifier(n_estimators=2), chain_method="predict_proba"),
         (LABELS > 0).astype(int), "chain_method='predict_proba'"),
        (MultiOutputClassifier(GradientBoostingClassifier(n_estimators=2)), LABELS,
         "MultiOutputClassifier of GradientBoostingClassifier"),
        (MultiOutputRegressor(xgb.XGBRegressor(n_estimators=2)), Y,
         "fit XGBRegressor on every target at once"),
    ],
)  # fmt: skip
def test_what_cannot_be_taken_apart_is_refused_by_name(
    model: Any, y: np.ndarray, named: str
) -> None:
    model.fit(X, y)
    with pytest.raises(UnsupportedModelError, match=re.escape(named)):
        scoring.compile(model, backend="tensor", device="cpu")

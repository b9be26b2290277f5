"""Every objective and boosting type the installed XGBoost and LightGBM accept, trained
small and held to native's ``predict``, ``predict_proba`` and raw margins.

XGBoost's objectives are asked of XGBoost itself (an unknown one makes it list every
candidate); LightGBM's are its documented names and every alias, with each boosting
type (gbdt, rf, dart, goss) and the multiclass forms.  A model the product cannot score
exactly is refused by name (:data:`REFUSED`, also listed in docs/python.md).
"""

from __future__ import annotations

import re
import warnings
from functools import cache
from typing import Any

import numpy as np
import pytest

import scoring
from scoring.errors import UnsupportedModelError

ROWS = 240
#: What the product refuses, by framework and objective, and the words its error says.
REFUSED = {
    ("lightgbm", "linear_tree"): "linear trees",
    ("xgboost", "gblinear"): "booster 'gblinear' is not supported",
}


@cache
def xgboost_objectives() -> list[str]:
    import xgboost as xgb

    try:
        xgb.train({"objective": "not-an-objective"}, xgb.DMatrix(np.zeros((2, 1))), 1)
    except xgb.core.XGBoostError as exc:
        found = sorted(set(re.findall(r"Objective candidate: (\S+)", str(exc))))
    assert len(found) >= 15, "XGBoost no longer lists its objectives on an unknown one"
    return found


#: LightGBM's objectives (docs: Parameters, "objective") with every alias it takes.
LIGHTGBM_OBJECTIVES = [
    "regression", "regression_l2", "l2", "mean_squared_error", "mse", "l2_root",
    "root_mean_squared_error", "rmse", "regression_l1", "l1", "mean_absolute_error", "mae",
    "huber", "fair", "poisson", "quantile", "mape", "mean_absolute_percentage_error",
    "gamma", "tweedie", "binary", "multiclass", "softmax", "multiclassova",
    "multiclass_ova", "ova", "ovr", "cross_entropy", "xentropy", "cross_entropy_lambda",
    "xentlambda", "lambdarank", "rank_xendcg", "xendcg", "xe_ndcg", "xe_ndcg_mart",
    "xendcg_mart",
]  # fmt: skip


def _data(kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows with NaN and a target of the kind the objective learns."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROWS, 5))
    signal = X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=ROWS)
    X[rng.random(X.shape) < 0.08] = np.nan
    if kind in ("binary", "binary_rank"):
        return X, (signal > np.median(signal)).astype(float)
    if kind == "multiclass":
        return X, np.digitize(signal, np.quantile(signal, [0.33, 0.66])).astype(float)
    if kind == "probability":  # a target in [0, 1]
        return X, 1 / (1 + np.exp(-signal))
    if kind == "count":
        return X, rng.poisson(np.exp(np.clip(signal, -2, 2) / 2)).astype(float)
    if kind == "positive":
        return X, np.exp(signal / 2) + 0.1
    if kind == "rank":
        return X, np.digitize(signal, np.quantile(signal, [0.5, 0.8])).astype(float)
    if kind == "survival":  # Cox: negative times are censored
        times = np.exp(signal / 2) + 0.1
        return X, np.where(rng.random(ROWS) < 0.2, -times, times)
    return X, signal


def _xgboost_kind(objective: str) -> str:
    kinds = {"binary": "binary", "multi": "multiclass", "rank": "rank", "count": "count",
             "survival": "survival"}  # fmt: skip
    if objective in ("reg:logistic",):
        return "probability"
    if objective == "rank:map":  # mean average precision: relevant or not
        return "binary_rank"
    if objective in ("reg:gamma", "reg:tweedie", "reg:squaredlogerror"):
        return "positive"
    return kinds.get(objective.split(":")[0], "regression")


def _xgboost_model(objective: str, booster: str, api: str) -> tuple[Any, np.ndarray]:
    import xgboost as xgb

    kind = _xgboost_kind(objective)
    X, y = _data(kind)
    params: dict[str, Any] = {"objective": objective, "booster": booster}
    if booster != "gblinear":
        params["max_depth"] = 3
    if booster == "dart":
        params.update(rate_drop=0.3, skip_drop=0.0)
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = [0.1, 0.5, 0.9]  # several alphas: one output each
    if api == "sklearn":
        return _xgboost_estimator(kind, params).fit(X, y, **_xgboost_fit(kind)), X
    if objective.startswith("multi:"):
        params["num_class"] = 3
    train = xgb.DMatrix(X, y)
    if objective.startswith("rank:"):
        train.set_group([20] * (ROWS // 20))
    if objective == "survival:aft":
        train.set_float_info("label_lower_bound", np.abs(y) + 0.1)
        train.set_float_info("label_upper_bound", np.where(y > 0.5, np.inf, np.abs(y) + 0.5))
    return xgb.train({**params, "seed": 0}, train, num_boost_round=4), X


def _xgboost_estimator(kind: str, params: dict[str, Any]) -> Any:
    import xgboost as xgb

    if kind in ("binary", "multiclass"):
        cls: Any = xgb.XGBClassifier
    else:
        cls = xgb.XGBRanker if kind in ("rank", "binary_rank") else xgb.XGBRegressor
    return cls(n_estimators=4, random_state=0, **params)


def _xgboost_fit(kind: str) -> dict[str, Any]:
    if kind in ("rank", "binary_rank"):
        return {"qid": np.repeat(np.arange(ROWS // 20), 20)}
    return {}


def _lightgbm_kind(objective: str) -> str:
    table = {"binary": "binary", "cross_entropy": "probability", "xentropy": "probability",
             "cross_entropy_lambda": "probability", "xentlambda": "probability",
             "poisson": "count", "tweedie": "count", "gamma": "positive", "mape": "positive",
             "mean_absolute_percentage_error": "positive"}  # fmt: skip
    if objective in ("multiclass", "softmax", "multiclassova", "multiclass_ova", "ova", "ovr"):
        return "multiclass"
    if "rank" in objective or "ndcg" in objective:
        return "rank"
    return table.get(objective, "regression")


def _lightgbm_model(objective: str, boosting: str, api: str) -> tuple[Any, np.ndarray]:
    import lightgbm as lgb

    kind = _lightgbm_kind(objective)
    X, y = _data(kind)
    params: dict[str, Any] = {"objective": objective, "num_leaves": 7, "verbose": -1,
                              "min_data_in_leaf": 5, "seed": 0}  # fmt: skip
    if boosting == "goss":
        params["data_sample_strategy"] = "goss"
    elif boosting == "linear_tree":
        params["linear_tree"] = True
    else:
        params["boosting"] = boosting
    if boosting == "rf":
        params.update(bagging_freq=1, bagging_fraction=0.7, feature_fraction=0.8)
    group = [20] * (ROWS // 20) if kind == "rank" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if api == "sklearn":
                cls = {"binary": lgb.LGBMClassifier, "multiclass": lgb.LGBMClassifier,
                       "rank": lgb.LGBMRanker}.get(kind, lgb.LGBMRegressor)  # fmt: skip
                fit = {"group": group} if group else {}
                return cls(n_estimators=4, **params).fit(X, y, **fit), X
            if kind == "multiclass":
                params["num_class"] = 3
            return lgb.train(params, lgb.Dataset(X, y, group=group), num_boost_round=4), X
        except lgb.basic.LightGBMError as exc:  # e.g. linear trees with regression_l1
            pytest.skip(f"LightGBM itself refuses to train it: {exc}")


def _holds_to_native(model: Any, X: np.ndarray, refused: str | None) -> None:
    if refused is not None:
        with pytest.raises(UnsupportedModelError, match=refused):
            scoring.compile(model, backend="tensor", device="cpu")
        return
    ours = scoring.compile(model, backend="tensor", device="cpu")
    native = scoring.compile(model, backend="native", device="cpu")
    np.testing.assert_allclose(ours.predict(X), native.predict(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.predict_raw(X), native.predict_raw(X), rtol=1e-6, atol=1e-6)
    if ours.forest.task in ("binary", "multiclass"):
        proba = ours.predict_proba(X)
        np.testing.assert_allclose(proba, native.predict_proba(X), rtol=1e-6, atol=1e-6)
        # binary:logitraw "probabilities" are margins, as XGBClassifier's own are.
        if ours.forest.objective != "binary:logitraw":
            assert proba.min() >= 0 and proba.max() <= 1


@pytest.mark.parametrize("api", ["Booster", "sklearn"])
@pytest.mark.parametrize("booster", ["gbtree", "dart", "gblinear"])
@pytest.mark.parametrize("objective", xgboost_objectives())
def test_every_xgboost_objective(objective: str, booster: str, api: str) -> None:
    if api == "sklearn" and objective.startswith("survival:"):
        pytest.skip("XGBoost's scikit-learn API has no survival estimator")
    model, X = _xgboost_model(objective, booster, api)
    refused = REFUSED.get(("xgboost", booster)) or REFUSED.get(("xgboost", objective))
    _holds_to_native(model, X, refused)


@pytest.mark.parametrize("api", ["Booster", "sklearn"])
@pytest.mark.parametrize("boosting", ["gbdt", "rf", "dart", "goss", "linear_tree"])
@pytest.mark.parametrize("objective", LIGHTGBM_OBJECTIVES)
def test_every_lightgbm_objective(objective: str, boosting: str, api: str) -> None:
    model, X = _lightgbm_model(objective, boosting, api)
    refused = REFUSED.get(("lightgbm", boosting)) or REFUSED.get(("lightgbm", objective))
    _holds_to_native(model, X, refused)

"""What the product accepts is what the native predictor accepts, value by value.

Each recipe's model is asked, the way its users call it (scikit-learn ``predict_proba``
or ``predict``, ``decision_function``, XGBoost's ``Booster.inplace_predict``, LightGBM's
``Booster.predict``; leaf ids through ``apply`` / ``pred_leaf``), to score rows holding
+-inf, float64 values past float32's range, NaN and, in integer-coded categorical
columns, negative, fractional, unseen and huge category codes; in a column of text
labels a Pipeline's encoder reads, unseen labels, None, NaN, inf and numbers.  The product, on the
tensor and the native backends, must make the same decision: refuse (with native's
reason in its one-line error) what native refuses, and score what native scores with
the same outputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import scoring
from scoring._ir import Forest
from scoring._parity import TOLERANCE, max_error
from scoring.errors import ScoringError

from .conftest import RECIPES, built

NUMERIC = {"inf": np.inf, "-inf": -np.inf, "1e39": 1e39, "-1e39": -1e39, "nan": np.nan}
CATEGORY = {"-1": -1.0, "-0.5": -0.5, "12.5": 12.5, "1000": 1000.0, "3e9": 3e9,
            "1e20": 1e20, "inf": np.inf, "-inf": -np.inf, "nan": np.nan}  # fmt: skip


#: In a column of text labels: unseen, missing two ways, numbers, and a known label.
LABELS = {"unseen": "zzz", "None": None, "nan": np.nan, "inf": np.inf, "-inf": -np.inf,
          "1e39": 1e39, "3.0": 3.0, "c3": "c3"}  # fmt: skip


Call = Callable[[Any], Any]


def scores(model: Any, forest: Forest, cm: Any) -> tuple[Call, Call]:
    """The native call users make for scores, and ours that answers the same."""
    if isinstance(model, xgb.Booster):
        return (lambda X: model.inplace_predict(X, predict_type="margin")), cm.predict_raw
    if isinstance(model, lgb.Booster):
        return (lambda X: model.predict(X, raw_score=True)), cm.predict_raw
    if forest.task == "anomaly":
        return model.decision_function, cm.predict_raw
    if forest.task in ("binary", "multiclass", "multilabel"):
        return model.predict_proba, cm.predict_proba
    if forest.task == "multioutput":  # a list per target: compared side by side
        return (lambda X: np.hstack(model.predict_proba(X))), (
            lambda X: np.hstack(cm.predict_proba(X))
        )
    return model.predict, cm.predict


def native_leaves(model: Any) -> Callable[[Any], Any] | None:
    if isinstance(model, xgb.Booster):
        kinds = model.feature_types
        return lambda X: model.predict(
            xgb.DMatrix(X, feature_types=kinds, enable_categorical=True), pred_leaf=True
        )
    if isinstance(model, (lgb.Booster, lgb.LGBMModel)):
        return lambda X: model.predict(X, pred_leaf=True)
    if type(model).__module__.startswith("catboost"):
        return lambda X: model.calc_leaf_indexes(X)
    return getattr(model, "apply", None)  # HistGradientBoosting: none


def cases(name: str) -> list[tuple[int, str, float]]:
    recipe = RECIPES[name]
    found = [(1, label, value) for label, value in NUMERIC.items()]  # column 1 is numeric
    if recipe.categorical and not recipe.frame:  # column 0 holds category codes
        found += [(0, f"category {label}", value) for label, value in CATEGORY.items()]
    if recipe.text:  # column 0 holds an encoder's text labels
        found += [(0, f"label {label!r}", value) for label, value in LABELS.items()]
    return found


def rows_with(name: str, column: int, value: float) -> Any:
    X, _ = RECIPES[name].data(seed=3)
    if isinstance(X, pd.DataFrame):
        X = X.iloc[:6].copy()
        X.iloc[:3, column] = value
        return X
    X = np.nan_to_num(np.array(X[:6], dtype=np.float64), nan=0.5)
    X[:3, column] = value
    return X


def decision(
    call: Callable[[Any], Any] | None, X: Any, *, leaves: bool = False
) -> np.ndarray | str | None:
    """What the call returned (leaves: one column per tree), or the first line of its
    refusal."""
    if call is None:
        return None
    try:
        out = np.asarray(call(X), dtype=np.float64)
        return out.reshape(len(out), -1) if leaves else out
    except (ValueError, ScoringError) as exc:  # XGBoostError is a ValueError
        return str(exc).strip().splitlines()[0]


def assert_same_decision(ours: Any, native: Any, what: str, *, reason: bool = True) -> None:
    if isinstance(native, str):
        assert isinstance(ours, str), f"{what}: native refuses ({native}), we scored"
        # native's own words, less XGBoost's log prefix (and the values an encoder
        # quotes: ours lists them apart), are in our one line
        words = re.sub(r"^(Found unknown categories) \[.*?\]", r"\1", native)
        assert not reason or words.split("Check failed: valid: ")[-1][-40:] in ours, (ours, native)
    else:
        assert not isinstance(ours, str), f"{what}: native scores, we refuse: {ours}"
        if native is not None:
            assert ours.shape == native.shape, what
            assert max_error(ours, native) <= TOLERANCE, what


def two_reasons(native_call: Call, X: Any, label: str) -> bool:
    """Whether native refuses a value past float32's range for another reason than inf:
    a wrapper (an imputer, a chain) checks float64 and passes it, and the model behind it
    refuses it.  Ours is one check, on a float32 matrix where it is inf: the decision is
    native's, the reason the wrapper's."""
    if label not in ("1e39", "-1e39"):
        return False
    as_inf = X.copy()
    numbers = as_inf.select_dtypes("number") if isinstance(X, pd.DataFrame) else as_inf
    numbers[np.abs(np.asarray(numbers, dtype=np.float64)) > 3.5e38] = np.inf
    if isinstance(X, pd.DataFrame):
        as_inf[numbers.columns] = numbers
    refused, refused_as_inf = decision(native_call, X), decision(native_call, as_inf)
    return (
        isinstance(refused, str) and isinstance(refused_as_inf, str) and (refused != refused_as_inf)
    )


@pytest.mark.parametrize("backend", ["tensor", "native"])
def test_the_product_accepts_and_refuses_what_native_does(recipe_name: str, backend: str) -> None:
    model, forest, _ = built(recipe_name)
    cm = scoring.compile(model, backend=backend, device="cpu")
    native_call, our_call = scores(model, forest, cm)
    for column, label, value in cases(recipe_name):
        X = rows_with(recipe_name, column, value)
        what = f"{recipe_name} {backend}: {label} in column {column}"
        ours, native = decision(our_call, X), decision(native_call, X)
        assert_same_decision(ours, native, what, reason=not two_reasons(native_call, X, label))
        native_leaf = decision(native_leaves(model), X, leaves=True)
        if native_leaf is not None:
            ours = decision(cm.predict_leaf, X, leaves=True)
            assert_same_decision(ours, native_leaf, f"{what}, leaves")


def test_the_decisions_differ_between_frameworks() -> None:
    """The sweep above is not vacuous: each kind of decision occurs on these recipes."""
    forests = {name: built(name)[1] for name in ("sk_rf_clf", "sk_hgb_clf", "xgb_clf", "lgb_clf")}
    assert not forests["sk_rf_clf"].accepts_inf(1)  # float32 readers refuse inf
    assert forests["sk_hgb_clf"].accepts_inf(1)  # HGB scores inf in numeric columns...
    assert not forests["sk_hgb_clf"].accepts_inf(0)  # ...not in categorical ones
    assert forests["xgb_clf"].accepts_inf(1) and "leaf_inf" in forests["xgb_clf"].refuses
    gradient_boosting = built("sk_gb_clf")[1].refuses  # apply takes the NaN predict refuses
    assert "nan" in gradient_boosting and "leaf_nan" not in gradient_boosting
    assert forests["lgb_clf"].refuses == {}

"""What native returns, exactly: classifiers fitted on one class, and XGBoost's base
margin as XGBoost computes it (the parity suite holds every recipe to native; these are
the edges it found)."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pytest
import torch
import xgboost as xgb
from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier
from torch.overrides import TorchFunctionMode

import scoring
from scoring._parity import probe_rows
from scoring._scorer import Scorer

from .conftest import RECIPES, as_model_input, built

ROWS = np.random.default_rng(5).normal(size=(50, 3))


@pytest.mark.parametrize("backend", ["tensor", "native"])
@pytest.mark.parametrize("kind", [DecisionTreeClassifier, RandomForestClassifier,
                                  ExtraTreesClassifier])  # fmt: skip
def test_a_forest_fitted_on_one_class_predicts_it_as_native_does(kind: type, backend: str) -> None:
    params = {} if kind is DecisionTreeClassifier else {"n_estimators": 3}
    model = kind(random_state=0, **params).fit(ROWS, np.array(["only"] * len(ROWS)))
    cm = scoring.compile(model, backend=backend, device="cpu")
    np.testing.assert_array_equal(cm.predict_proba(ROWS), model.predict_proba(ROWS))  # [n, 1]
    np.testing.assert_array_equal(cm.predict(ROWS), model.predict(ROWS))
    table = pa.table({f"f{i}": ROWS[:, i] for i in range(3)})
    scored = Scorer(cm).score(table)
    assert scored.schema.names == ["probability_only", "label"]
    assert scored.column("probability_only").to_pylist() == [1.0] * len(ROWS)
    assert set(scored.column("label").to_pylist()) == {"only"}


def test_an_xgboost_classifier_fitted_on_one_class_keeps_xgboosts_margin() -> None:
    model = xgb.XGBClassifier(n_estimators=3).fit(ROWS, np.zeros(len(ROWS), dtype=int))
    cm = scoring.compile(model, backend="tensor", device="cpu")
    margin = model.get_booster().predict(xgb.DMatrix(ROWS), output_margin=True)
    np.testing.assert_array_equal(cm.predict_raw(ROWS), margin)  # -13.81551, not -inf
    np.testing.assert_array_equal(cm.predict_proba(ROWS), model.predict_proba(ROWS))
    np.testing.assert_array_equal(cm.predict(ROWS), model.predict(ROWS))


def test_a_logistic_base_score_becomes_the_margin_xgboost_computes() -> None:
    """XGBoost's logit is float32 arithmetic with the C library's logf: a base score
    of 0.5037953 is a margin of 0.01518164 there, one bit from the float64 logit."""
    X, y = ROWS, (ROWS[:, 0] > 0).astype(float)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 2}, xgb.DMatrix(X, y), 1)
    saved = json.loads(booster.save_raw("json"))
    scores = np.random.default_rng(6).uniform(0.0, 1.0, 60).astype(np.float32)
    for p in [*scores, 0.5037953, 0.0, 1e-7, 1.0]:
        saved["learner"]["learner_model_param"]["base_score"] = f"[{float(np.float32(p))!r}]"
        edited = xgb.Booster()
        edited.load_model(bytearray(json.dumps(saved).encode()))
        cm = scoring.compile(edited, backend="tensor", device="cpu")
        native = edited.predict(xgb.DMatrix(X), output_margin=True)
        np.testing.assert_array_equal(cm.predict_raw(X), native, err_msg=f"base_score {p!r}")


@pytest.mark.parametrize("strategy", ["gemm", "tree_traversal", "perfect_tree_traversal"])
def test_a_large_base_score_sums_as_xgboost_adds_in_float32(strategy: str) -> None:
    """Adding 200 small leaves to 499 in float32 rounds at every step: summed in another
    order (or with the base added last) the result moved by up to 1.8e-4."""
    y = 499.0 + 3.0 * ROWS[:, 0] + np.random.default_rng(7).normal(size=len(ROWS))
    model = xgb.XGBRegressor(n_estimators=200, max_depth=3, learning_rate=0.05).fit(ROWS, y)
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy=strategy)
    np.testing.assert_array_equal(cm.predict(ROWS), model.predict(ROWS))


class _HostDivisors(TorchFunctionMode):
    """Records each tensor divided by a Python number, or a number divided by a tensor.
    PyTorch on CUDA multiplies by the divisor's reciprocal then (one bit off on about a
    quarter of rows: an H200 found it on a random forest's margins), and ``n / t`` is
    ``reciprocal(t) * n`` on every device; numpy, and so native, divides."""

    DIVISIONS: ClassVar[set[Any]] = {torch.div, torch.divide, torch.true_divide, torch.Tensor.div,
                 torch.Tensor.div_, torch.Tensor.__truediv__, torch.Tensor.__itruediv__,
                 torch.Tensor.__rtruediv__}  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in self.DIVISIONS and any(isinstance(a, int | float) for a in args):
            self.found.append(f"{getattr(func, '__name__', func)}{tuple(map(type, args))}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", list(RECIPES))
def test_no_margin_or_output_divides_by_a_host_number(name: str) -> None:
    """Every recipe's margins and outputs through the tensor backend, as a CUDA device
    computes them: each division by a tensor, none by a number."""
    model, forest, _ = built(name)
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    X = probe_rows(forest, n_rows=64, special=False)
    X = as_model_input(RECIPES[name], X, forest)
    with _HostDivisors() as seen:
        cm.predict_raw(X)
        if forest.task in ("binary", "multiclass", "multilabel", "multioutput"):
            cm.predict_proba(X)
    assert seen.found == []

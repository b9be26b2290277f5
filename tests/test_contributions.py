"""Contributions (path-dependent TreeSHAP) against the frameworks' own.

The references: XGBoost's ``pred_contribs`` and LightGBM's ``pred_contrib`` (our native
backend), and ``shap.TreeExplainer(feature_perturbation="tree_path_dependent")`` for the
scikit-learn models it reads correctly.  Rows come from the parity suite's Hypothesis
strategy: thresholds and their neighbours, NaN, +-inf where native scores them, unseen
and negative categories.  Every row of every explainable recipe sums to its margin.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from typer.testing import CliRunner

import scoring
from scoring._parity import leaf_rows
from scoring.cli import app
from scoring.errors import ConfigError, UnsupportedModelError

from .conftest import RECIPES, as_model_input, built
from .test_parity import DEVICE, PARITY, rows_strategy

#: Within XGBoost's float32 arithmetic (LightGBM and shap agree to ~1e-15).
TOL = 1e-5
#: Recipes with no contributions, and the words of their refusal.
REFUSED = {
    "sk_iforest": "no margin",
    "sk_chain_reg": "chain",
    "sk_chain_clf": "chain",
}
#: scikit-learn recipes whose model shap explains itself (the others are wrappers shap does
#: not read, several-target trees it shapes differently, or a multiclass
#: GradientBoostingClassifier it refuses).  Categorical HistGradientBoosting is not among
#: them: shap reads its categorical splits as numeric thresholds (0.83 apart here), while
#: ours follow the bitsets, and sum to the margin.
SHAP_CHECKED = {
    "sk_dt_clf", "sk_dt_reg", "sk_rf_clf", "sk_rf_reg", "sk_et_clf", "sk_et_reg",
    "sk_rf_one", "sk_rf_multi_reg", "sk_grid_rf", "sk_gb_clf", "sk_gb_reg",
    "sk_hgb_multi", "sk_hgb_poisson",
}  # fmt: skip


@cache
def explained(name: str, backend: str) -> Any:
    model, _, _ = built(name)
    return scoring.compile(model, backend=backend, device=DEVICE)


def per_output(values: np.ndarray) -> np.ndarray:
    """``[rows, outputs, features + 1]`` whatever the model's output count."""
    return values if values.ndim == 3 else values[:, None, :]


def reference(name: str, X: Any) -> np.ndarray | None:
    """The framework's own contributions of ``X``, or shap's; None where neither."""
    recipe = RECIPES[name]
    model = built(name)[0]
    if recipe.framework in ("xgboost", "lightgbm") and name != "xgb_vector_leaves":
        return per_output(explained(name, "native").predict_contributions(X))
    if name not in SHAP_CHECKED:
        return None
    shap = pytest.importorskip("shap")
    estimator = getattr(model, "best_estimator_", model)
    explainer = shap.TreeExplainer(estimator, feature_perturbation="tree_path_dependent")
    phi = np.asarray(explainer.shap_values(X, check_additivity=False))
    phi = phi.transpose(0, 2, 1) if phi.ndim == 3 else phi[:, None, :]
    bias = np.broadcast_to(np.atleast_1d(explainer.expected_value), phi.shape[:2])
    return np.concatenate([phi, bias[:, :, None]], axis=2)


def test_contributions_match_the_frameworks(recipe_name: str) -> None:
    recipe = RECIPES[recipe_name]
    _, forest, _ = built(recipe_name)
    if recipe.framework == "catboost" or recipe_name in REFUSED:
        with pytest.raises(UnsupportedModelError, match=REFUSED.get(recipe_name, "covers")):
            explained(recipe_name, "tensor").predict_contributions(recipe.data()[0])
        return
    cm = explained(recipe_name, "tensor")

    @PARITY
    @given(rows=rows_strategy(forest))
    def check(rows: np.ndarray) -> None:
        X = as_model_input(recipe, rows, forest)
        ours = per_output(cm.predict_contributions(X))
        assert ours.shape == (len(rows), forest.n_outputs, forest.n_features + 1)
        margin = cm.predict_raw(X).reshape(len(rows), -1)
        np.testing.assert_allclose(ours.sum(axis=2), margin, rtol=TOL, atol=TOL)
        some = leaf_rows(X, forest)  # XGBoost's DMatrix refuses inf: compare the others
        ref = reference(recipe_name, some) if len(some) else None
        if ref is not None:
            at = np.isin(np.arange(len(rows)), np.flatnonzero(_kept(X, some)))
            np.testing.assert_allclose(ours[at], ref, rtol=TOL, atol=TOL)

    check()


def _kept(X: Any, some: Any) -> np.ndarray:
    """Which rows of ``X`` :func:`leaf_rows` kept."""
    if some is X:
        return np.ones(len(X), dtype=bool)
    if hasattr(X, "index"):
        return np.asarray(X.index.isin(some.index))
    values = np.asarray(X, dtype=np.float64)
    return ~(np.abs(values) > np.finfo(np.float32).max).any(axis=1)


def test_tensor_and_native_lay_out_classes_alike() -> None:
    """Tensor and native give the same layout: per class, the bias last."""
    forest = built("lgb_multi")[1]
    X, _ = RECIPES["lgb_multi"].data(seed=5)
    tensor = explained("lgb_multi", "tensor").predict_contributions(X)
    native = explained("lgb_multi", "native").predict_contributions(X)
    assert tensor.shape == native.shape == (len(X), 3, forest.n_features + 1)
    np.testing.assert_allclose(tensor, native, rtol=1e-9, atol=1e-9)


def test_native_refuses_what_the_framework_cannot_explain() -> None:
    with pytest.raises(UnsupportedModelError, match="multi-output trees"):
        explained("xgb_vector_leaves", "native").predict_contributions(
            RECIPES["xgb_vector_leaves"].data()[0]
        )
    with pytest.raises(UnsupportedModelError, match="backend='tensor'"):
        explained("sk_rf_reg", "native").predict_contributions(RECIPES["sk_rf_reg"].data()[0])


def test_a_feature_split_twice_on_a_path_is_one_player() -> None:
    """A tree splitting on x0 twice down a path: exact Shapley values by enumeration."""
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3))
    y = np.sin(3 * X[:, 0]) + (X[:, 1] > 0)
    model = DecisionTreeRegressor(max_depth=5, random_state=0).fit(X, y)
    cm = scoring.compile(model, backend="tensor", device=DEVICE)
    rows = X[:20]
    np.testing.assert_allclose(cm.predict_contributions(rows), _enumerated(model, rows), atol=1e-12)


def _enumerated(model: Any, rows: np.ndarray) -> np.ndarray:
    """Shapley values of the path-dependent value function, over every coalition."""
    from itertools import combinations
    from math import factorial

    tree = model.tree_
    n = rows.shape[1]

    def value(x: np.ndarray, known: set[int], node: int = 0) -> float:
        if tree.children_left[node] < 0:
            return float(tree.value[node][0][0])
        left, right = tree.children_left[node], tree.children_right[node]
        if tree.feature[node] in known:
            return value(x, known, left if x[tree.feature[node]] <= tree.threshold[node] else right)
        share = tree.weighted_n_node_samples
        return (
            share[left] * value(x, known, left) + share[right] * value(x, known, right)
        ) / share[node]

    out = np.zeros((len(rows), n + 1))
    for r, x in enumerate(rows):
        for i in range(n):
            others = [j for j in range(n) if j != i]
            for size in range(n):
                for subset in combinations(others, size):
                    w = factorial(size) * factorial(n - size - 1) / factorial(n)
                    out[r, i] += w * (value(x, {*subset, i}) - value(x, set(subset)))
        out[r, n] = value(x, set())
    return out


def test_a_job_writes_scores_and_reasons_in_one_pass(tmp_path: Path) -> None:
    """A job file with ``reasons = 3``: each row's three largest contributions, named,
    beside its score; a rerun does nothing; other outputs into it are refused."""
    import xgboost as xgb

    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
    model = xgb.XGBClassifier(n_estimators=30, max_depth=4).fit(frame, np.nan_to_num(X[:, 0]) > 0)
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("credit", model)
    (tmp_path / "in").mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(X)), 3)):
        table = pa.table({"id": part, **{c: frame[c].to_numpy()[part] for c in frame}})
        pq.write_table(table, tmp_path / "in" / f"part-{i}.parquet")
    job = tmp_path / "job.toml"
    job.write_text(
        f'name = "reasons"\nmodel = "credit@1"\nregistry = "{tmp_path / "reg"}"\n'
        f'input = "in"\noutput = "out"\nkeep = ["id"]\nbackend = "tensor"\n'
        'outputs = ["default", "contributions"]\nreasons = 3\n'
    )
    first = CliRunner().invoke(app, ["run", str(job)])
    assert first.exit_code == 0, first.output
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    expected = scoring.compile(model, backend="native").predict_contributions(frame)
    contrib = out[[f"contrib_{c}" for c in [*frame.columns, "bias"]]]
    np.testing.assert_allclose(contrib.to_numpy(), expected, rtol=TOL, atol=TOL)
    order = np.argsort(-np.abs(expected[:, :-1]), axis=1, kind="stable")[:, :3]
    names = np.asarray(frame.columns)[order]
    np.testing.assert_array_equal(out[["reason_1", "reason_2", "reason_3"]].to_numpy(), names)
    np.testing.assert_allclose(
        out["reason_1_value"], expected[np.arange(len(X)), order[:, 0]], rtol=TOL, atol=TOL
    )
    again = CliRunner().invoke(app, ["run", str(job)])
    assert again.exit_code == 0 and "nothing to do" in again.output
    job.write_text(job.read_text().replace("reasons = 3", "reasons = 2"))
    other = CliRunner().invoke(app, ["run", str(job)])
    assert other.exit_code != 0 and "another" in other.output


def test_bad_outputs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    model, _, _ = built("xgb_clf")
    X, _ = RECIPES["xgb_clf"].data()
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), tmp_path / "in/a.parquet"
    )
    with pytest.raises(ConfigError, match="'contribution' is not an output"):
        scoring.score_parquet(
            tmp_path / "in", tmp_path / "out", model, outputs="default+contribution"
        )
    with pytest.raises(ConfigError, match=r"reasons=9: .* reads 6 features"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, outputs=["reasons=9"])
    assert not (tmp_path / "out").exists()


def test_a_native_run_of_a_framework_without_treeshap_still_explains(tmp_path: Path) -> None:
    """backend='native' (or auto picking it) for a scikit-learn forest: the run's
    contributions come from the trees, equal to the tensor backend's."""
    model, forest, _ = built("sk_rf_reg")
    X, _ = RECIPES["sk_rf_reg"].data(seed=4)
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), tmp_path / "in/a.parquet"
    )
    scoring.score_parquet(
        tmp_path / "in", tmp_path / "out", model, backend="native", outputs="default+contributions"
    )
    out = pq.read_table(tmp_path / "out").to_pandas()
    names = [f"contrib_f{j}" for j in range(forest.n_features)] + ["contrib_bias"]
    expected = explained("sk_rf_reg", "tensor").predict_contributions(X)
    np.testing.assert_allclose(out[names].to_numpy(), expected, rtol=1e-12, atol=1e-12)


def test_models_in_one_pass_each_write_their_own_explanations(tmp_path: Path) -> None:
    """Two models combined into one forest and one scored alone: each one's contribution
    and reason columns, under its prefix, are that model's alone."""
    names = ["xgb_reg", "xgb_clf", "sk_rf_reg"]
    X, _ = RECIPES["xgb_reg"].data(seed=6)
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), tmp_path / "in/a.parquet"
    )
    models = [{"model": built(n)[0], "prefix": n} for n in names]
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", models, backend="tensor",
                          outputs=["default", "contributions", "reasons=2"])  # fmt: skip
    out = pq.read_table(tmp_path / "out").to_pandas()
    for n in names:
        expected = per_output(explained(n, "tensor").predict_contributions(X))[:, 0, :]
        cols = [f"{n}__contrib_f{j}" for j in range(X.shape[1])] + [f"{n}__contrib_bias"]
        np.testing.assert_allclose(out[cols].to_numpy(), expected, rtol=TOL, atol=TOL)
        top = np.argmax(np.abs(expected[:, :-1]), axis=1)
        np.testing.assert_array_equal(out[f"{n}__reason_1"], [f"f{j}" for j in top])


def test_the_cli_writes_signed_reasons(tmp_path: Path) -> None:
    model, forest, _ = built("lgb_reg")
    X, _ = RECIPES["lgb_reg"].data(seed=8)
    (tmp_path / "in").mkdir()
    names = forest.feature_names or [f"f{j}" for j in range(X.shape[1])]
    pq.write_table(pa.table({n: X[:, j] for j, n in enumerate(names)}), tmp_path / "in/a.parquet")
    model.booster_.save_model(tmp_path / "model.txt")
    args = ["score", "--model", str(tmp_path / "model.txt"), "--input", str(tmp_path / "in"),
            "--output", str(tmp_path / "out"), "--reasons", "2",
            "--reasons-by", "signed"]  # fmt: skip
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    out = pq.read_table(tmp_path / "out").to_pandas()
    phi = explained("lgb_reg", "tensor").predict_contributions(X)[:, :-1]
    top = np.argsort(-phi, axis=1, kind="stable")[:, :2]  # signed: largest increases first
    np.testing.assert_array_equal(out["reason_2"], np.asarray(names)[top[:, 1]])
    np.testing.assert_allclose(out["reason_1_value"], phi[np.arange(len(X)), top[:, 0]], atol=1e-9)

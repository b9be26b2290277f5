"""Model loading, backend and strategy selection, and what compile refuses."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from sklearn.linear_model import LinearRegression

import scoring
from scoring.errors import (
    CompileError,
    ModelFileError,
    ParityError,
    ResourceLimitError,
    UnsupportedModelError,
    UntrustedModelError,
)

from .conftest import RECIPES, built


def _rows(name: str) -> np.ndarray:
    X, _ = RECIPES[name].data(seed=7)
    return np.asarray(X)


@pytest.mark.parametrize("suffix", [".json", ".ubj"])
def test_xgboost_model_files(tmp_path: Path, suffix: str) -> None:
    model, _, native = built("xgb_multi")
    path = tmp_path / f"model{suffix}"
    model.save_model(path)
    cm = scoring.compile(str(path), backend="tensor", device="cpu")
    assert cm.model_kind == "xgboost.Booster"
    np.testing.assert_allclose(
        cm.predict(_rows("xgb_multi")), native.predict_proba(_rows("xgb_multi")), atol=1e-6
    )


def _save_lightgbm(model: object, path: Path) -> None:
    model.booster_.save_model(path)  # type: ignore[attr-defined]


def _save_skops(model: object, path: Path) -> None:
    import skops.io as sio

    sio.dump(model, path)


@pytest.mark.parametrize(
    ("name", "suffix", "save", "method"),
    [
        ("lgb_multi", ".txt", _save_lightgbm, "predict"),  # a Booster: predict = probabilities
        ("sk_hgb_clf", ".skops", _save_skops, "predict_proba"),
    ],
)
def test_lightgbm_and_skops_files(
    tmp_path: Path, name: str, suffix: str, save: object, method: str
) -> None:
    model, _, native = built(name)
    path = tmp_path / f"model{suffix}"
    save(model, path)  # type: ignore[operator]
    cm = scoring.compile(path, backend="tensor", device="cpu")
    X = _rows(name)
    np.testing.assert_allclose(getattr(cm, method)(X), native.predict_proba(X), atol=1e-9)


@pytest.mark.parametrize("keep", [0.01, 0.3, 0.97, -400])
def test_a_truncated_lightgbm_file_is_refused_not_a_crash(tmp_path: Path, keep: float) -> None:
    """LightGBM's parser kills the process on most of these (or refuses with a reason);
    the check before it names the file instead (run in a child so that a regression
    cannot take pytest down)."""
    model, _, _ = built("lgb_cat")
    text = model.booster_.model_to_string().encode()
    path = tmp_path / "model.txt"
    path.write_bytes(text[: int(len(text) * keep)] if keep > 0 else text[: int(keep)])
    script = "import sys, scoring; scoring.compile(sys.argv[1], backend='tensor')"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-2000:]  # an exception, not a signal
    assert "ModelFileError" in done.stderr and str(path) in done.stderr  # ours or LightGBM's reason
    path.write_bytes(text)
    assert scoring.compile(path, backend="tensor", device="cpu").forest.n_trees > 0


def test_pickle_refused_unless_trusted(tmp_path: Path) -> None:
    model, _, native = built("sk_rf_clf")
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(model))
    with pytest.raises(UntrustedModelError, match="pickle"):
        scoring.compile(path)
    cm = scoring.compile(path, backend="tensor", device="cpu", trusted=True)
    np.testing.assert_allclose(
        cm.predict_proba(_rows("sk_rf_clf")), native.predict_proba(_rows("sk_rf_clf"))
    )


def test_unknown_file_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="does not exist"):
        scoring.compile(tmp_path / "nope.json")
    (tmp_path / "m.pmml").write_bytes(b"x")
    with pytest.raises(ModelFileError, match="unknown suffix"):
        scoring.compile(tmp_path / "m.pmml")


def test_unsupported_models_are_named() -> None:
    X, y = np.random.default_rng(0).normal(size=(50, 3)), np.arange(50.0)
    with pytest.raises(UnsupportedModelError, match="LinearRegression"):
        scoring.compile(LinearRegression().fit(X, y))
    linear = lgb.LGBMRegressor(n_estimators=3, linear_tree=True, verbose=-1).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="linear trees"):
        scoring.compile(linear)
    gblinear = xgb.XGBRegressor(n_estimators=3, booster="gblinear").fit(X, y)
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        scoring.compile(gblinear)


def test_early_stopping_uses_best_iteration() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] + rng.normal(size=400) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=200, early_stopping_rounds=3, learning_rate=0.5)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], verbose=False)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    assert cm.forest.n_trees == model.best_iteration + 1
    np.testing.assert_allclose(cm.predict_proba(X), model.predict_proba(X), atol=1e-6)


def test_perfect_traversal_refuses_past_memory_limit_and_auto_falls_back() -> None:
    import torch
    from sklearn.tree import DecisionTreeRegressor

    from scoring._frameworks import import_model

    rng = np.random.default_rng(0)  # deep and sparse: the perfect layout is the largest
    X = rng.normal(size=(2000, 4))
    model = DecisionTreeRegressor(max_depth=12, max_leaf_nodes=40).fit(X, rng.normal(size=2000))
    forest = import_model(model)

    from scoring._compiler import LAYOUT_BYTES, choose_strategy, compile_forest

    limit = LAYOUT_BYTES["perfect_tree_traversal"](forest) - 1
    with pytest.raises(ResourceLimitError, match="MiB"):
        compile_forest(
            forest,
            device=torch.device("cpu"),
            strategy="perfect_tree_traversal",
            max_layout_bytes=limit,
        )
    # On CPU the shared kernel, keeping the traversal layout (the perfect one is past
    # the limit); where it is not the pick, an eager layout within the limit.
    _, choice = compile_forest(forest, device=torch.device("cpu"), max_layout_bytes=limit)
    assert choice.name == "fused"
    assert LAYOUT_BYTES["tree_traversal"](forest) <= limit
    choice = choose_strategy(forest, device=torch.device("cuda"), max_layout_bytes=limit)
    assert choice.name in ("gemm", "tree_traversal")
    assert LAYOUT_BYTES[choice.name](forest) <= limit


def test_auto_strategy_is_recorded() -> None:
    cm = scoring.compile(built("sk_dt_clf")[0], backend="tensor", device="cpu")
    assert cm.strategy == "fused"
    assert "the kernel every forest shares" in cm.strategy_reason


def test_auto_backend_on_cpu_measures_both() -> None:
    cm = scoring.compile(built("xgb_clf")[0], device="cpu")
    tensor = scoring.compile(built("xgb_clf")[0], backend="tensor", device="cpu")
    assert {f"tensor:{tensor.strategy}", "native", "auto.rounds"} <= set(cm.selection)
    timed = {k: cm.selection[k] for k in (f"tensor:{tensor.strategy}", "native")}
    fastest = min(timed, key=timed.__getitem__)
    assert fastest == (cm.backend if cm.strategy is None else f"tensor:{cm.strategy}")


def test_hummingbird_divergence_reported_and_overridable() -> None:
    model, _forest, native = built("xgb_clf")
    with pytest.raises(ParityError, match=r"differs from native XGBClassifier by up to"):
        scoring.compile(model, backend="hummingbird", device="cpu")
    cm = scoring.compile(model, backend="hummingbird", device="cpu", verify=False)
    X = _rows("xgb_clf")
    X[:, 1] = np.nan  # hummingbird sends NaN right whatever the model says
    assert np.abs(cm.predict_proba(X) - native.predict_proba(X)).max() > 1e-3


def test_bad_backend_device_strategy() -> None:
    model = built("xgb_clf")[0]
    with pytest.raises(CompileError, match="unknown backend"):
        scoring.compile(model, backend="onnx")
    with pytest.raises(CompileError, match="unknown strategy"):
        scoring.compile(model, backend="tensor", strategy="magic")
    with pytest.raises(CompileError, match="device"):
        scoring.compile(model, backend="tensor", device="tpu")


def test_predict_proba_refused_for_regressors() -> None:
    with pytest.raises(UnsupportedModelError, match="predict_proba is for classifiers"):
        scoring.compile(built("xgb_reg")[0], backend="tensor", device="cpu").predict_proba(
            np.zeros((1, 6))
        )


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("strategy", ["gemm", "tree_traversal", "perfect_tree_traversal"])
def test_cuda_matches_native(strategy: str) -> None:
    for name in ("xgb_clf", "lgb_cat", "sk_hgb_clf", "sk_rf_clf"):
        model, _forest, native = built(name)
        X = _rows(name)
        cm = scoring.compile(model, backend="tensor", device="cuda", strategy=strategy)
        np.testing.assert_allclose(cm.predict_proba(X), native.predict_proba(X), atol=1e-5)


def test_skops_files_load_only_the_listed_types(tmp_path: Path) -> None:
    import skops.io as sio

    model = copy.deepcopy(built("sk_rf_clf")[0])
    model.hook = len  # a builtin: trusted by no whole-module rule, so refused
    path = tmp_path / "model.skops"
    sio.dump(model, path)
    with pytest.raises(UntrustedModelError, match=r"builtins\.len"):
        scoring.compile(path)
    X = np.zeros((3, model.n_features_in_))
    assert scoring.compile(path, trusted=True, backend="native").predict(X).shape == (3,)
    plain = tmp_path / "plain.skops"
    sio.dump(copy.deepcopy(built("sk_rf_clf")[0]), plain)
    assert scoring.compile(plain, backend="native").predict(X).shape == (3,)


def test_a_forced_strategy_past_its_memory_is_refused_before_it_allocates() -> None:
    """A tree of 50,000 leaves: gemm's path matrix would take about 10 GB.  It is
    refused by name with the fix; ``auto`` scores the same model."""
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100_000, 4))
    model = DecisionTreeRegressor(max_leaf_nodes=50_000, random_state=0).fit(
        X, rng.normal(size=len(X))
    )
    assert model.get_n_leaves() == 50_000
    with pytest.raises(ResourceLimitError, match=r"'gemm' needs [\d,.]+ MiB.*strategy='auto'"):
        scoring.compile(model, backend="tensor", device="cpu", strategy="gemm")
    cm = scoring.compile(model, backend="tensor", device="cpu")
    assert cm.strategy == "fused"  # the shared kernel, its eager walk the traversal layout
    np.testing.assert_allclose(cm.predict(X[:500]), model.predict(X[:500]), rtol=1e-12)


@pytest.mark.parametrize("name", ["sk_dt_reg", "xgb_multi", "lgb_cat", "sk_rf_multi_reg"])
def test_each_layout_estimate_bounds_what_it_builds(name: str) -> None:
    """The estimate a strategy is refused by is at least the tables it then builds."""
    import torch

    from scoring._compiler import LAYOUT_BYTES, compile_forest

    _, forest, _ = built(name)
    for strategy, estimate in LAYOUT_BYTES.items():
        module, _ = compile_forest(forest, device=torch.device("cpu"), strategy=strategy)
        tables = sum(b.numel() * b.element_size() for b in module.buffers())
        tables += sum(p.numel() * p.element_size() for p in module.parameters())
        assert 0 < tables <= estimate(forest) * 1.1 + 4096, (strategy, tables, estimate(forest))

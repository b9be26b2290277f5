"""ONNX-ML tree ensembles in: exported by skl2onnx and onnxmltools, compiled to the same
kernels, held to ONNX Runtime on one thread (which adds the trees in float32 in tree
order) on rows at every threshold and its float32 neighbours, NaN, +-inf and zero rows;
what cannot be matched exactly is refused by name."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scoring
from scoring.errors import UnsupportedModelError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
skl2onnx = pytest.importorskip("skl2onnx")
onnxmltools = pytest.importorskip("onnxmltools")

FEATURES = 5
STRATEGIES = ("fused", "gemm", "tree_traversal", "compiled")


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(600, FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan  # the boosters learn where missing goes
    filled = np.nan_to_num(X)
    binary = (filled[:, 0] + filled[:, 1] > 0).astype(np.int64)
    three = (filled[:, 0] > 0).astype(np.int64) + (filled[:, 2] > 0.5)
    return X, binary, three


def _exported(name: str) -> Any:
    """The ONNX ModelProto of recipe ``name``: a scikit-learn forest through skl2onnx,
    or a LightGBM or XGBoost model through onnxmltools."""
    from onnxmltools.convert.common.data_types import FloatTensorType

    X, binary, three = _data()
    filled = np.nan_to_num(X)
    kind, task = name.rsplit("_", 1)
    y = {"binary": binary, "multi": three, "reg": filled[:, 0] * 2 + filled[:, 1]}[task]
    typed = [("X", FloatTensorType([None, FEATURES]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind in ("rf", "gb", "et"):
            from sklearn import ensemble

            cls = {"rf": "RandomForest", "gb": "GradientBoosting", "et": "ExtraTrees"}[kind]
            suffix = "Regressor" if task == "reg" else "Classifier"
            # Extra trees fully grown: each votes 0 or 1/16, so half votes tie.
            extra = {"gb": {}, "rf": {"max_depth": 7, "random_state": 0}}.get(
                kind, {"random_state": 0}
            )
            model = getattr(ensemble, cls + suffix)(n_estimators=16, **extra).fit(filled, y)
            return skl2onnx.to_onnx(model, filled[:1])
        if kind == "lgb":
            import lightgbm as lgb

            cls = lgb.LGBMRegressor if task == "reg" else lgb.LGBMClassifier
            fitted = cls(n_estimators=16, num_leaves=15, verbose=-1).fit(X, y)
            return onnxmltools.convert_lightgbm(fitted, initial_types=typed)
        import xgboost as xgb

        cls = xgb.XGBRegressor if task == "reg" else xgb.XGBClassifier
        fitted = cls(n_estimators=16, max_depth=4).fit(X, y)
        return onnxmltools.convert_xgboost(fitted, initial_types=typed)


RECIPES = [f"{k}_{t}" for k in ("rf", "gb", "et", "lgb", "xgb") for t in ("binary", "multi")]
RECIPES += ["rf_reg", "gb_reg", "lgb_reg", "xgb_reg"]


def _session(model: Any) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])  # fmt: skip


def _runtime(model: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """ONNX Runtime's values (probabilities, or predictions) and labels."""
    session = _session(model)
    out = session.run(None, {session.get_inputs()[0].name: rows})
    if len(out) == 1:
        return np.asarray(out[0]).reshape(len(rows), -1), None
    probabilities = out[1]
    if isinstance(probabilities, list):  # ZipMap: one {label: probability} per row
        labels = sorted(probabilities[0]) if probabilities else []
        probabilities = [[row[c] for c in labels] for row in probabilities]
    return np.asarray(probabilities, dtype=np.float32).reshape(len(rows), -1), out[0]


def _ensemble(model: Any) -> Any:
    return next(n for n in model.graph.node if n.op_type.startswith("TreeEnsemble"))


def _hard_rows(model: Any) -> np.ndarray:
    """Rows at every threshold of the ensemble and at its float32 neighbours, one
    feature at a time, beside NaN, +-inf, zeros and the training rows."""
    node = _ensemble(model)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    base = np.nan_to_num(_data(1)[0][:64])
    rows = [_data(1)[0][:200]]
    for feature, value in zip(attrs["nodes_featureids"], attrs["nodes_values"], strict=True):
        v = np.float32(value)
        for x in (np.nextafter(v, -np.inf), v, np.nextafter(v, np.inf)):
            row = base[len(rows) % len(base)].copy()
            row[feature] = x
            rows.append(row[None])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
    for j in range(FEATURES):
        for x in special:
            row = base[j].copy()
            row[j] = x
            rows.append(row[None])
    rows.append(np.full((1, FEATURES), np.nan, dtype=np.float32))
    return np.vstack(rows).astype(np.float32)


@pytest.fixture(scope="module")
def exported() -> dict[str, Any]:
    return {name: _exported(name) for name in RECIPES}


@pytest.mark.parametrize("name", RECIPES)
def test_every_strategy_matches_onnx_runtime(exported: dict[str, Any], name: str) -> None:
    model = exported[name]
    rows = _hard_rows(model)
    want, labels = _runtime(model, rows)
    for strategy in STRATEGIES:
        compiled = scoring.compile(model, backend="tensor", strategy=strategy, device="cpu")
        if labels is None:
            got = np.asarray(compiled.predict(rows), dtype=np.float64).reshape(len(rows), -1)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=strategy)
            continue
        np.testing.assert_allclose(compiled.predict_proba(rows), want, rtol=0, atol=1e-6,
                                   err_msg=strategy)  # fmt: skip
        np.testing.assert_array_equal(compiled.predict(rows), labels, err_msg=strategy)
    assert len(compiled.predict(rows[:0])) == 0


def test_the_default_compile_and_a_registered_file_score_as_onnx_runtime(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    model = exported["lgb_multi"]
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path))
    rows = _hard_rows(model)
    want, labels = _runtime(model, rows)
    registry = scoring.Registry(tmp_path / "reg")
    version = registry.register("segments", str(path))
    again = registry.register("segments", model)
    assert again.sha256 == version.sha256  # the file and the object: the same bytes
    for compiled in (scoring.compile(str(path)), scoring.compile(registry.bundle("segments"))):
        np.testing.assert_allclose(compiled.predict_proba(rows), want, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(compiled.predict(rows), labels)


def test_a_half_vote_is_a_tie_as_onnx_runtime_adds_it(exported: dict[str, Any]) -> None:
    """Extra trees fully grown vote 0 or 1/16 each: eight votes for each class is a tie
    in float32, where the first class wins, as ONNX Runtime on one thread says."""
    model = exported["et_binary"]
    rows = _hard_rows(model)
    want, labels = _runtime(model, rows)
    ties = np.nonzero(np.isclose(want[:, 1], 0.5))[0]
    assert len(ties), "no tie among the rows: the case is not exercised"
    compiled = scoring.compile(model, backend="tensor", strategy="fused", device="cpu")
    np.testing.assert_array_equal(compiled.predict(rows[ties]), labels[ties])


def _with(model: Any, **changed: Any) -> Any:
    """``model`` with its ensemble's attributes ``changed``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    node = _ensemble(copy)
    for name, value in changed.items():
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])
    return copy


@pytest.mark.parametrize("mode", ["BRANCH_GT", "BRANCH_GTE", "BRANCH_LT", "BRANCH_LEQ"])
def test_every_branch_mode_and_missing_direction_as_onnx_runtime_reads_them(
    exported: dict[str, Any], mode: str
) -> None:
    """The exporters write LEQ (skl2onnx, LightGBM) and LT (XGBoost) only: the same trees
    are given each mode, half their nodes swapping branches and NaN's direction drawn
    at random, and held to what ONNX Runtime makes of them."""
    model = exported["lgb_binary"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in _ensemble(model).attribute}
    rng = np.random.default_rng(3)
    true, false = list(attrs["nodes_truenodeids"]), list(attrs["nodes_falsenodeids"])
    modes, tracks = list(attrs["nodes_modes"]), rng.integers(0, 2, len(true)).tolist()
    for i, m in enumerate(modes):
        if m != b"LEAF":
            modes[i] = mode.encode()
            if rng.random() < 0.5:
                true[i], false[i] = false[i], true[i]
    changed = _with(model, nodes_modes=modes, nodes_truenodeids=true,
                    nodes_falsenodeids=false, nodes_missing_value_tracks_true=tracks)  # fmt: skip
    rows = _hard_rows(changed)
    want, labels = _runtime(changed, rows)
    compiled = scoring.compile(changed, backend="tensor", strategy="fused", device="cpu")
    np.testing.assert_allclose(compiled.predict_proba(rows), want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(rows), labels)


def test_a_binary_score_starts_from_its_base_value(exported: dict[str, Any]) -> None:
    """A binary ensemble's one score starts from its one base value; one per class is
    refused (ONNX Runtime then scores each class on its own: the two columns are not a
    pair)."""
    model = _with(exported["gb_binary"], base_values=[0.75])
    rows = _hard_rows(model)
    want, labels = _runtime(model, rows)
    compiled = scoring.compile(model, backend="tensor", strategy="fused", device="cpu")
    np.testing.assert_allclose(compiled.predict_proba(rows), want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(rows), labels)
    with pytest.raises(UnsupportedModelError, match="2 base values for 1 scores"):
        scoring.compile(_with(exported["gb_binary"], base_values=[0.75, -0.5]))


def test_what_cannot_be_matched_exactly_is_refused_by_name(exported: dict[str, Any]) -> None:
    model = exported["rf_binary"]
    modes = next(onnx.helper.get_attribute_value(a) for a in _ensemble(model).attribute
                 if a.name == "nodes_modes")  # fmt: skip
    equal = [b"BRANCH_EQ" if m != b"LEAF" else m for m in modes]
    with pytest.raises(UnsupportedModelError, match="mode 'BRANCH_EQ'"):
        scoring.compile(_with(model, nodes_modes=equal))
    with pytest.raises(UnsupportedModelError, match="post_transform 'PROBIT'"):
        scoring.compile(_with(model, post_transform="PROBIT"))
    with pytest.raises(UnsupportedModelError, match="aggregate_function 'MAX'"):
        scoring.compile(_with(exported["rf_reg"], aggregate_function="MAX"))


def test_a_graph_with_other_operators_is_refused_naming_them() -> None:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, binary, _ = _data()
    filled = np.nan_to_num(X)
    pipeline = make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=3))
    model = skl2onnx.to_onnx(pipeline.fit(filled, binary), filled[:1])
    with pytest.raises(UnsupportedModelError, match=r"ai\.onnx\.ml\.Scaler"):
        scoring.compile(model)


def test_a_damaged_file_is_one_line_naming_it(tmp_path: Path) -> None:
    from scoring.errors import ModelFileError

    (tmp_path / "m.onnx").write_bytes(b"x")
    with pytest.raises(ModelFileError, match=r"cannot read ONNX model file .*m\.onnx"):
        scoring.compile(tmp_path / "m.onnx")


def test_per_column_inputs_name_the_features(tmp_path: Path) -> None:
    """skl2onnx's ColumnTransformer: one [N, 1] input per column, joined by a Concat;
    the inputs' names are the features', and a frame's columns are matched by them."""
    import pandas as pd
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline

    X, binary, _ = _data()
    frame = pd.DataFrame(np.nan_to_num(X), columns=[f"c{j}" for j in range(FEATURES)])
    columns = ColumnTransformer([("keep", "passthrough", list(frame.columns))])
    fitted = Pipeline([("columns", columns), ("forest", RandomForestClassifier(
        n_estimators=8, max_depth=6, random_state=0))]).fit(frame, binary)  # fmt: skip
    typed = [(c, FloatTensorType([None, 1])) for c in frame.columns]
    model = skl2onnx.convert_sklearn(fitted, initial_types=typed, options={"zipmap": False})
    compiled = scoring.compile(model, backend="tensor", strategy="fused", device="cpu")
    assert compiled.forest.feature_names == list(frame.columns)
    rows = _hard_rows(model)  # at every threshold of its own trees
    session = _session(model)
    feed = {c: rows[:, [j]] for j, c in enumerate(frame.columns)}
    labels, probabilities = session.run(None, feed)
    reordered = pd.DataFrame(rows, columns=frame.columns)[frame.columns[::-1]]
    np.testing.assert_allclose(compiled.predict_proba(reordered), probabilities, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(reordered), labels)
    registry = scoring.Registry(tmp_path / "reg")  # the gate: ONNX Runtime fed per column
    assert registry.register("columns", model).verification["cpu"].passed


def test_other_input_types_and_wiring_are_refused() -> None:
    model = _exported("rf_reg")
    double = onnx.ModelProto()
    double.CopyFrom(model)
    double.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    with pytest.raises(UnsupportedModelError, match="is a double tensor"):
        scoring.compile(double)
    extra = onnx.ModelProto()
    extra.CopyFrom(model)
    extra.graph.input.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT,
                                                                [None, 1]))  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="one-column inputs joined by one Concat"):
        scoring.compile(extra)

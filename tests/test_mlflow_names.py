"""Every MLflow flavor x every way its features get names: reordered columns score as
MLflow's pyfunc does (by name where anything names the columns), or are refused by name.

Ways: a signature naming a model trained on unnamed data (the report: a CatBoost model
read its columns by position and gave wrong probabilities, silently); the model's own
names (with or without a matching signature); no names at all (position, as pyfunc).
Local MLflow model directories: no tracking server needed.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring.errors import ModelFileError

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
NAMES = ["a", "b", "c"]


def _data() -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(5)
    X = pd.DataFrame(rng.normal(size=(500, 3)), columns=NAMES)
    return X, (X.a - 0.7 * X.c + 0.2 * X.b > 0).astype(int).to_numpy()


def _fit(flavor: str, X: Any, y: np.ndarray) -> Any:
    if flavor == "xgboost":
        import xgboost

        return xgboost.XGBClassifier(n_estimators=15, max_depth=3).fit(X, y)
    if flavor == "xgboost_booster":
        import xgboost

        return xgboost.train({"objective": "binary:logistic", "max_depth": 3},
                             xgboost.DMatrix(X, y), num_boost_round=15)  # fmt: skip
    if flavor == "lightgbm_sklearn":
        import lightgbm

        return lightgbm.LGBMClassifier(n_estimators=15, num_leaves=8, verbose=-1).fit(X, y)
    if flavor == "lightgbm":
        import lightgbm

        return lightgbm.train({"objective": "binary", "verbose": -1, "num_leaves": 8},
                              lightgbm.Dataset(X, y), num_boost_round=15)  # fmt: skip
    if flavor == "onnx":  # a forest exported as ONNX; its own names kept as the product reads them
        from scoring._frameworks import FRAMEWORKS

        skl2onnx = pytest.importorskip("skl2onnx")
        from sklearn.ensemble import RandomForestClassifier

        rows = np.asarray(X, dtype=np.float32)
        forest = RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0).fit(rows, y)
        model = skl2onnx.to_onnx(forest, rows[:1], options={"zipmap": False})
        return FRAMEWORKS["onnx"].named(model, list(X.columns)) if hasattr(X, "columns") else model
    if flavor == "spark":
        return _spark_fit(X, y)
    if flavor == "catboost":
        catboost = pytest.importorskip("catboost")
        return catboost.CatBoostClassifier(iterations=15, depth=3, verbose=False).fit(X, y)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0).fit(X, y)


def _spark_fit(X: Any, y: np.ndarray) -> Any:
    """A Spark GBT classifier: after a VectorAssembler of the frame's columns in a
    PipelineModel (its own names), or alone on a vector of unnamed columns."""
    pytest.importorskip("pyspark")
    import pyarrow as pa
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import GBTClassifier
    from pyspark.ml.feature import VectorAssembler

    from scoring.spark import local_session

    named = hasattr(X, "columns")
    names = list(X.columns) if named else [f"_c{j}" for j in range(X.shape[1])]
    rows = np.asarray(X, dtype=np.float64)
    table = pa.table({**{n: rows[:, j] for j, n in enumerate(names)}, "label": y.astype(float)})
    frame = local_session("local[1]").createDataFrame(table)
    assembler = VectorAssembler(inputCols=names, outputCol="features")
    gbt = GBTClassifier(maxIter=10, maxDepth=3, seed=0)
    if named:
        return Pipeline(stages=[assembler, gbt]).fit(frame)
    return gbt.fit(assembler.transform(frame))


def _spark_probability(model: Any, X: Any) -> np.ndarray:
    """Spark's transform: the pipeline on named columns, the model alone on a vector."""
    import pyarrow as pa
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.sql import functions as F

    from scoring.spark import local_session

    spark = local_session("local[1]")
    if hasattr(model, "stages"):
        frame = spark.createDataFrame(pa.Table.from_pandas(X, preserve_index=False))
    else:
        rows = np.asarray(X, dtype=np.float64)
        frame = spark.createDataFrame(pa.table({"x": [list(r) for r in rows]}))
        frame = frame.select(array_to_vector(F.col("x")).alias("features"))
    out = model.transform(frame).select(vector_to_array("probability").alias("p")).toPandas()
    return np.stack(out["p"].to_numpy())[:, 1]


def _save(flavor: str, model: Any, path: Path, signature: Any) -> None:
    module = flavor.split("_")[0]
    kwargs: dict[str, Any] = {"signature": signature, "pip_requirements": []}
    if module == "sklearn":
        kwargs.update(serialization_format="skops", skops_trusted_types=["sklearn.tree._tree.Tree"])
    if module == "xgboost":
        kwargs["model_format"] = "json"
    if module == "spark":  # mlflow.spark is not imported with mlflow
        from .conftest import as_a_script

        with as_a_script():
            importlib.import_module("mlflow.spark").save_model(model, str(path), **kwargs)
        return
    getattr(mlflow, module).save_model(model, str(path), **kwargs)


def _probability(model: Any, X: Any) -> np.ndarray:
    import xgboost

    if type(model).__module__.startswith("pyspark"):
        return _spark_probability(model, X)
    if type(model).__module__.startswith("onnx"):  # ONNX Runtime on one thread
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options)
        rows = np.asarray(X, dtype=np.float32)
        return np.asarray(session.run(None, {session.get_inputs()[0].name: rows})[1])[:, 1]

    if isinstance(model, xgboost.Booster):
        return np.asarray(model.predict(xgboost.DMatrix(X)))
    if hasattr(model, "predict_proba"):
        return np.asarray(model.predict_proba(X))[:, 1]
    return np.asarray(model.predict(X))


FLAVORS = [
    "xgboost", "xgboost_booster", "lightgbm", "lightgbm_sklearn", "catboost", "sklearn", "onnx",
    "spark",
]  # fmt: skip
WAYS = ["signature", "own", "own_and_signature", "none"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_reordered_columns_score_as_pyfunc(tmp_path: Path, flavor: str, way: str) -> None:
    from mlflow.models import infer_signature

    X, y = _data()
    named = way.startswith("own")
    model = _fit(flavor, X if named else X.to_numpy(), y)
    signature = infer_signature(X, y) if "signature" in way else None
    _save(flavor, model, tmp_path / "m", signature)
    reordered = X[["c", "b", "a"]].iloc[:50]
    # The truth: by name where anything names the columns, by position where nothing does
    # (what MLflow's pyfunc does with a frame it has no names for).
    truth_rows: Any = X.iloc[:50] if named else X.iloc[:50].to_numpy()
    if way == "none":
        truth_rows = reordered.to_numpy()
    expected = _probability(model, truth_rows)
    got = scoring.compile(str(tmp_path / "m"), backend="native").predict_proba(reordered)[:, 1]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    # MLflow's ONNX pyfunc builds a frame of the graph's outputs, which a classifier's
    # label [N] beside its probabilities [N, 2] cannot be: ONNX Runtime is the truth there.
    # Spark's pyfunc feeds the frame to the PipelineModel MLflow wraps the model in, which
    # reads a vector column where the model has no assembler: transform is the truth.
    if signature is not None and flavor not in ("onnx", "spark"):
        pyfunc = mlflow.pyfunc.load_model(str(tmp_path / "m")).predict(reordered)
        pyfunc = np.asarray(pyfunc, dtype=float).reshape(len(reordered), -1)
        labels = (expected > 0.5).astype(float) if pyfunc.max() <= 1 and set(
            np.unique(pyfunc)) <= {0.0, 1.0} else expected  # fmt: skip
        np.testing.assert_allclose(pyfunc[:, -1], labels, rtol=1e-5, atol=1e-6)


def test_a_signature_naming_other_features_than_the_models_is_refused(tmp_path: Path) -> None:
    from mlflow.models import infer_signature

    X, y = _data()
    model = _fit("xgboost", X, y)
    _save("xgboost", model, tmp_path / "m", infer_signature(X.rename(columns={"a": "z"}), y))
    with pytest.raises(ModelFileError, match="signature names the features"):
        scoring.compile(str(tmp_path / "m"))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_framework_records_names_on_a_model_trained_without(flavor: str) -> None:
    """The renaming is each framework's own (``Framework.named``), in the format the
    registry stores; every registered framework is among the flavors above."""
    from scoring._frameworks import FRAMEWORKS, framework_of, import_model
    from scoring._inputs import feature_names

    X, y = _data()
    model = _fit(flavor, X.to_numpy(), y)
    framework = framework_of(model)
    assert feature_names(import_model(model)) is None
    renamed = framework.named(model, NAMES)
    assert renamed is not None and feature_names(import_model(renamed)) == NAMES
    covered = {framework_of(_fit(f, X.to_numpy()[:60], y[:60])).name for f in FLAVORS}
    assert covered == set(FRAMEWORKS)

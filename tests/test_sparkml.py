"""Spark ML tree models in: every DecisionTree, RandomForest and GBT classification and
regression model, alone and in a PipelineModel after a VectorAssembler, fitted objects
and saved folders (read without Spark, on disk and on an S3 API), held to Spark's own
``transform`` of the model the user fitted, on rows at every threshold and its float64
neighbours, NaN, +-inf and -0.0; what cannot be matched is refused by name."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scoring
from scoring.errors import ModelFileError, UnsupportedModelError

from .conftest import as_a_script

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime", allow_module_level=True)
pytestmark = pytest.mark.timeout(600)

COLUMNS = ["a", "b", "c", "d"]
STRATEGIES = ("fused", "gemm", "tree_traversal", "compiled")
KINDS = [f"{m}{t}" for m in ("DecisionTree", "RandomForest", "GBT")
         for t in ("Classifier", "Regressor")]  # fmt: skip
#: Every class alone (the classifiers of trees and forests with two classes and three),
#: and four in a PipelineModel after a VectorAssembler (the same trees, named columns).
MODELS = [
    (k, False, n)
    for k in KINDS
    for n in ((2, 3) if k.endswith("Classifier") and not k.startswith("GBT") else (2,))
]
MODELS += [("GBTClassifier", True, 2), ("RandomForestClassifier", True, 3),
           ("GBTRegressor", True, 2), ("RandomForestRegressor", True, 2)]  # fmt: skip


@pytest.fixture(scope="module")
def spark() -> Any:
    from scoring.spark import local_session

    session = local_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def _train(spark: Any) -> Any:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, len(COLUMNS)))
    X[:, 3] = np.round(X[:, 3], 1)  # ties: many rows exactly at a threshold's value
    binary = (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(float)
    three = np.digitize(X[:, 2] + 0.3 * X[:, 3], [-0.5, 0.5]).astype(float)
    target = 2 * X[:, 0] + X[:, 3] + 0.1 * rng.normal(size=len(X))
    table = pa.table({**{c: X[:, j] for j, c in enumerate(COLUMNS)},
                      "y2": binary, "y3": three, "r": target})  # fmt: skip
    return spark.createDataFrame(table)


def _estimator(kind: str, classes: int) -> Any:
    from pyspark.ml import classification, regression

    module = classification if kind.endswith("Classifier") else regression
    label = {2: "y2", 3: "y3"}[classes] if kind.endswith("Classifier") else "r"
    params: dict[str, Any] = {"labelCol": label, "maxDepth": 5, "seed": 1}
    if kind.startswith("RandomForest"):
        params["numTrees"] = 12
    if kind.startswith("GBT"):
        params.update(maxIter=12, stepSize=0.3)
    return getattr(module, kind)(**params)


def _assembler(handle: str = "keep") -> Any:
    from pyspark.ml.feature import VectorAssembler

    return VectorAssembler(inputCols=COLUMNS, outputCol="features", handleInvalid=handle)


@pytest.fixture(scope="module")
def fitted(spark: Any) -> dict[tuple[str, bool, int], Any]:
    """Each model the user fits: the tree model alone, or a PipelineModel around it."""
    from pyspark.ml import Pipeline

    train = _train(spark)
    assembled = _assembler().transform(train)
    out = {}
    for kind, pipeline, classes in MODELS:
        estimator = _estimator(kind, classes)
        if pipeline:
            out[kind, pipeline, classes] = Pipeline(stages=[_assembler(), estimator]).fit(train)
        else:
            out[kind, pipeline, classes] = estimator.fit(assembled)
    return out


def _tree_model(model: Any) -> Any:
    return model.stages[-1] if hasattr(model, "stages") else model


def _hard_rows(model: Any, tmp: Path) -> np.ndarray:
    """Rows at every threshold and its float64 neighbours, one feature at a time (read
    from the model's own saved files), beside NaN, +-inf, -0.0 and ordinary rows."""
    _tree_model(model).write().save(str(tmp / "saved"))
    nodes = pq.read_table(tmp / "saved" / "data").to_pylist()
    nodes = [n.get("nodeData", n) for n in nodes]
    rng = np.random.default_rng(2)
    base = rng.normal(size=(64, len(COLUMNS)))
    rows = [rng.normal(size=(100, len(COLUMNS)))]
    for node in nodes:
        if node["leftChild"] < 0:
            continue
        feature, (value,) = (
            node["split"]["featureIndex"],
            node["split"]["leftCategoriesOrThreshold"],
        )
        for x in (np.nextafter(value, -np.inf), value, np.nextafter(value, np.inf)):
            row = base[len(rows) % len(base)].copy()
            row[feature] = x
            rows.append(row[None])
    for j in range(len(COLUMNS)):
        for x in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            row = base[j].copy()
            row[j] = x
            rows.append(row[None])
    rows.append(np.full((1, len(COLUMNS)), np.nan))
    return np.vstack(rows)


def _transform(spark: Any, model: Any, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Spark's own answer: the pipeline on the columns, or the model on a vector (built
    from Arrow, so that NaN stays NaN, not NULL)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.sql import functions as F

    columns = {c: rows[:, j] for j, c in enumerate(COLUMNS)}
    frame = spark.createDataFrame(pa.table({"i": np.arange(len(rows)), **columns}))
    if not hasattr(model, "stages"):
        frame = frame.select("i", array_to_vector(F.array(*COLUMNS)).alias("features"))
    out = model.transform(frame)
    keep = [F.col("i"), F.col("prediction")]
    if "probability" in out.columns:
        keep.append(vector_to_array("probability").alias("probability"))
    got = out.select(*keep).toPandas().sort_values("i")
    result = {"prediction": got["prediction"].to_numpy()}
    if "probability" in got:
        result["probability"] = np.stack(got["probability"].to_numpy())
    return result


def _check(compiled: Any, want: dict[str, np.ndarray], rows: Any, what: str) -> None:
    if "probability" in want:
        np.testing.assert_allclose(compiled.predict_proba(rows), want["probability"],
                                   rtol=0, atol=1e-6, err_msg=what)  # fmt: skip
        np.testing.assert_array_equal(compiled.predict(rows), want["prediction"], err_msg=what)
    else:
        np.testing.assert_allclose(compiled.predict(rows), want["prediction"], rtol=1e-6,
                                   atol=1e-12, err_msg=what)  # fmt: skip


@pytest.mark.parametrize(("kind", "pipeline", "classes"), MODELS)
def test_every_model_and_strategy_matches_spark_transform(
    spark: Any, fitted: dict[Any, Any], tmp_path: Path, kind: str, pipeline: bool, classes: int
) -> None:
    model = fitted[kind, pipeline, classes]
    rows = _hard_rows(model, tmp_path)
    want = _transform(spark, model, rows)
    frame = None
    if pipeline:  # the pipeline's features by name: a frame with the columns reordered
        import pandas as pd

        frame = pd.DataFrame(rows, columns=COLUMNS)[COLUMNS[::-1]]
    for strategy in STRATEGIES:
        compiled = scoring.compile(model, backend="tensor", strategy=strategy, device="cpu")
        _check(compiled, want, rows if frame is None else frame, strategy)
    assert len(compiled.predict(rows[:0])) == 0
    # The saved folder, read from its files, scores the same (the default compile).
    model.write().save(str(tmp_path / "folder"))
    _check(scoring.compile(str(tmp_path / "folder")), want, rows, "folder")


def test_leaf_ids_are_sparks_leaf_column(spark: Any, fitted: dict[Any, Any]) -> None:
    from pyspark.ml.functions import array_to_vector, vector_to_array

    model = fitted["RandomForestClassifier", False, 3].copy().setLeafCol("leaf")
    rows = np.random.default_rng(4).normal(size=(300, len(COLUMNS)))
    rows[::7, 1] = np.nan
    frame = spark.createDataFrame(pa.table({"i": np.arange(len(rows)),
                                            "x": [list(r) for r in rows]}))  # fmt: skip
    frame = frame.select("i", array_to_vector("x").alias("features"))
    got = model.transform(frame).select("i", vector_to_array("leaf").alias("leaf"))
    want = np.stack(got.toPandas().sort_values("i")["leaf"].to_numpy()).astype(np.int64)
    compiled = scoring.compile(model, backend="tensor", strategy="fused", device="cpu")
    np.testing.assert_array_equal(compiled.predict_leaf(rows), want)


def test_a_saved_folder_is_read_without_spark(fitted: dict[Any, Any], tmp_path: Path) -> None:
    """In a fresh interpreter: compiled and scored, and pyspark never imported."""
    model = fitted["GBTClassifier", True, 2]
    model.write().save(str(tmp_path / "pipe"))
    rows = np.random.default_rng(5).normal(size=(50, len(COLUMNS)))
    np.save(tmp_path / "rows.npy", rows)
    code = (
        "import sys, numpy as np, pandas as pd, scoring\n"
        f"m = scoring.compile({str(tmp_path / 'pipe')!r})\n"
        f"rows = pd.DataFrame(np.load({str(tmp_path / 'rows.npy')!r}), columns={COLUMNS!r})\n"
        f"np.save({str(tmp_path / 'p.npy')!r}, m.predict_proba(rows))\n"
        "assert 'pyspark' not in sys.modules, 'pyspark was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    want = scoring.compile(model).predict_proba(rows)
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), want)


def test_a_folder_on_an_object_store(
    fitted: dict[Any, Any], tmp_path: Path, s3_bucket: str
) -> None:
    import fsspec

    model = fitted["RandomForestRegressor", True, 2]
    model.write().save(str(tmp_path / "pipe"))
    url = f"{s3_bucket}/models/ünï pipe"
    fsspec.filesystem("s3").put(str(tmp_path / "pipe"), url, recursive=True)
    rows = np.random.default_rng(6).normal(size=(40, len(COLUMNS)))
    import pandas as pd

    frame = pd.DataFrame(rows, columns=COLUMNS)
    remote = scoring.compile(url)
    np.testing.assert_array_equal(remote.predict(frame), scoring.compile(model).predict(frame))


def test_registered_object_and_folder_are_one_model_and_pass_the_gate(
    spark: Any, fitted: dict[Any, Any], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from scoring.cli import app

    model = fitted["GBTRegressor", True, 2]
    model.write().save(str(tmp_path / "pipe"))
    registry = scoring.Registry(tmp_path / "reg")
    version = registry.register("eta", model)
    assert version.verification["cpu"].passed and version.verification["cpu"].rows >= 2048
    assert version.schema.feature_names == COLUMNS
    result = CliRunner().invoke(app, ["models", "register", str(tmp_path / "pipe"), "--name",
                                      "eta", "--registry", str(tmp_path / "reg")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "eta@" in result.output
    versions = {v.sha256 for v in registry.versions("eta")}
    assert versions == {version.sha256}  # the fitted object and its folder: the same bytes
    rows = _hard_rows(model, tmp_path)
    want = _transform(spark, model, rows)
    import pandas as pd

    _check(scoring.compile(registry.bundle("eta")), want, pd.DataFrame(rows, columns=COLUMNS),
           "registered")  # fmt: skip


def test_mlflow_spark_flavor(spark: Any, fitted: dict[Any, Any], tmp_path: Path) -> None:
    spark_flavor = pytest.importorskip("mlflow.spark")

    model = fitted["RandomForestClassifier", False, 3]
    with as_a_script():
        spark_flavor.save_model(model, str(tmp_path / "m"))  # wrapped in a PipelineModel
    rows = _hard_rows(model, tmp_path)
    _check(scoring.compile(str(tmp_path / "m")), _transform(spark, model, rows), rows, "mlflow")


# -- refused by name -----------------------------------------------------------------


def test_categorical_splits_are_refused(spark: Any) -> None:
    from pyspark.ml.classification import DecisionTreeClassifier
    from pyspark.ml.feature import StringIndexer, VectorAssembler

    rng = np.random.default_rng(7)
    colour = rng.choice(["red", "green", "blue"], size=300)
    frame = spark.createDataFrame(pa.table({
        "colour": colour, "x": rng.normal(size=300), "y": (colour == "red").astype(float),
    }))  # fmt: skip
    indexed = StringIndexer(inputCol="colour", outputCol="code").fit(frame).transform(frame)
    assembled = VectorAssembler(inputCols=["code", "x"], outputCol="features").transform(indexed)
    model = DecisionTreeClassifier(labelCol="y", maxDepth=3).fit(assembled)
    with pytest.raises(UnsupportedModelError, match="categorical feature 0"):
        scoring.compile(model)


def test_thresholds_are_refused(spark: Any) -> None:
    from pyspark.ml.classification import RandomForestClassifier

    frame = _assembler().transform(_train(spark))
    model = RandomForestClassifier(labelCol="y2", numTrees=3).fit(frame).setThresholds([0.3, 0.7])
    with pytest.raises(UnsupportedModelError, match="thresholds"):
        scoring.compile(model)


def test_other_pipeline_stages_and_skipping_assemblers_are_refused(spark: Any) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StandardScaler

    train = _train(spark)
    tree = _estimator("DecisionTreeRegressor", 2)
    scaled = Pipeline(stages=[_assembler(), StandardScaler(inputCol="features",
                                                           outputCol="scaled"),
                              tree.copy().setFeaturesCol("scaled")]).fit(train)  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="StandardScaler"):
        scoring.compile(scaled)
    skipping = Pipeline(stages=[_assembler("skip"), tree]).fit(train)
    with pytest.raises(UnsupportedModelError, match="handleInvalid='skip'"):
        scoring.compile(skipping)


def test_a_damaged_folder_is_one_line(fitted: dict[Any, Any], tmp_path: Path) -> None:
    model = fitted["DecisionTreeRegressor", False, 2]
    model.write().save(str(tmp_path / "m"))
    for part in (tmp_path / "m" / "metadata").glob("part-*"):
        part.unlink()
    with pytest.raises(ModelFileError, match="no metadata/part"):
        scoring.compile(str(tmp_path / "m"))


def test_the_sql_function_scores_a_registered_spark_model_as_transform(
    spark: Any, fitted: dict[Any, Any], tmp_path: Path
) -> None:
    from scoring.spark import register_udf

    model = fitted["RandomForestClassifier", True, 3]
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("segments", model)
    register_udf(spark, "segment_p", "segments@1", registry=registry, output="probability")
    register_udf(spark, "segment", "segments@1", registry=registry, output="label")
    rows = _hard_rows(model, tmp_path)
    want = _transform(spark, model, rows)
    columns = {c: rows[:, j] for j, c in enumerate(COLUMNS)}
    spark.createDataFrame(pa.table({"i": np.arange(len(rows)), **columns})) \
        .createOrReplaceTempView("rows")  # fmt: skip
    got = spark.sql("SELECT i, segment_p(struct(d, c, b, a)) AS p, segment(struct(*)) AS label "
                    "FROM rows ORDER BY i").toPandas()  # fmt: skip
    np.testing.assert_allclose(np.stack(got["p"].to_numpy()), want["probability"], rtol=0,
                               atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(got["label"].to_numpy(), want["prediction"])


def test_models_apply_takes_saved_folders_and_a_resave_changes_nothing(
    fitted: dict[Any, Any], tmp_path: Path, s3_bucket: str
) -> None:
    """A models/ folder naming a saved PipelineModel on disk and one on an S3 API; saving
    the same model again (new timestamps, new part-file names) is the same model."""
    import fsspec
    from typer.testing import CliRunner

    from scoring.cli import app

    local, remote = fitted["GBTClassifier", True, 2], fitted["DecisionTreeClassifier", False, 3]
    local.write().save(str(tmp_path / "files" / "churn"))
    remote.write().save(str(tmp_path / "upload"))
    fsspec.filesystem("s3").put(str(tmp_path / "upload"), f"{s3_bucket}/tiers", recursive=True)
    models = tmp_path / "models"
    models.mkdir()
    (models / "churn.toml").write_text(
        'name = "churn"\nsource = "../files/churn"\naliases = ["production"]\n'
    )
    (models / "tiers.toml").write_text(f'name = "tiers"\nsource = "{s3_bucket}/tiers"\n')

    def apply() -> list[str]:
        said = CliRunner().invoke(app, ["models", "apply", str(models), "--registry",
                                        str(tmp_path / "registry")])  # fmt: skip
        assert said.exit_code == 0, said.output
        return said.stdout.strip().splitlines()

    made = apply()
    assert len(made) == 3, made
    assert made[0].startswith("churn: register ") and "files/churn (sha256 " in made[0]
    assert made[1] == "churn: alias production -> version 1"
    assert made[2].startswith(f"tiers: register {s3_bucket}/tiers (sha256 "), made
    shutil.rmtree(tmp_path / "files" / "churn")
    local.write().save(str(tmp_path / "files" / "churn"))  # saved again: the same model
    assert apply() == []
    registry = scoring.Registry(tmp_path / "registry")
    assert registry.get("churn@production").verified and registry.get("tiers").verified


def test_a_damaged_table_or_a_missing_url_is_one_line(
    fitted: dict[Any, Any], tmp_path: Path, s3_bucket: str
) -> None:
    model = fitted["GBTRegressor", False, 2]
    model.write().save(str(tmp_path / "m"))
    for part in (tmp_path / "m" / "data").glob("part-*.parquet"):
        part.write_bytes(b"not parquet")
    with pytest.raises(ModelFileError, match=r"cannot read Spark ML folder .*m'"):
        scoring.compile(str(tmp_path / "m"))
    with pytest.raises(ModelFileError, match="is not a saved Spark ML folder"):
        scoring.compile(f"{s3_bucket}/nothing-here")


def test_a_set_of_models_on_cpu_never_scores_through_spark(fitted: dict[Any, Any]) -> None:
    """Where a set of models on CPU lets each member's native predictor score (or race
    a combined forest), a Spark ML member is scored by the kernel: its predictor is a
    JVM's transform, the reference only."""
    from scoring._engines.base import bundle_set
    from scoring._modelset import compile_set

    members = [{"model": fitted["GBTRegressor", False, 2], "prefix": "eta"},
               {"model": fitted["DecisionTreeRegressor", False, 2], "prefix": "tree"}]  # fmt: skip
    compiled = compile_set(bundle_set(members), backend="auto", device="cpu")
    assert [compiled.backend_of(i) for i in range(2)] == ["tensor", "tensor"]
    rows = np.random.default_rng(8).normal(size=(64, len(COLUMNS)))
    for i, member in enumerate(members):
        want = scoring.compile(member["model"]).predict(rows)
        np.testing.assert_array_equal(compiled.models[i].predict(rows), want)

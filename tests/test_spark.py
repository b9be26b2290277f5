"""Spark: the SQL function, score_dataframe and the Spark engine, on local[2]."""

from __future__ import annotations

import json
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._catalog import reference_profile
from scoring._drift import Profile
from scoring._frameworks import import_model
from scoring._journal.lease import OutputLease
from scoring._modelset import prefixed
from scoring.errors import MissingColumnError, OutputError

from .test_score_parquet import assert_native_parity, model_frame, native_columns, write_input

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime", allow_module_level=True)
pytestmark = pytest.mark.timeout(300)
JOBS = Path(__file__).parent.parent / "jobs"


@pytest.fixture(scope="module")
def spark() -> Any:
    from scoring.spark import local_session

    session = local_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> scoring.Registry:
    reg = scoring.Registry(tmp_path_factory.mktemp("reg"))
    for name in ("xgb_clf", "lgb_cat_frame", "xgb_multi", "sk_et_multi_clf", "sk_rf_multi_reg",
                 "sk_pipe_onehot"):  # fmt: skip
        reg.register(name, model_frame(name, rows=10)[0])
    return reg


def _features(spark: Any, name: str, rows: int = 3000) -> tuple[Any, pd.DataFrame]:
    """A Spark DataFrame of the model's probe rows plus ``id``, and those rows."""
    _, X = model_frame(name, rows=rows)
    rows_in = X.copy()
    rows_in["id"] = np.arange(len(X))
    first = rows_in.columns[0]
    if isinstance(X.dtypes.iloc[0], pd.CategoricalDtype):  # Spark has no category type
        rows_in[first] = rows_in[first].astype(object).where(rows_in[first].notna(), None)
    return spark.createDataFrame(rows_in), X


def test_sql_function_with_struct_of_all_columns(spark: Any, registry: Any) -> None:
    from scoring.spark import register_udf

    df, X = _features(spark, "xgb_clf")
    df.createOrReplaceTempView("features")
    register_udf(spark, "score_churn", "xgb_clf@1", registry=registry)
    register_udf(spark, "label_churn", "xgb_clf@1", output="label", registry=registry)
    out = spark.sql(
        "SELECT id, score_churn(struct(*)) AS p, label_churn(struct(*)) AS label "
        "FROM features ORDER BY id"
    ).toPandas()
    ref = native_columns("xgb_clf", X)
    np.testing.assert_allclose(out["p"], ref["probability"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["label"], ref["label"])


def test_positional_columns_categories_and_all_outputs(spark: Any, registry: Any) -> None:
    from pyspark.sql import functions as F

    from scoring.spark import register_udf

    df, X = _features(spark, "lgb_cat_frame")
    udf = register_udf(spark, "score_cat", "lgb_cat_frame@1", output="all", registry=registry)
    out = df.select("id", udf(*[F.col(c) for c in X.columns]).alias("s")).orderBy("id")
    frame = out.select("id", "s.*").toPandas()
    assert_native_parity(frame, "lgb_cat_frame", X)
    multi = register_udf(spark, "score_multi", "xgb_multi@1", registry=registry)
    mdf, MX = _features(spark, "xgb_multi", rows=500)
    proba = np.stack(mdf.select(multi(F.struct(*MX.columns)).alias("p")).toPandas()["p"])
    ref = native_columns("xgb_multi", MX)
    classes = sorted(k for k in ref if k.startswith("probability_"))
    np.testing.assert_allclose(proba, np.column_stack([ref[c] for c in classes]), atol=1e-6)


def test_a_model_of_several_targets_gives_one_array_per_row(spark: Any, registry: Any) -> None:
    from pyspark.sql import functions as F

    from scoring.spark import register_udf

    for name, output in (("sk_rf_multi_reg", "prediction"), ("sk_et_multi_clf", "label")):
        df, X = _features(spark, name, rows=300)
        udf = register_udf(spark, f"score_{name}", f"{name}@1", output=output, registry=registry)
        out = df.select("id", udf(F.struct(*X.columns)).alias("v")).orderBy("id").toPandas()
        ref = native_columns(name, X)
        targets = sorted(k for k in ref if k.startswith(f"{output}_"))
        assert len(targets) == 2
        np.testing.assert_array_equal(
            np.stack(out["v"]), np.column_stack([ref[k] for k in targets])
        )


def test_a_pipeline_encoding_text_labels_scores_them_from_sql(spark: Any, registry: Any) -> None:
    from scoring.spark import register_udf

    _, X = model_frame("sk_pipe_onehot", rows=1000)
    X["feat_0"] = X["feat_0"].where(X["feat_0"].notna(), None)  # Spark's nulls: None
    rows_in = X.assign(id=np.arange(len(X)))
    spark.createDataFrame(rows_in).createOrReplaceTempView("labelled")
    register_udf(spark, "score_labels", "sk_pipe_onehot@1", output="all", registry=registry)
    out = spark.sql("SELECT id, score_labels(struct(*)) AS s FROM labelled ORDER BY id")
    assert_native_parity(out.select("s.*").toPandas(), "sk_pipe_onehot", X)


def test_missing_feature_is_named(spark: Any, registry: Any) -> None:
    from scoring.spark import register_udf, score_dataframe

    df, _ = _features(spark, "lgb_cat_frame", rows=200)
    with pytest.raises(MissingColumnError, match="feat_3"):
        score_dataframe(df.drop("feat_3"), "lgb_cat_frame@1", registry=registry)
    register_udf(spark, "score_cat2", "lgb_cat_frame@1", registry=registry)
    df.drop("feat_3").createOrReplaceTempView("short")
    with pytest.raises(Exception, match="feat_3"):
        spark.sql("SELECT score_cat2(struct(*)) FROM short").collect()


def test_score_dataframe_keeps_columns(spark: Any, registry: Any) -> None:
    from scoring.spark import score_dataframe

    df, X = _features(spark, "xgb_clf")
    out = score_dataframe(df, "xgb_clf@1", keep=["id"], registry=registry)
    assert out.columns == ["id", "probability", "label"]
    frame = out.orderBy("id").toPandas()
    np.testing.assert_array_equal(frame["id"], np.arange(len(X)))
    assert_native_parity(frame, "xgb_clf", X)
    everything = score_dataframe(df, "xgb_clf@1", registry=registry)  # keep=None: all
    assert everything.columns == [*df.columns, "probability", "label"]


def test_gpu_settings_warning(spark: Any) -> None:
    from scoring.spark import tune_session

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tune_session(spark) == "cpu"  # no GPUs asked for: no warning
    assert spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") == "131072"


def test_spark_engine_job_and_rerun(tmp_path: Path, spark: Any, registry: Any) -> None:
    model, X = model_frame("xgb_clf", rows=4000)
    write_input(X, tmp_path / "in", files=4)
    args = (tmp_path / "in", tmp_path / "out", "xgb_clf@1")
    reference = reference_profile(model, import_model(model), X[:1000])
    first = scoring.score_parquet(*args, engine="spark", keep=["id"], registry=registry,
                                  progress=False,
                                  run=scoring.RunOptions(monitor=reference))  # fmt: skip
    assert first.rows == 4000 and first.engine == "spark"
    # Drift counted in the executors (an accumulator) as the local engine counts it.
    local = scoring.score_parquet(tmp_path / "in", tmp_path / "local", model, progress=False,
                                  run=scoring.RunOptions(monitor=reference))  # fmt: skip
    assert first.drift_counts == local.drift_counts and local.drift_counts is not None
    assert (first.backend, first.device) != ("auto", "auto")  # what the executors ran
    assert f"on {first.backend}/{first.strategy or '-'} cpu" in first.summary()
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id").reset_index(drop=True)
    np.testing.assert_array_equal(out["id"], np.arange(4000))
    assert_native_parity(out, "xgb_clf", X)
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == 4000 and sum(f["rows"] for f in manifest["files"]) == 4000
    assert (tmp_path / "out" / "_SUCCESS").exists()
    # A rerun after a failure that left a partial output replaces it: no duplicates.
    (tmp_path / "out" / "_SUCCESS").unlink()
    shutil.copy(tmp_path / "out" / manifest["files"][0]["output"],
                tmp_path / "out" / "part-99999-leftover.parquet")  # fmt: skip
    from typer.testing import CliRunner

    from scoring.cli import app

    again = CliRunner().invoke(app, [
        "score", "--model", "xgb_clf@1", "--input", str(tmp_path / "in"), "--output",
        str(tmp_path / "out"), "--keep", "id", "--engine", "spark", "--registry",
        str(registry.uri)])  # fmt: skip
    assert again.exit_code == 0 and "4,000 rows" in again.output, again.output
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(4000))
    done = scoring.score_parquet(*args, engine="spark", keep=["id"], registry=registry,
                                 progress=False)  # fmt: skip
    assert done.already_complete
    others = sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith("part-"))
    assert others == ["_SUCCESS", "_scoring_manifest.json"]  # no lease, staging or .crc left
    # Spark's committer writes into the staging folder, so the output keeps its lease.
    published = (tmp_path / "out" / "_scoring_manifest.json").read_text()
    holder = OutputLease(str(tmp_path / "out"))
    holder.acquire()
    try:
        with pytest.raises(OutputError, match=r"being written by another run \(pid "):
            scoring.score_parquet(args[0], scoring.Output(args[1], mode="overwrite"), *args[2:],
                                  engine="spark", keep=["id"], outputs="raw",
                                  registry=registry, progress=False)  # fmt: skip
    finally:
        holder.release()
    assert (tmp_path / "out" / "_scoring_manifest.json").read_text() == published


class _Conf:
    """What tune_session reads of a session: launch settings and runtime settings."""

    def __init__(self, launch: dict[str, str]):
        self.launch, self.runtime = (
            launch,
            {"spark.sql.execution.arrow.maxRecordsPerBatch": "10000"},
        )

    def contains(self, key: str) -> bool:
        return key in self.launch

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.launch.get(key, self.runtime.get(key, default))

    def set(self, key: str, value: str) -> None:
        self.runtime[key] = value


class _Session:
    def __init__(self, launch: dict[str, str]):
        self.conf = _Conf(launch)
        self.sparkContext = self

    def getConf(self) -> _Conf:
        return self.conf


def test_gpu_executors_without_task_gpus_warn() -> None:
    from scoring.spark import tune_session

    session = _Session({"spark.executor.resource.gpu.amount": "1"})
    with pytest.warns(UserWarning, match="spark.task.resource.gpu.amount"):
        assert tune_session(session) == "cpu"
    gpus = _Session({"spark.executor.resource.gpu.amount": "1",
                     "spark.task.resource.gpu.amount": "0.25"})  # fmt: skip
    assert tune_session(gpus) == "gpu"
    assert gpus.conf.runtime["spark.sql.execution.arrow.maxRecordsPerBatch"] == "1048576"
    chosen = _Session({"spark.sql.execution.arrow.maxRecordsPerBatch": "5000"})
    tune_session(chosen)  # the user's own batch size stays
    assert chosen.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") == "5000"


def test_an_executors_error_is_raised_as_itself(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error a Python worker raised, not Spark's wrapping of it: its own type and
    message; Spark's exception is its cause only when debugging."""
    from scoring.errors import InvalidValueError

    model, X = model_frame("sk_gb_clf", rows=3000)  # GradientBoosting refuses NaN
    X.iloc[2500, 1] = np.nan  # past the rows the driver checks: only an executor sees it
    write_input(X, tmp_path / "in", files=1)
    for debug in ("0", "1"):
        monkeypatch.setenv("SCORING_DEBUG", debug)
        with pytest.raises(InvalidValueError, match=r"feature column 'f1' has 1 NaN") as caught:
            scoring.score_parquet(tmp_path / "in", tmp_path / f"out{debug}", model,
                                  engine="spark", keep=["id"], progress=False)  # fmt: skip
        cause = caught.value.__cause__
        assert (cause is None) if debug == "0" else type(cause).__module__.startswith("pyspark")
        assert not (tmp_path / f"out{debug}" / "_SUCCESS").exists()


def test_task_gpu_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import TaskContext
    from pyspark.resource import ResourceInformation

    from scoring._engines.spark import task_device

    class Context:
        def resources(self) -> dict[str, Any]:
            return {"gpu": ResourceInformation("gpu", ["3"])}

    monkeypatch.setattr(TaskContext, "get", staticmethod(lambda: Context()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert task_device("auto") == "cuda:1"  # the 2nd visible device
    assert task_device("cuda") == "cuda:1"  # the task's GPU, not the process's first
    assert task_device("cuda", placement=True) == "cpu"  # placed on it, scored on CPU
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert task_device("auto") == "cuda:3"
    assert task_device("cpu") == "cpu"
    monkeypatch.setattr(TaskContext, "get", staticmethod(lambda: None))
    assert task_device("auto") == "cpu"


def test_score_dataframe_with_several_models_matches_the_local_engine(
    tmp_path: Path, spark: Any
) -> None:
    from scoring.spark import register_udf, score_dataframe

    from .test_many_models import _input, _models

    models = {k: v for k, v in _models().items() if k in ("churn", "upsell", "value")}
    listed = [{"model": m, "prefix": k} for k, m in models.items()]
    frame = write_input(_input(models).drop(columns=["segment"]), tmp_path / "in", files=2)
    local = scoring.score_parquet(tmp_path / "in", tmp_path / "local", listed, keep=["id"],
                                  progress=False)  # fmt: skip
    df = spark.createDataFrame(frame.astype({"id": "int64"}))
    out = score_dataframe(df, listed, keep=["id"], backend="tensor")
    assert out.columns == ["id", *local.outputs]
    got = out.orderBy("id").toPandas()
    want = pq.read_table(tmp_path / "local").to_pandas()
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-6)
    with pytest.raises(scoring.errors.ConfigError, match="one model per SQL function"):
        register_udf(spark, "several", listed)


def test_a_set_of_models_is_counted_for_drift_in_the_executors(tmp_path: Path, spark: Any) -> None:
    from .test_many_models import _input, _models

    models = {k: v for k, v in _models().items() if k in ("churn", "value")}
    listed = [{"model": m, "prefix": k, "where": "a > 0" if k == "value" else None}
              for k, m in models.items()]  # fmt: skip
    frame = write_input(_input(models).drop(columns=["segment"]), tmp_path / "in", files=2)
    columns = {"churn": ["a", "b", "c"], "value": ["a", "e", "f"]}
    profiles = {k: reference_profile(m, import_model(m), frame[columns[k]]) for k, m in
                models.items()}  # fmt: skip
    reference = Profile(
        rows=len(frame), features={n: c for p in profiles.values() for n, c in p.features.items()},
        outputs={prefixed(k, n): c for k, p in profiles.items() for n, c in p.outputs.items()},
    )  # fmt: skip
    counted = {engine: scoring.score_parquet(tmp_path / "in", tmp_path / engine, listed,
                                             engine=engine, keep=["id"], progress=False,
                                             run=scoring.RunOptions(monitor=reference),
                                             ).drift_counts
               for engine in ("spark", "local")}  # fmt: skip
    assert counted["spark"] == counted["local"] and counted["local"] is not None
    inside = int((frame["a"] > 0).sum())
    assert sum(counted["local"]["output:value__prediction"]) == inside < len(frame)
    assert sum(counted["local"]["output:churn__probability"]) == len(frame)


def test_score_dataframe_writes_contributions_and_reasons(spark: Any, registry: Any) -> None:
    from scoring.spark import score_dataframe

    df, X = _features(spark, "xgb_clf")
    out = score_dataframe(df, "xgb_clf@1", keep=["id"], registry=registry,
                          outputs=["default", "contributions", "reasons=2"])  # fmt: skip
    names = [f"contrib_{c}" for c in [*X.columns, "bias"]]
    assert out.columns == ["id", "probability", "label", *names,
                           "reason_1", "reason_1_value", "reason_2", "reason_2_value"]  # fmt: skip
    frame = out.orderBy("id").toPandas()
    model = model_frame("xgb_clf", rows=10)[0]
    expected = scoring.compile(model, backend="tensor").predict_contributions(X)
    np.testing.assert_allclose(frame[names].to_numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["native", "tensor"])
def test_a_zero_row_file_among_others_on_spark(tmp_path: Path, spark: Any, backend: str) -> None:
    from .test_schema_drift import test_a_zero_row_file_among_others_is_scored_as_zero_rows

    test_a_zero_row_file_among_others_is_scored_as_zero_rows(tmp_path, backend, engine="spark")


def test_a_workers_error_reaches_the_command_as_its_one_line(tmp_path: Path) -> None:
    """A value the model refuses deep in a file (past the rows the driver checks): the
    Python worker raises, and ``scoring score --engine spark`` prints the product's one
    line and exits 6 (bad input), with no Java stack; ``--debug`` shows Spark's own."""
    import subprocess
    import sys

    from sklearn.ensemble import RandomForestClassifier

    from scoring._frameworks import dump_model

    rng = np.random.default_rng(5)
    X = pd.DataFrame(rng.normal(size=(4000, 3)).astype(np.float32), columns=["a", "b", "c"])
    forest = RandomForestClassifier(n_estimators=3, max_depth=3).fit(X, X.a > X.b)
    (tmp_path / "model.skops").write_bytes(dump_model(forest))
    X.loc[3900, "b"] = np.inf  # scikit-learn's float32 trees refuse it
    (tmp_path / "in").mkdir()
    X.to_parquet(tmp_path / "in" / "part-0.parquet")
    scoring_cli = str(Path(sys.executable).with_name("scoring"))
    args = [scoring_cli, "score", "--engine", "spark", "--spark-master", "local[1]", "--model",
            str(tmp_path / "model.skops"), "--input", str(tmp_path / "in"), "--output"]  # fmt: skip
    done = subprocess.run([*args, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 6, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("scoring score: ")]
    assert len(said) == 1 and "'b'" in said[0] and "inf" in said[0], done.stderr[-3000:]
    assert "at org.apache.spark" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    debug = subprocess.run([scoring_cli, "--debug", *args[1:], str(tmp_path / "out2")],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert debug.returncode != 0 and "at org.apache.spark" in debug.stderr


@pytest.mark.parametrize("name", ["xgb_clf", "xgb_multi"])
def test_predict_batch_udf_with_make_predict_fn(spark: Any, registry: Any, name: str) -> None:
    """Spark ML's batch inference recipe: ``predict_batch_udf(make_predict_fn(...))`` on
    the feature columns in order, and on one array column of them; a probability per row
    (binary) or an array per row (multiclass), as the native predictor gives them."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F

    from scoring.errors import ConfigError
    from scoring.spark import make_predict_fn

    df, X = _features(spark, name, rows=2000)
    make = make_predict_fn(f"{name}@1", registry=registry)
    score = predict_batch_udf(make, return_type=make.return_type, batch_size=700)
    features = list(X.columns)
    by_columns = df.select("id", score(*features).alias("p")).orderBy("id").toPandas()
    one = make_predict_fn(f"{name}@1", inputs="array", registry=registry)
    arrays = predict_batch_udf(one, return_type=one.return_type, batch_size=700,
                               input_tensor_shapes=[[len(features)]])  # fmt: skip
    by_array = df.select("id", arrays(F.array(*features)).alias("p")).orderBy("id").toPandas()
    ref = native_columns(name, X)
    classes = [v for c, v in ref.items() if c.startswith("probability_")]
    want = ref["probability"] if name == "xgb_clf" else np.column_stack(classes)
    for got in (by_columns, by_array):
        np.testing.assert_allclose(np.stack(got["p"].to_list()).reshape(want.shape), want,
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    labels = make_predict_fn(f"{name}@1", output="label", registry=registry)
    label = predict_batch_udf(labels, return_type=labels.return_type, batch_size=700)
    got_labels = df.select("id", label(*features).alias("y")).orderBy("id").toPandas()
    np.testing.assert_array_equal(got_labels["y"], ref["label"])
    with pytest.raises(ConfigError, match="register_udf"):
        make_predict_fn(f"{name}@1", output="all", registry=registry)
    with pytest.raises(ConfigError, match="'columns' or 'array'"):
        make_predict_fn(f"{name}@1", inputs="tensor", registry=registry)


def test_finished_tasks_advance_the_progress_while_the_job_runs() -> None:
    """The driver polls Spark's status tracker once a second while the write runs: a
    stage half done moves the bar by half the rows, and the end by the rest."""
    from types import SimpleNamespace

    from scoring._engines.spark import _with_progress

    polled = threading.Event()

    class Tracker:
        def getActiveStageIds(self) -> list[int]:
            return [7]

        def getStageInfo(self, stage: int) -> Any:
            polled.set()  # the write may end once the bar has been read
            return SimpleNamespace(numTasks=4, numCompletedTasks=2)

    context = SimpleNamespace(setJobGroup=lambda *a, **k: None, statusTracker=Tracker)
    fragments = [SimpleNamespace(rows=300), SimpleNamespace(rows=500)]
    run = SimpleNamespace(plan=SimpleNamespace(data=SimpleNamespace(fragments=fragments)))
    advanced: list[int] = []
    progress = SimpleNamespace(advance=advanced.append)
    _with_progress(SimpleNamespace(sparkContext=context), lambda: polled.wait(60), run, progress)
    assert advanced == [400, 400]

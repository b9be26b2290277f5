"""Delta Lake tables in and out (delta-rs; no JVM), on a local disk and on the S3 server
the tests run (moto).

In: a table's snapshot is pinned and recorded, partition values become columns, an
older version can be asked for, and a rerun after a kill reads the snapshot the killed
run read although the table moved on.  Out: one commit per run; killed at any point of
a run or its publication, a reader sees the table as it was, and the same command then
adds every input row exactly once in one new version; a second run appends, replaces
or refuses as its mode says.
"""

from __future__ import annotations

import shutil
import signal
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import scoring
from scoring.cli import app

from . import zygote

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
runner = CliRunner()
ROWS = 1800


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, pd.DataFrame]:
    """An XGBoost model file and its rows: an ``id``, features, a partition column."""
    import xgboost

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(ROWS, 3)), columns=["a", "b", "c"])
    X.iloc[::11, 2] = np.nan
    clf = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(X, (X.a + X.b > 0).astype(int))
    path = tmp_path_factory.mktemp("model") / "model.json"
    clf.save_model(path)
    X["region"] = np.where(X.index % 3 == 0, "eu", "us")
    X["id"] = np.arange(ROWS)
    return path, clf, X


def _table(path: Path, frame: pd.DataFrame, **kwargs: Any) -> None:
    frame = frame.reset_index(drop=True)  # a slice's index is no column of the table
    deltalake.write_deltalake(str(path), frame, partition_by=["region"], **kwargs)


def _appended(path: Path, frame: pd.DataFrame, commits: int) -> None:
    """``frame`` as a table of ``commits`` versions (several files per region)."""
    for part in np.array_split(np.arange(len(frame)), commits):
        _table(path, frame.iloc[part], mode="append")


def _expected(clf: Any, X: pd.DataFrame) -> np.ndarray:
    return np.asarray(clf.predict_proba(X[["a", "b", "c"]])[:, 1])


def _read(table: Path) -> pd.DataFrame:
    return deltalake.DeltaTable(str(table)).to_pandas().sort_values("id").reset_index(drop=True)


def test_delta_input_scores_its_snapshot_with_partition_columns(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    _appended(tmp_path / "in", X, 2)
    out = tmp_path / "out"
    report = scoring.score_parquet(tmp_path / "in", out, str(path), keep=["id", "region"],
                                   progress=False)  # fmt: skip
    assert report.rows == ROWS
    # The output mirrors the input's region=... folders: read it without partitioning.
    scored = pq.read_table(out, partitioning=None).to_pandas().sort_values("id")
    np.testing.assert_allclose(scored["probability"], _expected(clf, X), rtol=1e-6)
    assert (scored["region"].to_numpy() == X["region"].to_numpy()).all()
    manifest = (out / "_scoring_manifest.json").read_text()
    assert '"input_snapshot": {\n  "format": "delta",\n  "version": 1\n }' in manifest
    # An older version, asked for by number.
    older = scoring.score_parquet(scoring.Input(f"delta:{tmp_path / 'in'}", version=0),
                                  tmp_path / "v0", str(path), keep=["id"],
                                  progress=False)  # fmt: skip
    assert older.rows == ROWS // 2  # the first of its two versions
    # Or by time: the version current when the first was committed; none before it.
    first = min(h["timestamp"] for h in deltalake.DeltaTable(str(tmp_path / "in")).history())
    when = datetime.fromtimestamp(first / 1000, timezone.utc)
    at = scoring.score_parquet(scoring.Input(tmp_path / "in", version=when.isoformat()),
                               tmp_path / "at", str(path), keep=["id"],
                               progress=False)  # fmt: skip
    assert at.rows == ROWS // 2
    with pytest.raises(scoring.errors.InputFileError, match="has no version at"):
        earlier = (when - timedelta(days=1)).isoformat()
        scoring.score_parquet(scoring.Input(tmp_path / "in", version=earlier),
                              tmp_path / "before", str(path), progress=False)  # fmt: skip
    assert not (tmp_path / "before").exists()


def test_delta_output_appends_overwrites_or_refuses_as_its_mode_says(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    _table(tmp_path / "in", X)
    out = tmp_path / "scores"
    base = ["score", "--model", str(path), "--input", str(tmp_path / "in"), "--keep", "id",
            "--output", f"delta:{out}"]  # fmt: skip
    assert runner.invoke(app, base).exit_code == 0
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 0 and table.history()[0]["scoring.rows"] == ROWS
    np.testing.assert_allclose(_read(out)["probability"], _expected(clf, X), rtol=1e-6)

    refused = runner.invoke(app, base)
    assert refused.exit_code == 1
    assert "already exists; set the output mode to 'append'" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert deltalake.DeltaTable(str(out)).version() == 0

    assert runner.invoke(app, [*base, "--mode", "append"]).exit_code == 0
    assert deltalake.DeltaTable(str(out)).version() == 1 and len(_read(out)) == 2 * ROWS
    assert runner.invoke(app, [*base, "--mode", "overwrite"]).exit_code == 0
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 2 and len(_read(out)) == ROWS
    assert sorted(_read(out)["id"]) == list(range(ROWS))


def test_append_needs_a_delta_output(tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]) -> None:
    path, _, X = model
    _table(tmp_path / "in", X)
    command = ["score", "--model", str(path), "--input", str(tmp_path / "in"),
               "--output", str(tmp_path / "out"), "--mode", "append"]  # fmt: skip
    result = runner.invoke(app, command)
    assert result.exit_code == 2 and "needs a Delta output" in result.stderr  # usage


def test_a_delta_table_lacking_a_feature_is_one_line_and_nothing_is_written(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, _, X = model
    _table(tmp_path / "in", X.drop(columns=["b"]))
    out = tmp_path / "out"
    result = runner.invoke(app, ["score", "--model", str(path), "--input", str(tmp_path / "in"),
                                 "--output", f"delta:{out}"])  # fmt: skip
    assert result.exit_code == 6  # the input does not fit the model
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'b'" in lines[0], result.stderr
    assert not out.exists()


#: The ``scoring`` command, held at the given occurrence of a point (a file journaled,
#: a step of publication) until a signal stops it (bounded: a lost signal fails).
HELD_AT = """
import sys, threading
from scoring._engines import plan

target, wanted, seen = sys.argv[1], int(sys.argv[2]), {}
def hold(done):
    seen[done] = seen.get(done, 0) + 1
    if done == target and seen[done] == wanted:
        print("held", flush=True)
        if not threading.Event().wait(timeout=300):
            raise RuntimeError("no signal stopped the command")
plan.HOOKS = plan.Hooks(on_file_journaled=lambda entry: hold("journaled a file"),
                        on_publish_step=hold)
sys.argv = ["scoring", *sys.argv[3:]]
from scoring.cli import app
app()
"""

#: (point, occurrence, signal).  A file is journaled in the writer thread, which a
#: SIGTERM (raised in the main thread) cannot interrupt while it is held: SIGKILL there.
POINTS = [
    ("journaled a file", 1, signal.SIGKILL),
    ("journaled a file", 2, signal.SIGKILL),
    *[
        (point, occurrence, sent)
        for point, occurrence in [("placed a new file", 1), ("placed a new file", 3),
                                  ("committed the new table version", 1)]
        for sent in (signal.SIGKILL, signal.SIGTERM)
    ],
]  # fmt: skip


@pytest.mark.parametrize(("point", "occurrence", "sent"), POINTS)
def test_killed_anywhere_the_rerun_adds_every_row_once_in_one_version(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame], point: str, occurrence: int,
    sent: signal.Signals,
) -> None:  # fmt: skip
    path, clf, X = model
    source = tmp_path / "in"
    _appended(source, X, 3)
    out = tmp_path / "scores"
    _table(out, pd.DataFrame({"id": [-1], "probability": [0.5], "label": [0]}).assign(
        region="none"))  # version 0: an earlier run's rows  # fmt: skip
    command = ["score", "--model", str(path), "--input", str(source), "--keep", "id,region",
               "--output", f"delta:{out}", "--mode", "append"]  # fmt: skip
    child = zygote.popen(HELD_AT, point, str(occurrence), *command)
    assert child.stdout is not None
    assert child.stdout.readline() == "held\n", child.communicate()[1][-2000:]
    # A new version of the input while the run is stopped: the rerun reads the old one.
    _table(source, X.iloc[:5].assign(id=-5), mode="append")
    child.send_signal(sent)
    _, said = child.communicate()
    committed = point == "committed the new table version"
    table = deltalake.DeltaTable(str(out))
    assert table.version() == (1 if committed else 0)  # what readers see: all or nothing
    assert len(_read(out)) == (ROWS + 1 if committed else 1)
    if sent == signal.SIGTERM and not committed:
        assert "the same command" in said.strip().splitlines()[-1], said

    rerun = runner.invoke(app, command)
    assert rerun.exit_code == 0, rerun.output
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 1, "the rerun's rows are in one new version"
    rows = _read(out)
    assert list(rows["id"]) == [-1, *range(ROWS)], "every input row exactly once"
    np.testing.assert_allclose(rows["probability"][1:], _expected(clf, X), rtol=1e-6)
    assert not (out / "_temporary").exists()


def test_readers_see_no_partial_version_at_any_step(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader at each step of publication (the event) sees the table before or after."""
    from scoring._formats.publication import Publication

    path, _, X = model
    _appended(tmp_path / "in", X, 3)
    out = tmp_path / "scores"
    seen: list[tuple[str, int]] = []

    def step(self: Publication, done: str) -> None:
        rows = len(_read(out)) if deltalake.DeltaTable.is_deltatable(str(out)) else 0
        seen.append((done, rows))

    monkeypatch.setattr(Publication, "step", step)
    scoring.score_parquet(tmp_path / "in", f"delta:{out}", str(path), keep=["id"], progress=False)
    placed = [rows for done, rows in seen if done == "placed a new file"]
    assert placed == [0] * 6  # three commits of two regions: six files, none visible
    assert seen[-1] == ("committed the new table version", ROWS)


def test_the_table_is_read_by_deltalake_pandas_and_spark(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    _table(tmp_path / "in", X)
    out = tmp_path / "scores"
    scoring.score_parquet(tmp_path / "in", f"delta:{out}", str(path), keep=["id", "region"],
                          progress=False)  # fmt: skip
    table = deltalake.DeltaTable(str(out))
    frame = table.to_pandas()
    assert len(frame) == ROWS and frame["label"].dtype == np.int64
    arrow = table.to_pyarrow_table()
    assert arrow.schema.field("region").type == pa.string()
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime")
    from scoring.spark import local_session

    spark = local_session("local[1]", conf={"spark.sql.shuffle.partitions": "1"})
    # Spark's own Delta reader (delta-spark) loads its jars from Maven, which this
    # machine cannot reach: Spark reads the files of the table's current version.
    read = spark.read.parquet(*table.file_uris()).toPandas().sort_values("id")
    np.testing.assert_allclose(read["probability"], _expected(clf, X), rtol=1e-6)
    assert list(read["region"]) == list(X["region"])


def test_delta_in_and_out_on_s3(s3_bucket: str, tmp_path: Path,
                                model: tuple[Path, Any, pd.DataFrame]) -> None:  # fmt: skip
    from scoring._formats.delta import delta_storage_options

    path, clf, X = model
    source, out = f"{s3_bucket}/features", f"{s3_bucket}/scores"
    options = delta_storage_options(source)
    deltalake.write_deltalake(source, X, partition_by=["region"], storage_options=options)
    scoring.score_parquet(source, f"delta:{out}", str(path), keep=["id"], progress=False)
    scoring.score_parquet(source, scoring.Output(f"delta:{out}", mode="append"), str(path),
                          keep=["id"], progress=False)  # fmt: skip
    table = deltalake.DeltaTable(out, storage_options=options)
    assert table.version() == 1
    frame = table.to_pandas().sort_values(["id"]).reset_index(drop=True)
    assert list(frame["id"]) == sorted([*range(ROWS), *range(ROWS)])
    np.testing.assert_allclose(frame["probability"][::2], _expected(clf, X), rtol=1e-6)


def test_ray_engine_reads_and_writes_delta(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """Actors write the run's files (their journals name the run's folder); the
    driver commits them once."""
    ray = pytest.importorskip("ray")
    path, clf, X = model
    _appended(tmp_path / "in", X, 3)
    out = tmp_path / "scores"
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        report = scoring.score_parquet(tmp_path / "in", f"delta:{out}", str(path), engine="ray",
                                       keep=["id"], progress=False)  # fmt: skip
    finally:
        ray.shutdown()
    assert report.engine == "ray" and sum(report.workers.values()) == ROWS
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 0
    rows = _read(out)
    assert list(rows["id"]) == list(range(ROWS))
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_spark_engine_reads_and_writes_delta(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """Spark reads the snapshot's files and writes with its own committer; the driver
    adds Spark's files in one commit (no delta-spark needed)."""
    pytest.importorskip("pyspark")
    path, clf, X = model
    _appended(tmp_path / "in", X, 2)
    out = tmp_path / "scores"
    for mode in ("error", "append"):
        scoring.score_parquet(tmp_path / "in", scoring.Output(f"delta:{out}", mode=mode),
                              str(path), engine="spark", keep=["id", "region"], progress=False,
                              engine_options={"master": "local[1]"})  # fmt: skip
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 1
    rows = _read(out)
    assert list(rows["id"]) == sorted([*range(ROWS), *range(ROWS)])
    np.testing.assert_allclose(rows["probability"][::2], _expected(clf, X), rtol=1e-6)


def test_spark_s_own_delta_reader_reads_the_table(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """Where delta-spark is installed and its jars can be fetched, Spark's own Delta
    reader reads what was written."""
    pytest.importorskip("delta", reason="delta-spark is not installed (pip install delta-spark)")
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    path, _, X = model
    _table(tmp_path / "in", X)
    scoring.score_parquet(tmp_path / "in", f"delta:{tmp_path / 'out'}", str(path),
                          keep=["id"], progress=False)  # fmt: skip
    builder = SparkSession.builder.master("local[1]").config(
        "spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"
    )
    try:
        spark = configure_spark_with_delta_pip(builder).getOrCreate()
    except Exception as exc:  # its jars come from Maven Central
        pytest.skip(f"delta-spark's jars could not be fetched from Maven: {exc}")
    read = spark.read.format("delta").load(str(tmp_path / "out")).toPandas()
    spark.stop()
    assert sorted(read["id"]) == list(range(ROWS))


def test_a_job_file_appends_a_version_per_run(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, _, X = model
    _appended(tmp_path / "features", X.iloc[:1200], 2)
    job = tmp_path / "job.toml"
    job.write_text(
        f'name = "delta-job"\nmodel = "{path}"\ninput = "features/"\ninput_version = 0\n'
        'output = "delta:scores/"\nmode = "append"\nkeep = ["id"]\n'
        f'registry = "{tmp_path / "home"}"\n'
    )
    for run in range(2):
        result = runner.invoke(app, ["run", str(job)])
        assert result.exit_code == 0, result.output
        table = deltalake.DeltaTable(str(tmp_path / "scores"))
        assert table.version() == run
        assert table.history()[0]["scoring.input_version"] == 0  # the version asked for
    rows = _read(tmp_path / "scores")
    assert list(rows["id"]) == sorted([*range(600), *range(600)])

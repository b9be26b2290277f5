"""Apache Iceberg tables in and out (pyiceberg; no JVM), through a real SQL catalog on
SQLite with a local warehouse, and on the S3 server the tests run (moto).

In: a table's snapshot is pinned (the current one, a snapshot id, or a time) and
recorded; partition columns are the files' own; position deletes are applied; a rerun
after a kill reads the snapshot the killed run read although the table moved on.  Out:
one snapshot per run in one catalog commit, carrying the run's id; killed at any point
of a run or its publication, readers see the previous snapshot, and the same command
then adds every input row exactly once in one new snapshot; a second run appends,
replaces, replaces its partitions or refuses as its mode says; a schema the table cannot
take is refused by column before anything is written.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import scoring
from scoring.cli import app

from . import zygote
from .conftest import sql_catalog
from .test_delta import HELD_AT  # the command held at a point until a signal stops it

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
runner = CliRunner()
ROWS = 1200
DOCS = Path(__file__).parents[1] / "docs" / "iceberg.md"


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


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Catalog ``lab`` (:func:`tests.conftest.sql_catalog`)."""
    return sql_catalog("lab", tmp_path, monkeypatch)


def _table(catalog: Any, name: str, frame: pd.DataFrame, *, appends: int = 1) -> Any:
    """``frame`` as table ``sales.<name>``, partitioned by region, in ``appends``
    snapshots (several files per region)."""
    arrow = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    table = catalog.create_table(f"sales.{name}", schema=arrow.schema)
    with table.update_spec() as spec:
        spec.add_identity("region")
    for part in np.array_split(np.arange(len(frame)), appends):
        table.append(arrow.take(part))
    return catalog.load_table(f"sales.{name}")


def _expected(clf: Any, X: pd.DataFrame) -> np.ndarray:
    return np.asarray(clf.predict_proba(X[["a", "b", "c"]])[:, 1])


def _read(catalog: Any, name: str) -> pd.DataFrame:
    table = catalog.load_table(f"sales.{name}")
    return table.scan().to_pandas().sort_values("id").reset_index(drop=True)


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties)


def test_input_snapshot_is_pinned_current_by_id_or_by_time_and_recorded(
    catalog: Any, tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    table = _table(catalog, "features", X.iloc[:600])
    first = table.current_snapshot()
    between = datetime.now(timezone.utc)
    table.append(pa.Table.from_pandas(X.iloc[600:].reset_index(drop=True), preserve_index=False))
    latest = catalog.load_table("sales.features").current_snapshot()
    assert latest.snapshot_id != first.snapshot_id

    report = scoring.score_parquet("iceberg:lab.sales.features", "iceberg:lab.sales.scores",
                                   str(path), keep=["id", "region"], progress=False)  # fmt: skip
    assert report.rows == ROWS and report.output == "iceberg:lab.sales.scores"
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == list(range(ROWS))
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)
    assert list(rows["region"]) == list(X["region"])  # the partition column, as written
    written = catalog.load_table("sales.scores").current_snapshot()
    assert _summary(written)["scoring.input_version"] == str(latest.snapshot_id)
    assert _summary(written)["scoring.input"] == "iceberg:lab.sales.features"

    for version in (first.snapshot_id, str(first.snapshot_id), between.isoformat()):
        out = tmp_path / f"at-{len(list(tmp_path.iterdir()))}"
        report = scoring.score_parquet(
            scoring.Input("iceberg:lab.sales.features", version=version), out, str(path),
            keep=["id"], progress=False,
        )  # fmt: skip
        assert report.rows == 600, version
        manifest = json.loads((out / "_scoring_manifest.json").read_text())
        assert manifest["input_snapshot"] == {"format": "iceberg", "version": first.snapshot_id}

    metadata = catalog.load_table("sales.features").metadata_location  # no catalog needed
    report = scoring.score_parquet(f"iceberg:{metadata}", tmp_path / "static", str(path),
                                   keep=["id"], progress=False)  # fmt: skip
    assert report.rows == ROWS

    said = runner.invoke(app, ["score", "--model", str(path), "--input",
                               "iceberg:lab.sales.features", "--input-version", "2001-01-01",
                               "--output", str(tmp_path / "never")])  # fmt: skip
    assert said.exit_code == 1 and "has no snapshot at 2001-01-01" in said.stderr, said.output
    said = runner.invoke(app, ["score", "--model", str(path), "--input", "iceberg:lab.sales.nope",
                               "--output", str(tmp_path / "never")])  # fmt: skip
    assert said.exit_code == 1 and "no such table" in said.stderr, said.output
    assert not (tmp_path / "never").exists()


def test_output_appends_overwrites_replaces_partitions_or_refuses_as_its_mode_says(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    _table(catalog, "features", X, appends=2)
    eu = X[X.region == "eu"]
    _table(catalog, "eu", eu)

    def score(source: str, mode: str | None) -> None:
        out = scoring.Output("iceberg:lab.sales.scores", mode=mode, partition_by=["region"])
        scoring.score_parquet(f"iceberg:lab.sales.{source}", out, str(path),
                              keep=["id", "region"], progress=False)  # fmt: skip

    score("features", None)
    with pytest.raises(scoring.errors.OutputError, match="already holds data; set the output mode"):
        score("features", None)
    score("features", "append")
    assert list(_read(catalog, "scores")["id"]) == sorted([*range(ROWS), *range(ROWS)])
    score("features", "overwrite")
    assert list(_read(catalog, "scores")["id"]) == list(range(ROWS))
    score("eu", "overwrite_partitions")  # eu's rows replaced by eu's; us's kept
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == list(range(ROWS))
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)
    table = catalog.load_table("sales.scores")
    operations = [s.summary.operation.value for s in table.snapshots()]
    assert operations == ["append", "append", "overwrite", "overwrite"]  # one per run
    assert len({_summary(s)["scoring.run"] for s in table.snapshots()}) == 4
    assert [str(f.name) for f in table.spec().fields] == ["region"]


def test_a_schema_the_table_cannot_take_is_refused_by_column_before_writing(
    catalog: Any, tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, _, X = model
    _table(catalog, "features", X)
    strings = pa.schema([("id", pa.int64()), ("probability", pa.string()), ("label", pa.int64())])
    catalog.create_table("sales.scores", schema=strings)
    command = ["score", "--model", str(path), "--input", "iceberg:lab.sales.features",
               "--keep", "id", "--output", "iceberg:lab.sales.scores",
               "--mode", "append"]  # fmt: skip
    said = runner.invoke(app, command)
    assert said.exit_code == 1, said.output
    lines = said.stderr.strip().splitlines()
    assert len(lines) == 1 and "column 'probability' is string" in lines[0], said.stderr
    table = catalog.load_table("sales.scores")
    assert table.current_snapshot() is None
    assert not list(Path(table.location().removeprefix("file://")).glob("data/**/*.parquet"))
    catalog.create_table("sales.other", schema=pa.schema([("id", pa.int64())]))
    said = runner.invoke(app, [*command[:-3], "iceberg:lab.sales.other", "--mode", "append"])
    assert said.exit_code == 1 and "has no column 'probability'" in said.stderr, said.output
    # A table created empty ahead of the run, with the run's columns: mode error writes it.
    ready = pa.schema([("id", pa.int64()), ("probability", pa.float64()), ("label", pa.int64())])
    catalog.create_table("sales.ready", schema=ready)
    said = runner.invoke(app, [*command[:-3], "iceberg:lab.sales.ready"])
    assert said.exit_code == 0, said.output
    assert len(_read(catalog, "ready")) == ROWS


#: (point, occurrence, signal).  A file is journaled in the writer thread, which a
#: SIGTERM (raised in the main thread) cannot interrupt while it is held: SIGKILL there.
POINTS = [
    ("journaled a file", 1, signal.SIGKILL),
    ("journaled a file", 3, signal.SIGKILL),
    *[
        (point, occurrence, sent)
        for point, occurrence in [("placed a new file", 1), ("placed a new file", 3),
                                  ("committed the new table snapshot", 1)]
        for sent in (signal.SIGKILL, signal.SIGTERM)
    ],
]  # fmt: skip


@pytest.mark.parametrize(("point", "occurrence", "sent"), POINTS)
def test_killed_anywhere_the_rerun_adds_every_row_once_in_one_snapshot(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame], point: str, occurrence: int,
    sent: signal.Signals,
) -> None:  # fmt: skip
    path, clf, X = model
    source = _table(catalog, "features", X, appends=2)
    earlier = pa.table({"id": [-1], "probability": [0.5], "label": [0], "region": ["none"]})
    catalog.create_table("sales.scores", schema=earlier.schema).append(earlier)
    command = ["score", "--model", str(path), "--input", "iceberg:lab.sales.features",
               "--keep", "id,region", "--output", "iceberg:lab.sales.scores",
               "--mode", "append"]  # fmt: skip
    child = zygote.popen(HELD_AT, point, str(occurrence), *command)
    assert child.stdout is not None
    assert child.stdout.readline() == "held\n", child.communicate()[1][-2000:]
    # A new snapshot of the input while the run is stopped: the rerun reads the old one.
    source.append(pa.Table.from_pandas(X.iloc[:5].assign(id=-5), preserve_index=False))
    child.send_signal(sent)
    _, said = child.communicate()
    committed = point == "committed the new table snapshot"
    table = catalog.load_table("sales.scores")
    assert len(table.snapshots()) == (2 if committed else 1)  # what readers see
    assert len(_read(catalog, "scores")) == (ROWS + 1 if committed else 1)
    if sent == signal.SIGTERM and not committed:
        assert "the same command" in said.strip().splitlines()[-1], said

    rerun = runner.invoke(app, command)
    assert rerun.exit_code == 0, rerun.output
    table = catalog.load_table("sales.scores")
    assert len(table.snapshots()) == 2, "the rerun's rows are in one new snapshot"
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == [-1, *range(ROWS)], "every input row exactly once"
    np.testing.assert_allclose(rows["probability"][1:], _expected(clf, X), rtol=1e-6)
    assert not Path(table.location().removeprefix("file://"), "_temporary").exists()


@pytest.mark.parametrize(
    "point", ["journaled a file", "placed a new file", "committed the new table snapshot"]
)
def test_a_rerun_with_another_mode_after_a_kill_commits_once_with_its_own(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame], point: str
) -> None:
    """Killed in mode append, rerun in mode overwrite: the staged files are resumed and
    committed once with the rerun's mode; killed after the commit, nothing is redone."""
    path, clf, X = model
    _table(catalog, "features", X, appends=2)
    earlier = pa.table({"id": [-1], "probability": [0.5], "label": [0], "region": ["none"]})
    catalog.create_table("sales.scores", schema=earlier.schema).append(earlier)
    command = ["score", "--model", str(path), "--input", "iceberg:lab.sales.features",
               "--keep", "id,region", "--output", "iceberg:lab.sales.scores"]  # fmt: skip
    child = zygote.popen(HELD_AT, point, "1", *command, "--mode", "append")
    assert child.stdout is not None
    assert child.stdout.readline() == "held\n", child.communicate()[1][-2000:]
    child.kill()
    child.communicate()
    rerun = runner.invoke(app, [*command, "--mode", "overwrite"])
    assert rerun.exit_code == 0, rerun.output
    table = catalog.load_table("sales.scores")
    assert len(table.snapshots()) == 2, "one snapshot for the run, whichever process made it"
    rows = _read(catalog, "scores")
    committed = point == "committed the new table snapshot"
    assert list(rows["id"]) == ([-1] if committed else []) + list(range(ROWS))
    np.testing.assert_allclose(rows["probability"][-ROWS:], _expected(clf, X), rtol=1e-6)


def test_readers_see_the_previous_snapshot_at_every_step(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader at each step of publication (the event) sees the table before or after."""
    from scoring._formats.publication import Publication

    path, _, X = model
    _table(catalog, "features", X, appends=3)
    seen: list[tuple[str, int]] = []

    def step(self: Publication, done: str) -> None:
        exists = catalog.table_exists("sales.scores")
        seen.append((done, len(_read(catalog, "scores")) if exists else -1))

    monkeypatch.setattr(Publication, "step", step)
    scoring.score_parquet("iceberg:lab.sales.features", "iceberg:lab.sales.scores", str(path),
                          keep=["id"], progress=False)  # fmt: skip
    placed = [rows for done, rows in seen if done == "placed a new file"]
    assert placed == [-1] * 6  # three snapshots of two regions: six files, no table yet
    assert seen[-1] == ("committed the new table snapshot", ROWS)


def test_position_deletes_are_applied(
    catalog: Any, tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """Rows a position delete file removes are not scored (a table written by an engine
    with merge-on-read deletes: pyiceberg reads them, the product must too)."""
    path, clf, X = model
    table = _table(catalog, "features", X)
    gone = _delete_positions(table, lambda frame: frame["id"] % 7 == 0)
    expected = table.scan().to_pandas()
    assert len(expected) == ROWS - gone > 0
    report = scoring.score_parquet("iceberg:lab.sales.features", tmp_path / "out", str(path),
                                   keep=["id"], progress=False)  # fmt: skip
    assert report.rows == ROWS - gone
    rows = pd.read_parquet(tmp_path / "out").sort_values("id")
    kept = X[X["id"] % 7 != 0]
    assert list(rows["id"]) == list(kept["id"])
    np.testing.assert_allclose(rows["probability"], _expected(clf, kept), rtol=1e-6)
    if shutil.which("java") is None or importlib.util.find_spec("pyspark") is None:
        return
    with pytest.raises(scoring.errors.InputError, match="position deletes, which Spark"):
        scoring.score_parquet("iceberg:lab.sales.features", tmp_path / "spark", str(path),
                              engine="spark", keep=["id"], progress=False,
                              engine_options={"master": "local[1]"})  # fmt: skip


def _delete_positions(table: Any, doomed: Any) -> int:
    """Position delete files (one per data file) for the rows ``doomed`` picks, added in
    a snapshot as an engine with merge-on-read deletes writes them (pyiceberg itself
    rewrites files instead: its manifest writer is told to write delete content here)."""
    import pyarrow.parquet as pq
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
    )
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    location = table.location().removeprefix("file://")
    deletes, count = [], 0
    for task in table.scan().plan_files():
        local = task.file.file_path.removeprefix("file://")
        frame = pq.read_table(local).to_pandas()
        positions = np.flatnonzero(doomed(frame).to_numpy())
        if not len(positions):
            continue
        count += len(positions)
        target = f"{location}/data/deletes-{len(deletes)}.parquet"
        pq.write_table(pa.table({"file_path": [task.file.file_path] * len(positions),
                                 "pos": pa.array(positions, pa.int64())}), target)  # fmt: skip
        deletes.append((f"file://{target}", task.file.partition, len(positions)))

    class DeleteWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class AddDeletes(_FastAppendFiles):
        def _manifests(self) -> list[Any]:
            existing = self._existing_manifests()
            output = self.new_manifest_output()
            meta = self._transaction.table_metadata
            with DeleteWriter(meta.spec(), meta.schema(), output, self._snapshot_id,
                              "deflate") as writer:  # fmt: skip
                for location_, partition, rows in deletes:
                    data_file = DataFile.from_args(
                        content=DataFileContent.POSITION_DELETES, file_path=location_,
                        file_format=FileFormat.PARQUET, partition=partition, record_count=rows,
                        file_size_in_bytes=Path(location_.removeprefix("file://")).stat().st_size,
                    )  # fmt: skip
                    data_file.spec_id = meta.default_spec_id
                    writer.add(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                        data_file=data_file))  # fmt: skip
            return [writer.to_manifest_file(), *existing]

    with (
        table.transaction() as txn,
        AddDeletes(
            operation=_delete_operation(), transaction=txn, io=table.io, snapshot_properties={}
        ),
    ):
        pass  # the producer commits its snapshot on the way out
    return count


def _delete_operation() -> Any:
    from pyiceberg.table.snapshots import Operation

    return Operation.DELETE


def test_the_table_is_read_by_pyiceberg_and_by_duckdb_from_the_snapshot_files(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    duckdb = pytest.importorskip("duckdb")
    path, clf, X = model
    _table(catalog, "features", X)
    scoring.score_parquet("iceberg:lab.sales.features", "iceberg:lab.sales.scores", str(path),
                          keep=["id", "region"], progress=False)  # fmt: skip
    table = catalog.load_table("sales.scores")
    frame = table.scan().to_pandas()
    assert len(frame) == ROWS and frame["label"].dtype == np.int64
    files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    read = duckdb.sql(f"SELECT * FROM read_parquet({files!r}) ORDER BY id").df()
    np.testing.assert_allclose(read["probability"], _expected(clf, X), rtol=1e-6)
    assert list(read["region"]) == list(X["region"])


def test_ray_engine_reads_and_writes_iceberg(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actors write the run's files; the driver commits them in one snapshot."""
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_worker_niceness", "0")
    path, clf, X = model
    _table(catalog, "features", X, appends=3)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        report = scoring.score_parquet(
            "iceberg:lab.sales.features", "iceberg:lab.sales.scores", str(path),
            engine="ray", keep=["id"], progress=False,
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert report.engine == "ray" and sum(report.workers.values()) == ROWS
    assert len(catalog.load_table("sales.scores").snapshots()) == 1
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == list(range(ROWS))
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_spark_engine_reads_and_writes_iceberg(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """Spark reads the snapshot's files and writes with its own committer; the driver
    adds Spark's files in one snapshot (no Iceberg Spark runtime needed)."""
    pytest.importorskip("pyspark")
    path, clf, X = model
    _table(catalog, "features", X, appends=2)
    for mode in ("error", "append"):
        scoring.score_parquet("iceberg:lab.sales.features",
                              scoring.Output("iceberg:lab.sales.scores", mode=mode), str(path),
                              engine="spark", keep=["id", "region"], progress=False,
                              engine_options={"master": "local[1]"})  # fmt: skip
    assert len(catalog.load_table("sales.scores").snapshots()) == 2
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == sorted([*range(ROWS), *range(ROWS)])
    np.testing.assert_allclose(rows["probability"][::2], _expected(clf, X), rtol=1e-6)
    assert list(rows["region"][::2]) == list(X["region"])


def test_iceberg_in_and_out_on_s3(
    s3_bucket: str, tmp_path: Path, model: tuple[Path, Any, pd.DataFrame],
    monkeypatch: pytest.MonkeyPatch, s3_server: str,
) -> None:  # fmt: skip
    from pyiceberg.catalog import load_catalog

    settings = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path}/catalog.db",
                "WAREHOUSE": f"{s3_bucket}/warehouse", "S3__ENDPOINT": s3_server,
                "S3__ACCESS-KEY-ID": "testing", "S3__SECRET-ACCESS-KEY": "testing",
                "S3__REGION": "us-east-1"}  # fmt: skip
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__LAKE__{key}", value)
    lake = load_catalog("lake", **{k.lower().replace("__", "."): v for k, v in settings.items()})
    lake.create_namespace("sales")
    path, clf, X = model
    _table(lake, "features", X, appends=2)
    scoring.score_parquet("iceberg:lake.sales.features", "iceberg:lake.sales.scores", str(path),
                          keep=["id"], progress=False)  # fmt: skip
    rows = _read(lake, "scores")
    assert list(rows["id"]) == list(range(ROWS))
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)
    assert lake.load_table("sales.scores").location().startswith(s3_bucket)


def test_the_docs_job_file_reads_and_writes_iceberg(
    catalog: Any, tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    """docs/iceberg.md's job file, run twice as written (its catalog, model and key
    column this test's): one snapshot per run, each recording the input snapshot read."""
    path, _, X = model
    source = _table(catalog, "features", X.iloc[:600])
    text = re.search(r"```toml\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert text is not None
    job = tmp_path / "job.toml"
    job.write_text(
        text.group(1).replace("iceberg:lake.", "iceberg:lab.").replace("customer_id", "id")
        .replace('"churn@production"', f'"{path}"') + f'registry = "{tmp_path / "home"}"\n'
    )  # fmt: skip
    for run in range(2):
        result = runner.invoke(app, ["run", str(job)])
        assert result.exit_code == 0, result.output
        table = catalog.load_table("sales.scores")
        assert len(table.snapshots()) == run + 1
        pinned = _summary(table.current_snapshot())["scoring.input_version"]
        assert pinned == str(catalog.load_table("sales.features").current_snapshot().snapshot_id)
        source.append(pa.Table.from_pandas(X.iloc[600:900], preserve_index=False))
    assert len(_read(catalog, "scores")) == 600 + 900
    assert [f.name for f in table.spec().fields] == ["region"]
    assert Path(table.location().removeprefix("file://"), "_scoring_report.json").exists()
    # The page's reader, on this catalog: DuckDB over the snapshot's files.
    read = re.search(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert read is not None and 'load_catalog("lake")' in read.group(1)
    # pyiceberg reads its configuration once per process: the test's own catalog object.
    code = read.group(1).replace("from pyiceberg.catalog import load_catalog\n", "")
    exec(code, {"load_catalog": {"lake": catalog}.__getitem__})


def test_incremental_runs_follow_appended_snapshots_and_refuse_other_ones(
    catalog: Any, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path, clf, X = model
    source = _table(catalog, "features", X.iloc[:600])

    def run() -> scoring.ScoreReport:
        return scoring.score_parquet(
            scoring.Input("iceberg:lab.sales.features", incremental=True),
            "iceberg:lab.sales.scores", str(path), keep=["id"], progress=False,
        )  # fmt: skip

    assert run().changes["kind"] == "full"
    read = catalog.load_table("sales.features").current_snapshot().snapshot_id
    source.append(pa.Table.from_pandas(X.iloc[600:900], preserve_index=False))
    source.append(pa.Table.from_pandas(X.iloc[900:], preserve_index=False))
    report = run()
    assert report.changes["kind"] == "incremental" and report.rows == ROWS - 600
    # The snapshots it names are the table's own (ids are not counted: none is id + 1).
    now = catalog.load_table("sales.features").current_snapshot().snapshot_id
    assert f"(input snapshot {now}, after snapshot {read})" in report.changes["said"]
    assert run().changes["kind"] == "none"
    rows = _read(catalog, "scores")
    assert list(rows["id"]) == list(range(ROWS)), "each row once"
    np.testing.assert_allclose(rows["probability"], _expected(clf, X), rtol=1e-6)
    catalog.load_table("sales.features").delete("id < 10")
    with pytest.raises(
        scoring.errors.InputError, match=r"snapshot \d+ \((delete|overwrite)\).*appended"
    ):
        run()


def test_import_and_help_do_not_import_pyiceberg() -> None:
    code = (
        "import sys, scoring\nfrom scoring.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('pyiceberg' in sys.modules)"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert said.stdout.strip().splitlines()[-1] == "False"


def test_a_missing_catalog_or_a_bad_name_is_one_line(
    tmp_path: Path, model: tuple[Path, Any, pd.DataFrame]
) -> None:
    path = str(model[0])
    for name, says in [("iceberg:nowhere.sales.x", "catalog 'nowhere' is not configured"),
                       ("iceberg:sales.x", "iceberg:CATALOG.NAMESPACE.TABLE")]:  # fmt: skip
        said = runner.invoke(app, ["score", "--model", path, "--input", name,
                                   "--output", str(tmp_path / "out")])  # fmt: skip
        assert said.exit_code != 0 and says in said.stderr, said.output
        assert len(said.stderr.strip().splitlines()) == 1, said.stderr

"""Incremental runs: only what changed since the output's last complete run is scored,
and the output then equals a full rescoring of the latest input, row for row.

Parquet folders (new files; changed and deleted ones refused by name or rescored),
Delta tables with and without the change data feed (appends, updates, deletes; a Delta
output merged on the key), a new model giving a full run, a kill at each step then the
same command, and every engine.
"""

from __future__ import annotations

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
from scoring.errors import ConfigError, InputError, OutputError

from . import zygote
from .test_delta import HELD_AT  # the command held at a point until a signal stops it

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
FEATURES = ["a", "b", "c"]
FEED = {"delta.enableChangeDataFeed": "true"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any, Any]:
    """Two XGBoost model files (a first version and a retrained one) and their models."""
    import xgboost

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(600, 3)), columns=FEATURES)
    y = (X.a + X.b > 0).astype(int)
    folder = tmp_path_factory.mktemp("models")
    first = xgboost.XGBClassifier(n_estimators=8, max_depth=3).fit(X, y)
    second = xgboost.XGBClassifier(n_estimators=12, max_depth=4).fit(X, y)
    first.save_model(folder / "v1.json")
    second.save_model(folder / "v2.json")
    return folder / "v1.json", folder / "v2.json", first, second


def _rows(start: int, n: int, *, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed + start)
    frame = pd.DataFrame(rng.normal(size=(n, 3)), columns=FEATURES)
    frame.iloc[::7, 1] = np.nan
    frame["id"] = np.arange(start, start + n)
    frame["region"] = np.where(frame.id % 2 == 0, "eu", "us")
    return frame


def _write(folder: Path, name: str, frame: pd.DataFrame) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / name)


def _score(source: Any, out: Any, model: Path, **kwargs: Any) -> scoring.ScoreReport:
    incremental = kwargs.pop("incremental", True)
    on_changed = kwargs.pop("on_changed", "refuse")
    key = kwargs.pop("key", ())
    target = out if isinstance(out, scoring.Output) else scoring.Output(str(out), key=key)
    return scoring.score_parquet(
        scoring.Input(str(source), incremental=incremental, on_changed=on_changed), target,
        str(model), keep=["id", "region"], progress=False, **kwargs,
    )  # fmt: skip


def _output(out: Path) -> pd.DataFrame:
    if (out / "_delta_log").exists():
        frame = deltalake.DeltaTable(str(out)).to_pandas()
    else:
        frame = pd.read_parquet(out)
    return frame.sort_values("id").reset_index(drop=True)


def _expected(clf: Any, frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values("id").reset_index(drop=True)
    return pd.DataFrame({"id": frame.id, "p": clf.predict_proba(frame[FEATURES])[:, 1]})


def _same(out: Path, clf: Any, latest: pd.DataFrame) -> None:
    """The output holds each row of ``latest`` once, with the model's score."""
    got = _output(out)
    want = _expected(clf, latest)
    assert got.id.tolist() == want.id.tolist()
    np.testing.assert_allclose(got.probability.to_numpy(), want.p.to_numpy(), rtol=1e-6,
                               atol=1e-7)  # fmt: skip


# -- Parquet folders --------------------------------------------------------------------


def test_folder_new_files_only_then_the_output_equals_a_full_run(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _write(source, "day1.parquet", _rows(0, 300))
    first = _score(source, out, v1)
    assert first.changes is not None and first.changes["kind"] == "full"
    assert "no earlier run" in first.changes["reason"]
    _write(source, "day2.parquet", _rows(300, 200))
    second = _score(source, out, v1)
    assert second.changes is not None and second.changes["kind"] == "incremental"
    assert (second.rows, second.changes["inserted"], second.changes["input_rows"]) == (
        200, 200, 500)  # fmt: skip
    assert "incremental" in second.summary() and "200 rows inserted" in second.summary()
    _same(out, clf, pd.concat([_rows(0, 300), _rows(300, 200)]))
    again = _score(source, out, v1)
    assert again.rows == 0 and again.changes is not None and again.changes["kind"] == "none"
    assert "nothing changed" in again.summary()
    assert not (out / "_temporary").exists(), "a run with nothing to do leaves no staging"


def test_folder_changed_or_deleted_file_is_refused_by_name_or_rescored(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _write(source, "day1.parquet", _rows(0, 300))
    _write(source, "day2.parquet", _rows(300, 100))
    _score(source, out, v1)
    changed = _rows(0, 300, seed=9)
    _write(source, "day1.parquet", changed)
    with pytest.raises(InputError, match=r"'day1.parquet' changed .* on_changed = 'rescore'"):
        _score(source, out, v1)
    report = _score(source, out, v1, on_changed="rescore")
    assert report.rows == 300 and report.changes["updated"] == 300  # type: ignore[index]
    _same(out, clf, pd.concat([changed, _rows(300, 100)]))
    (source / "day2.parquet").unlink()
    with pytest.raises(InputError, match=r"'day2.parquet' is gone"):
        _score(source, out, v1)
    report = _score(source, out, v1, on_changed="rescore")
    assert report.changes["deleted"] == 100  # type: ignore[index]
    _same(out, clf, changed)
    assert not (out / "day2.parquet").exists()


@pytest.mark.parametrize("how", ["cp -p", "same footer"])
def test_a_file_rewritten_at_its_size_with_its_old_mtime_is_seen_changed(
    tmp_path: Path, models: tuple[Path, Path, Any, Any], how: str
) -> None:
    """What ``cp -p``, ``tar`` and ``rsync -t`` leave: new rows at the old size, the old
    modification time restored.  The footer tells it (other statistics); where even the
    footer is the same (uncompressed, one row's value changed inside the min and max),
    the file's change time does."""
    import os
    import shutil

    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    first = _rows(0, 300)
    pq.write_table(pa.Table.from_pandas(first, preserve_index=False), tmp_path / "day1.parquet",
                   compression="none", use_dictionary=False)  # fmt: skip
    source.mkdir()
    shutil.copy2(tmp_path / "day1.parquet", source / "day1.parquet")
    _score(source, out, v1)
    changed = _rows(0, 300, seed=9) if how == "cp -p" else first.assign(
        a=first.a.where(first.index != 5, first.a.median()))  # fmt: skip
    pq.write_table(pa.Table.from_pandas(changed, preserve_index=False), tmp_path / "new.parquet",
                   compression="none", use_dictionary=False)  # fmt: skip
    assert (tmp_path / "new.parquet").stat().st_size == (source / "day1.parquet").stat().st_size
    was = (source / "day1.parquet").stat()
    shutil.copyfile(tmp_path / "new.parquet", source / "day1.parquet")
    os.utime(source / "day1.parquet", ns=(was.st_atime_ns, was.st_mtime_ns))
    with pytest.raises(InputError, match=r"'day1.parquet' changed"):
        _score(source, out, v1)
    _score(source, out, v1, on_changed="rescore")
    _same(out, clf, changed)


def test_a_new_model_version_makes_a_full_run_and_says_why(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, v2, _, clf2 = models
    source, out = tmp_path / "in", tmp_path / "out"
    _write(source, "day1.parquet", _rows(0, 300))
    _score(source, out, v1)
    _write(source, "day2.parquet", _rows(300, 100))
    report = _score(source, out, v2)
    assert report.changes["kind"] == "full"  # type: ignore[index]
    assert "model" in report.changes["reason"]  # type: ignore[index]
    assert report.rows == 400
    _same(out, clf2, pd.concat([_rows(0, 300), _rows(300, 100)]))


# -- Delta tables -------------------------------------------------------------------------


def _delta(path: Path, frame: pd.DataFrame, **kwargs: Any) -> None:
    deltalake.write_deltalake(str(path), frame.reset_index(drop=True), **kwargs)


def test_delta_feed_inserts_updates_deletes_merge_into_a_delta_output(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _delta(source, _rows(0, 400), configuration=FEED)
    first = _score(source, scoring.Output(f"delta:{out}", key=["id"]), v1)
    assert first.changes["kind"] == "full"  # type: ignore[index]
    table = deltalake.DeltaTable(str(source))
    table.delete("id < 50")
    table.update(predicate="id >= 100 AND id < 130", updates={"a": "a + 1.0"})
    _delta(source, _rows(400, 60), mode="append")
    report = _score(source, scoring.Output(f"delta:{out}", key=["id"]), v1)
    changes = report.changes
    assert changes is not None and changes["kind"] == "incremental"
    assert (changes["inserted"], changes["updated"], changes["deleted"]) == (60, 30, 50)
    assert (changes["since"], changes["until"]) == (0, 3)
    assert report.rows == 90
    latest = deltalake.DeltaTable(str(source)).to_pandas()
    _same(out, clf, latest)
    commits = deltalake.DeltaTable(str(out)).history()
    assert commits[0]["operation"] == "MERGE" and int(commits[0]["scoring.input_version"]) == 3


def test_delta_without_the_feed_follows_appends_and_refuses_a_delete_by_name(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _delta(source, _rows(0, 300))
    _score(source, out, v1)
    _delta(source, _rows(300, 50), mode="append")
    deltalake.DeltaTable(str(source)).optimize.compact()  # changes no data: skipped
    report = _score(source, out, v1)
    assert report.rows == 50 and report.changes["inserted"] == 50  # type: ignore[index]
    _same(out, clf, pd.concat([_rows(0, 300), _rows(300, 50)]))
    deltalake.DeltaTable(str(source)).delete("id < 10")
    with pytest.raises(
        InputError,
        match=r"version 3 removed or rewrote rows \(DELETE\).*"
        r"delta.enableChangeDataFeed = true",
    ):
        _score(source, out, v1)


def test_incremental_options_refused_by_name(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1 = models[0]
    source = tmp_path / "in"
    _write(source, "day1.parquet", _rows(0, 10))
    with pytest.raises(ConfigError, match="key columns merge a Delta output"):
        _score(source, tmp_path / "out", v1, key=["id"])
    with pytest.raises(ConfigError, match="key column 'x' must be a kept column"):
        _score(source, scoring.Output(f"delta:{tmp_path / 'o'}", key=["x"]), v1)
    with pytest.raises(ConfigError, match="on_changed 'later'"):
        _score(source, tmp_path / "out", v1, on_changed="later")
    with pytest.raises(ConfigError, match="drop mode 'append'"):
        _score(source, scoring.Output(f"delta:{tmp_path / 'o'}", mode="append"), v1)
    foreign = tmp_path / "foreign"
    _delta(foreign, _rows(0, 5))
    with pytest.raises(OutputError, match="holds no run of scoring's"):
        _score(source, scoring.Output(f"delta:{foreign}"), v1)


# -- a kill at each step, then the same command -----------------------------------------


def _held(point: str, occurrence: int, sent: int, command: list[str]) -> str:
    """Run ``command`` held at ``point``, stop it with ``sent``; what it said."""
    child = zygote.popen(HELD_AT, point, str(occurrence), *command)
    assert child.stdout is not None
    assert child.stdout.readline() == "held\n", child.communicate()[1][-2000:]
    child.send_signal(sent)
    return child.communicate()[1]


def _published(out: Path) -> pd.DataFrame:
    """What a reader of the folder's manifest sees."""
    from scoring._journal.manifest import MANIFEST, Manifest

    manifest = Manifest.from_json((out / MANIFEST).read_bytes())
    frames = [pd.read_parquet(out / f.output) for f in manifest.published()]
    return pd.concat(frames).sort_values("id").reset_index(drop=True)


FOLDER_POINTS = [
    ("journaled a file", 1, 9), ("journaled a file", 2, 9),
    ("unmarked the previous run", 1, 9), ("placed a new file", 1, 15),
    ("placed a new file", 3, 9), ("wrote the new manifest", 1, 9),
    ("marked the output complete", 1, 9),
]  # fmt: skip


@pytest.mark.parametrize(("point", "occurrence", "sent"), FOLDER_POINTS)
def test_folder_run_killed_at_each_step_then_rerun_scores_each_new_row_once(
    tmp_path: Path, models: tuple[Path, Path, Any, Any], point: str, occurrence: int, sent: int
) -> None:  # fmt: skip
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _write(source, "day1.parquet", _rows(0, 300))
    _score(source, out, v1)
    earlier = (out / "day1.parquet").read_bytes()
    for day in range(3):
        _write(source, f"day{day + 2}.parquet", _rows(300 + 100 * day, 100))
    command = ["score", "--model", str(v1), "--input", str(source), "--output", str(out),
               "--keep", "id,region", "--incremental"]  # fmt: skip
    _held(point, occurrence, sent, command)
    seen = _published(out).id.tolist()  # the last run, or this one: never a mix
    assert seen in (list(range(300)), list(range(600))), point

    rerun = CliRunner().invoke(app, command)
    assert rerun.exit_code == 0, rerun.output
    _same(out, clf, pd.concat([_rows(0, 300), *(_rows(300 + 100 * d, 100) for d in range(3))]))
    assert (out / "day1.parquet").read_bytes() == earlier, "the earlier rows untouched"
    assert (out / "_SUCCESS").exists() and not (out / "_temporary").exists()


DELTA_POINTS = [("journaled a file", 1, 9), ("committed the new table version", 1, 9),
                ("committed the new table version", 1, 15)]  # fmt: skip


@pytest.mark.parametrize(("point", "occurrence", "sent"), DELTA_POINTS)
def test_delta_merge_killed_at_each_step_then_rerun_changes_each_row_once(
    tmp_path: Path, models: tuple[Path, Path, Any, Any], point: str, occurrence: int, sent: int
) -> None:  # fmt: skip
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _delta(source, _rows(0, 400), partition_by=["region"], configuration=FEED)
    command = ["score", "--model", str(v1), "--input", str(source), "--output", f"delta:{out}",
               "--keep", "id,region", "--incremental", "--key", "id"]  # fmt: skip
    assert CliRunner().invoke(app, command).exit_code == 0
    table = deltalake.DeltaTable(str(source))
    table.delete("id < 40")
    table.update(predicate="id >= 200 AND id < 220", updates={"a": "a - 1.0"})
    _delta(source, _rows(400, 90), mode="append")
    _held(point, occurrence, sent, command)
    committed = point.startswith("committed")
    assert deltalake.DeltaTable(str(out)).version() == (1 if committed else 0)

    rerun = CliRunner().invoke(app, command)
    assert rerun.exit_code == 0, rerun.output
    assert deltalake.DeltaTable(str(out)).version() == 1, "the changes in one new version"
    _same(out, clf, deltalake.DeltaTable(str(source)).to_pandas())
    assert not (out / "_temporary").exists()


# -- a job file, and the planner's estimate of the increment ------------------------------


def test_a_job_file_plans_and_runs_the_increment(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    import json

    from scoring.jobs import load_job, make_plan, run_job

    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _delta(source, _rows(0, 500), configuration=FEED)
    values = {"name": "nightly", "model": str(v1), "input": str(source),
              "output": f"delta:{out}", "keep": ["id", "region"], "incremental": True,
              "key": ["id"], "registry": str(tmp_path / "registry")}  # fmt: skip
    job = tmp_path / "job.toml"
    job.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    spec = load_job(job)
    plan = make_plan(spec)
    assert plan.rows == 500 and plan.changes is not None and plan.changes["kind"] == "full"
    run_job(spec, progress=False)
    table = deltalake.DeltaTable(str(source))
    table.delete("id >= 480")
    _delta(source, _rows(500, 40), mode="append")
    plan = make_plan(spec)
    assert plan.rows == 40, "the estimate counts the rows that will be scored"
    assert plan.changes is not None and plan.changes["deleted"] == 20
    assert "40 rows inserted, 0 updated, 20 deleted" in plan.summary()
    outcome = run_job(spec, progress=False)
    assert outcome.report.rows == 40 and outcome.report.changes is not None
    rate = outcome.plan.rows_per_second * outcome.plan.workers  # the plan's measured rate
    assert outcome.report.changes["saved_seconds"] == pytest.approx((520 - 40) / rate)
    page = Path(outcome.report_files[1]).read_text()  # the report's header cards say so
    assert "40 rows inserted, 0 updated, 20 deleted" in page and "saved against a full" in page
    _same(out, clf, deltalake.DeltaTable(str(source)).to_pandas())


# -- every engine -------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["ray", "spark"])
def test_distributed_engines_score_the_increment(
    tmp_path: Path, models: tuple[Path, Path, Any, Any], engine: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The driver computes the change set once; the workers score it."""
    import shutil

    module = pytest.importorskip(engine if engine == "ray" else "pyspark")
    if engine == "spark" and shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime")
    if engine == "ray":  # a Ray instance of this test's own, shut down after it
        # Workers at the driver's priority, as scoring.ray.connect() starts them (Ray's
        # default niceness starves them beside busy processes).
        monkeypatch.setenv("RAY_worker_niceness", "0")
        module.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        _distributed(tmp_path, models, engine)
    finally:
        if engine == "ray":
            module.shutdown()


def _distributed(tmp_path: Path, models: tuple[Path, Path, Any, Any], engine: str) -> None:
    options = ({"num_workers": 1, "num_cpus": 1} if engine == "ray"
               else {"master": "local[1]"})  # fmt: skip
    v1, _, clf, _ = models
    folder, out = tmp_path / "folder", tmp_path / "out"
    _write(folder, "day1.parquet", _rows(0, 300))
    _score(folder, out, v1, engine=engine, engine_options=options)
    _write(folder, "day2.parquet", _rows(300, 120))
    report = _score(folder, out, v1, engine=engine, engine_options=options)
    assert report.rows == 120 and report.changes["kind"] == "incremental"  # type: ignore[index]
    _same(out, clf, pd.concat([_rows(0, 300), _rows(300, 120)]))
    # A Delta input with the feed into a Delta output merged on the key.
    source, table_out = tmp_path / "delta", tmp_path / "table"
    _delta(source, _rows(0, 300), configuration=FEED)
    target = scoring.Output(f"delta:{table_out}", key=["id"])
    _score(source, target, v1, engine=engine, engine_options=options)
    table = deltalake.DeltaTable(str(source))
    table.delete("id < 25")
    table.update(predicate="id >= 100 AND id < 110", updates={"a": "a + 2.0"})
    report = _score(source, target, v1, engine=engine, engine_options=options)
    assert report.changes["deleted"] == 25 and report.rows == 10  # type: ignore[index]
    _same(table_out, clf, deltalake.DeltaTable(str(source)).to_pandas())
    # Partitioned by values a path escapes (their change feed read from the log), then
    # every row deleted: the workers follow it as the local engine does.
    cities, city_out = tmp_path / "cities", tmp_path / "city_scores"
    places = np.array(["New York", "a/b", "50%"])
    _delta(cities, _rows(0, 60).assign(region=lambda f: places[f.id % 3]), configuration=FEED,
           partition_by=["region"])  # fmt: skip
    city_target = scoring.Output(f"delta:{city_out}", key=["id"])
    _score(cities, city_target, v1, engine=engine, engine_options=options)
    deltalake.DeltaTable(str(cities)).update(predicate="id % 2 = 0", updates={"a": "a + 1.0"})
    _score(cities, city_target, v1, engine=engine, engine_options=options)
    latest = deltalake.DeltaTable(str(cities)).to_pandas()
    _same(city_out, clf, latest)
    assert sorted(_output(city_out).region.unique()) == sorted(places)
    deltalake.DeltaTable(str(cities)).delete()
    report = _score(cities, city_target, v1, engine=engine, engine_options=options)
    assert report.changes["deleted"] == 60 and _output(city_out).empty  # type: ignore[index]


def test_two_incremental_runs_started_together_one_runs_the_other_is_refused(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    """The first is held once it journaled a file; the second is refused by the lease."""
    v1, _, clf, _ = models
    source, out = tmp_path / "in", tmp_path / "out"
    _write(source, "day1.parquet", _rows(0, 200))
    _score(source, out, v1)
    _write(source, "day2.parquet", _rows(200, 100))
    _write(source, "day3.parquet", _rows(300, 100))
    command = ["score", "--model", str(v1), "--input", str(source), "--output", str(out),
               "--keep", "id,region", "--incremental"]  # fmt: skip
    first = zygote.popen(HELD_AT, "journaled a file", "1", *command)
    assert first.stdout is not None and first.stdout.readline() == "held\n"
    with pytest.raises(OutputError, match="being written by another run"):
        _score(source, out, v1)
    first.kill()  # held in its writer thread, which a SIGTERM does not interrupt
    first.communicate()
    _score(source, out, v1)
    _same(out, clf, pd.concat([_rows(0, 200), _rows(200, 100), _rows(300, 100)]))


def test_follows_only_what_the_output_can_take(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    """Updated rows need a Delta output merged on a key."""
    v1 = models[0]
    source, out = tmp_path / "delta", tmp_path / "out"
    _delta(source, _rows(0, 100), configuration=FEED)
    _score(source, out, v1)
    deltalake.DeltaTable(str(source)).update(predicate="id < 5", updates={"a": "a + 1.0"})
    with pytest.raises(InputError, match="updated or deleted rows .* write format delta "
                                         r"with key = \[\.\.\.\]"):  # fmt: skip
        _score(source, out, v1)
    table_out = scoring.Output(f"delta:{tmp_path / 'table'}")
    _score(source, table_out, v1)
    deltalake.DeltaTable(str(source)).update(predicate="id < 5", updates={"a": "a + 1.0"})
    with pytest.raises(ConfigError, match=r"name the key columns .* --key"):
        _score(source, table_out, v1)


def test_a_new_model_rescores_a_delta_output_in_full(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    v1, v2, _, clf2 = models
    source, out = tmp_path / "in", tmp_path / "out"
    _delta(source, _rows(0, 200), configuration=FEED)
    target = scoring.Output(f"delta:{out}", key=["id"])
    _score(source, target, v1)
    _delta(source, _rows(200, 30), mode="append")
    report = _score(source, target, v2)
    assert report.changes is not None and report.changes["kind"] == "full"
    assert report.changes["reason"].startswith("a new model: the last run's was ")
    assert report.rows == 230
    _same(out, clf2, deltalake.DeltaTable(str(source)).to_pandas())
    assert deltalake.DeltaTable(str(out)).history()[0]["operation"] == "WRITE"


def test_a_folder_into_a_delta_table_appends_its_new_files(
    tmp_path: Path, models: tuple[Path, Path, Any, Any]
) -> None:
    """The files scored to date are recorded beside the table, named by each commit."""
    v1, _, clf, _ = models
    folder, out = tmp_path / "folder", tmp_path / "table"
    target = scoring.Output(f"delta:{out}")
    _write(folder, "day1.parquet", _rows(0, 150))
    _score(folder, target, v1)
    for day in (2, 3):
        _write(folder, f"day{day}.parquet", _rows(150 * (day - 1), 150))
        report = _score(folder, target, v1)
        assert report.rows == 150 and report.changes["kind"] == "incremental"  # type: ignore[index]
    _same(out, clf, pd.concat([_rows(0, 150), _rows(150, 150), _rows(300, 150)]))
    assert len(list((out / "_scoring_inputs").glob("*.json"))) == 1, "the last run's record"
    assert _score(folder, target, v1).changes["kind"] == "none"  # type: ignore[index]
    (folder / "day2.parquet").unlink()
    with pytest.raises(InputError, match=r"'day2\.parquet' is gone"):
        _score(folder, target, v1)
    with pytest.raises(InputError, match="a Delta table's, or Spark's"):
        _score(folder, target, v1, on_changed="rescore")


def test_an_earlier_version_s_fingerprint_is_still_this_file_s(tmp_path: Path) -> None:
    """Fingerprints now hold the footer and the change time; one an earlier version
    recorded (path, size and mtime) still names the unchanged file, so an upgrade
    rescores nothing, while a fingerprint of either form of another file does not."""
    from scoring._formats.dataset import open_input

    _write(tmp_path / "in", "day1.parquet", _rows(0, 10))
    (fragment,) = open_input(str(tmp_path / "in")).fragments
    assert fragment.fingerprint.startswith("c-") and fragment.legacy
    assert fragment.same_as(fragment.fingerprint) and fragment.same_as(fragment.legacy)
    assert not fragment.same_as("c-" + fragment.legacy) and not fragment.same_as("0" * 16)

"""The run plan is one frozen, picklable record every engine takes whole; the journal is
all a worker writes through; each output format is one publisher."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import scoring
from scoring._engines import base, local, plan, ray, spark
from scoring._formats import FORMATS
from scoring._formats.delta import DeltaTable
from scoring._formats.folder import FolderPublisher
from scoring._formats.publication import Opening
from scoring._formats.table import TablePublisher
from scoring._journal.journal import Entry, Journal
from scoring._journal.manifest import Manifest

from .test_score_parquet import model_frame, write_input


@pytest.fixture
def planned(tmp_path: Path) -> base.Run:
    model, X = model_frame("xgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=3)
    compiled = scoring.compile(model, backend="native")
    request = base.PlanRequest(str(tmp_path / "in"), scoring.Output(str(tmp_path / "out")),
                               compiled, plan.ScoreSpec(keep=("id",)), local.ENGINE)  # fmt: skip
    return base.plan_run(request)


class Seen:
    """A hook that pickles (an importable class) and records where it ran."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def __call__(self, entry: Entry) -> None:
        self.entries.append(entry.relpath)


def test_the_plan_is_frozen_and_pickles_whole(planned: base.Run) -> None:
    run_plan = planned.plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        run_plan.columns = ()  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(run_plan))
    assert copy.sha256 == planned.model.sha256 and copy.columns == run_plan.columns
    assert copy.schema == run_plan.schema and copy.score == run_plan.score
    assert copy.journal.url == run_plan.journal.url and copy.journal.job_key
    assert [f.relpath for f in copy.data.fragments] == [f.relpath for f in planned.todo]


def test_the_plans_hooks_run_where_files_are_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, X = model_frame("xgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=3)
    seen = Seen()
    monkeypatch.setattr(plan, "HOOKS", plan.Hooks(on_file_journaled=seen))
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"], progress=False)
    assert sorted(seen.entries) == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]
    assert pickle.loads(pickle.dumps(plan.HOOKS)).on_file_journaled.entries == seen.entries


def test_the_plans_publish_hook_sees_every_step_on_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, X = model_frame("xgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=2)
    steps: list[str] = []
    monkeypatch.setattr(plan, "HOOKS", plan.Hooks(on_publish_step=steps.append))
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"], progress=False)
    assert steps == ["placed a new file"] * 2 + [
        "wrote the new manifest", "marked the output complete"
    ]  # fmt: skip


def test_no_engine_restates_the_plans_fields() -> None:
    """A record an engine keeps beside the plan holds the plan, never its fields."""
    planned = {f.name for f in dataclasses.fields(plan.RunPlan)}
    planned |= {f.name for f in dataclasses.fields(plan.ScoreSpec)}
    records = [base.Run, ray._Spec]
    for record in records:
        assert "plan" in {f.name for f in dataclasses.fields(record)}, record
        restated = planned & {f.name for f in dataclasses.fields(record)}
        assert not restated, (record.__name__, restated)
    # Spark's executors take the plan's ScoreSpec, not its fields one by one.
    assert list(inspect.signature(spark.score_frame).parameters) == [
        "df", "source", "how", "ran", "counted"
    ]  # fmt: skip


def test_every_output_format_is_one_registered_publisher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scoring._formats.iceberg import IcebergTable

    # An Iceberg table is named through a catalog (SQLite, a warehouse in tmp_path).
    monkeypatch.setenv("PYICEBERG_CATALOG__LAB__URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAB__WAREHOUSE", f"file://{tmp_path}/warehouse")
    where = {"iceberg": "iceberg:lab.sales.scores"}
    opened: dict[str, Any] = {
        name: kind.open(where.get(name, str(tmp_path / name)), Opening({"m": 1}))
        for name, kind in FORMATS.items()
    }  # fmt: skip
    assert isinstance(opened["parquet"], FolderPublisher)
    assert isinstance(opened["delta"], TablePublisher)
    assert isinstance(opened["delta"].table, DeltaTable)
    assert isinstance(opened["iceberg"], TablePublisher)
    assert isinstance(opened["iceberg"].table, IcebergTable)
    assert opened["iceberg"].journal.url == f"file://{tmp_path}/warehouse/sales/scores"
    for publisher in opened.values():
        assert isinstance(publisher.journal, Journal)
        assert not isinstance(publisher, Journal)  # composed, never a subclass


def test_every_manifest_file_has_its_sha256(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=2)
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"], progress=False)
    manifest = Manifest.from_json((tmp_path / "out" / "_scoring_manifest.json").read_bytes())
    assert Manifest.from_json(manifest.to_json()) == manifest
    for record in manifest.published():
        path = tmp_path / "out" / record.output
        assert path.stat().st_size == record.bytes
        assert Journal(str(tmp_path / "out"), job={}).sha256(str(path)) == record.sha256
        assert pq.read_metadata(path).num_rows == record.rows


def test_one_options_model_per_engine_serves_job_files_and_engine_options(
    tmp_path: Path,
) -> None:
    from scoring._engines import ENGINES
    from scoring._engines.base import options_for
    from scoring.errors import ConfigError, JobFileError
    from scoring.jobs import load_job

    for name, engine in ENGINES.items():
        assert type(options_for(engine, {})) is engine.options, name
    assert options_for(ENGINES["ray"], {"num_workers": 2}).num_workers == 2
    with pytest.raises(ConfigError, match="option num_workers=0") as wrong:
        options_for(ENGINES["ray"], {"num_workers": 0})
    assert "\n" not in str(wrong.value)
    with pytest.raises(ConfigError, match="has no option 'workers'"):
        options_for(ENGINES["ray"], {"workers": 2})
    base_job = 'name = "j"\nmodel = "m.json"\ninput = "in"\noutput = "out"\n'
    path = tmp_path / "job.toml"
    path.write_text(base_job + 'engine = "local"\n[local]\nfiles_at_once = 2\n')
    assert load_job(path).engine_options() == {"files_at_once": 2}
    path.write_text(base_job + 'engine = "ray"\nworkers = 2\n[ray]\nnum_workers = 2\n')
    assert load_job(path).engine_options() == {"num_workers": 2}
    path.write_text(base_job + 'engine = "ray"\nworkers = 3\n[ray]\nnum_workers = 2\n')
    with pytest.raises(ConfigError, match="sets num_workers twice"):
        load_job(path).engine_options()
    path.write_text(base_job + 'engine = "ray"\n[ray]\nnum_wrokers = 2\n')
    with pytest.raises(JobFileError, match="num_wrokers"):
        load_job(path)

"""Job files, the planner against the actual run, deadlines, exit codes and reports."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb
from typer.testing import CliRunner

import scoring
from scoring.cli import app
from scoring.errors import JobFileError
from scoring.jobs import load_job, make_plan, run_job

runner = CliRunner()
JOBS = Path(__file__).parent.parent / "jobs"
FEATURES = 12


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> scoring.Registry:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20_000, FEATURES)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=150, max_depth=7).fit(X, y)
    reg = scoring.Registry(tmp_path_factory.mktemp("reg"))
    reg.register("churn", model)
    reg.set_alias("churn", "production", 1)
    return reg


def write_rows(root: Path, rows: int, *, files: int = 4) -> Path:
    rng = np.random.default_rng(4)
    root.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(rows), files)):
        X = rng.normal(size=(len(part), FEATURES)).astype(np.float32)
        table = pa.table({"id": part, **{f"f{j}": X[:, j] for j in range(FEATURES)}})
        pq.write_table(table, root / f"part-{i}.parquet")
    return root


def job_file(tmp_path: Path, registry: Any, **values: Any) -> Path:
    data = {"name": "nightly", "model": "churn@production", "registry": str(registry.uri),
            "input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "keep": ["id"],
            **values}  # fmt: skip
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items()]
    path = tmp_path / "job.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("extra", "named"),
    [({"deadlin": "45m"}, "'deadlin': unknown key"), ({"engine": "flink"}, "'engine'"),
     ({"deadline": "soon"}, "'deadline'"), ({"timezone": "Mars/Olympus"}, "'timezone'"),
     ({"workers": 0}, "'workers'")],
)  # fmt: skip
def test_job_file_errors_name_key_and_file(
    tmp_path: Path, registry: Any, extra: dict[str, Any], named: str
) -> None:
    path = job_file(tmp_path, registry, **extra)
    with pytest.raises(JobFileError, match=named) as caught:
        load_job(path)
    assert str(path) in str(caught.value)
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2 and named in result.output


@pytest.mark.parametrize("key", ["input", "output", "keep"])
def test_an_unset_variable_anywhere_is_a_job_file_error(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.delenv("SCORING_TEST_UNSET", raising=False)
    write_rows(tmp_path / "in", 1_000)
    value = {"input": str(tmp_path / "in") + "/${SCORING_TEST_UNSET}",
             "output": str(tmp_path / "out" / "date=${SCORING_TEST_UNSET}"),
             "keep": ["id", "$SCORING_TEST_UNSET"]}[key]  # fmt: skip
    path = job_file(tmp_path, registry, **{key: value})
    result = runner.invoke(app, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert "SCORING_TEST_UNSET is not set" in result.output and f"'{key}" in result.output
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("SCORING_TEST_UNSET", "2026-11-22")
    assert "2026-11-22" in str(load_job(path).model_dump()[key])


def test_what_a_run_says_in_a_log_is_one_stamped_line_each(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal (cron, Airflow): the summary is one line however long, not wrapped
    at 80 columns, and each progress line starts with the UTC time."""
    import scoring._progress

    monkeypatch.setattr(scoring._progress, "LOG_EVERY_S", 0.0)
    write_rows(tmp_path / "in", 20_000)
    output = tmp_path / ("scores-of-a-long-nightly-job-name-" * 3) / "date=2026-11-22"
    result = runner.invoke(app, ["run", str(job_file(tmp_path, registry, output=str(output)))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    summary = next(line for line in lines if line.startswith("scored "))
    assert summary.endswith(f"-> {output}") and len(summary) > 200
    progress = [line for line in lines if " scoring: " in line and "rows/s, ETA" in line]
    assert progress and all(
        re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 scoring: [\d,]+/20,000 rows", line)
        for line in progress
    ), progress


def test_a_spinner_shows_until_the_progress_bar_takes_its_place() -> None:
    """While the model loads there is nothing to count: a terminal shows a spinner, which
    the run's bar replaces (a terminal holds one live display); a log shows nothing."""
    from rich.console import Console

    from scoring._progress import RunProgress, _spinners, waiting

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    console = Console(file=screen, force_terminal=True, highlight=False)
    with waiting("loading the model ...", console=console):
        assert len(_spinners) == 1
        console.print("plan: 20,000 rows")  # above the spinner
        with RunProgress(10, stream=Terminal()) as progress:
            assert not _spinners
            progress.advance(10)
    assert "loading the model ..." in screen.getvalue()
    assert "plan: 20,000 rows" in screen.getvalue()
    log = io.StringIO()
    with waiting("loading the model ...", console=Console(file=log)):
        assert not _spinners
    assert log.getvalue() == ""


def test_relative_paths_in_a_job_file_are_read_from_its_folder(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same job from another working directory (cron's home, a scheduler's) means
    the same files: found relative to the file, not to where the command runs."""
    write_rows(tmp_path / "data" / "in", 2_000)
    folder = tmp_path / "repo" / "jobs"
    folder.mkdir(parents=True)
    job = folder / "nightly.toml"
    job.write_text(
        'name = "nightly"\nmodel = "churn@production"\nkeep = ["id"]\n'
        f'registry = "{os.path.relpath(registry.uri, folder)}"\n'
        'input = "../../data/in/"\noutput = "../../data/out"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_job(job)
    assert spec.input == f"{tmp_path / 'data' / 'in'}/"
    assert spec.output == str(tmp_path / "data" / "out")
    result = runner.invoke(app, ["run", str(job)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "out" / "_SUCCESS").exists() and not list(elsewhere.iterdir())
    absolute = job_file(tmp_path, registry, input="s3://lake/in/", output="/srv/out")
    assert (load_job(absolute).input, load_job(absolute).output) == ("s3://lake/in/", "/srv/out")


def test_storage_options_for_no_object_store_are_refused(tmp_path: Path, registry: Any) -> None:
    """The table's keys go to the job's object stores; a job with none is told so, not
    silently ignored (the option meant for a store is not reaching one)."""
    write_rows(tmp_path / "in", 1_000)
    path = job_file(tmp_path, registry)
    path.write_text(path.read_text() + '[storage_options]\nendpoint_url = "http://h:9000"\n')
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2
    assert "storage option 'endpoint_url': no URL of this command is on an object" in " ".join(
        result.output.split()
    )
    given = runner.invoke(app, ["run", str(path), "--storage-option", "s3.profile=x"])
    assert given.exit_code == 2 and "'endpoint_url'" in " ".join(given.output.split())
    assert not (tmp_path / "out").exists()


def test_example_jobs_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_DATE", "2026-11-21")
    specs = {p.stem: load_job(p) for p in sorted(JOBS.glob("*.toml"))}
    assert set(specs) == {"demo", "many_models", "nightly", "ray", "reasons", "spark"}
    assert specs["reasons"].outputs == "default+reasons=3/signed"
    assert specs["many_models"].model_arg == [
        {"model": "churn@production", "prefix": None, "where": None},
        {"model": "churn@challenger", "prefix": "challenger", "where": None},
        {"model": "upsell@production", "prefix": None, "where": None},
    ]
    assert specs["nightly"].input == str(JOBS.parent / "examples/features/date=2026-11-21") + "/"
    assert specs["ray"].engine_options() == {"address": "auto", "num_cpus": 1.0, "num_gpus": 1.0}
    assert specs["spark"].engine_options()["conf"]["spark.task.resource.gpu.amount"] == "0.25"


@pytest.mark.parametrize("job", ["nightly", "many_models", "reasons", "spark", "ray"])
def test_every_example_job_plans_against_the_example_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str
) -> None:
    """Each job file as it is in jobs/, beside the data ``make examples`` writes: its
    plan reads the registry and the input its relative paths name."""
    from scoring.cli._examples import write_examples

    shutil.copytree(JOBS, tmp_path / "jobs")
    write_examples(tmp_path / "examples", run_date="2026-11-21", rows=3_000)
    monkeypatch.setenv("RUN_DATE", "2026-11-21")
    if job == "ray":  # its address is "auto", the cluster this host belongs to: one here
        ray = pytest.importorskip("ray")
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        planned = runner.invoke(app, ["plan", str(tmp_path / "jobs" / f"{job}.toml")])
    finally:
        if job == "ray":
            ray.shutdown()
    # 3: a clock deadline already past today; the plan was still made from the data.
    assert planned.exit_code in (0, 3), planned.output
    assert "rows: 3,000 in 2 file(s)" in planned.output


def test_the_repository_s_models_folder_declares_the_example_registry(
    tmp_path: Path,
) -> None:
    """models/ applied to the registry ``make examples`` writes changes nothing: the
    files declare what the jobs in jobs/ score (each model, version and alias)."""
    from scoring.cli._examples import write_examples

    write_examples(tmp_path / "examples", run_date="2026-11-21", rows=100)
    shutil.copytree(JOBS.parent / "models", tmp_path / "models")
    said = runner.invoke(app, ["models", "apply", str(tmp_path / "models"), "--registry",
                               str(tmp_path / "examples" / "registry")])  # fmt: skip
    assert said.exit_code == 0, said.output
    assert said.stdout == "" and "the registry matches them" in said.stderr
    registry = scoring.Registry(tmp_path / "examples" / "registry")
    refs = {ref for job in JOBS.glob("*.toml") for ref in re.findall(r'"(\w+@\w+)"',
                                                                    job.read_text())}  # fmt: skip
    assert {"churn@production", "churn@challenger", "upsell@production"} <= refs
    for ref in sorted(refs - {"demo-reference@production"}):
        assert registry.get(ref).verified, ref


def test_the_examples_command_hints_at_a_job_only_where_the_job_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    elsewhere = runner.invoke(app, ["examples", "elsewhere", "--rows", "100"])
    assert elsewhere.exit_code == 0, elsewhere.output
    assert "wrote elsewhere/" in elsewhere.output and "try:" not in elsewhere.output
    shutil.copytree(JOBS, tmp_path / "jobs")
    beside = runner.invoke(app, ["examples", "--rows", "100", "--date", "2026-11-21"])
    assert "try: RUN_DATE=2026-11-21 scoring plan jobs/nightly.toml" in beside.output
    monkeypatch.setenv("RUN_DATE", "2026-11-21")
    planned = runner.invoke(app, ["plan", "jobs/nightly.toml"])  # at any hour: 75m from now
    assert planned.exit_code == 0 and "rows: 100 in 2 file(s)" in planned.output
    assert "feasible" in planned.output and "NOT feasible" not in planned.output
    # --deadline in place of the file's: an hour ago is refused, a bad value named.
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    late = runner.invoke(app, ["plan", "jobs/nightly.toml", "--deadline", passed])
    assert late.exit_code == 3 and "NOT feasible" in late.output, late.output
    bad = runner.invoke(app, ["plan", "jobs/nightly.toml", "--deadline", "soon"])
    assert bad.exit_code == 2 and "--deadline 'soon'" in bad.stderr, bad.output
    # Dated from RUN_DATE: a backfill of an old date is late and told how to run it; the
    # day after today's date at 23:59 (UTC, the file's zone) is always ahead.
    backfill = runner.invoke(
        app, ["plan", "jobs/nightly.toml", "--deadline", "2026-11-21+1d 01:45"]
    )
    assert backfill.exit_code == 3, backfill.output
    assert "deadline 2026-11-22T01:45:00+00:00 passed" in backfill.output
    assert "give a deadline from the start (--deadline 2h)" in " ".join(backfill.output.split())
    today = datetime.now(timezone.utc).date().isoformat()
    ahead = runner.invoke(app, ["plan", "jobs/nightly.toml", "--deadline", f"{today}+1d 23:59"])
    assert ahead.exit_code == 0 and "NOT feasible" not in ahead.output, ahead.output


def test_the_demo_succeeds_and_writes_its_report_and_its_job_file_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make demo``'s command, on fewer rows, for a user whose home is ``tmp_path``
    (the default registry, as the demo uses it); then jobs/demo.toml, whose paths are
    that registry's, plans against what the demo wrote."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in ("SCORING_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(variable, raising=False)
    said = runner.invoke(app, ["demo", "--rows", "40000"])
    assert said.exit_code == 0, said.output
    assert "compiled in" in said.output and "the job's 3-minute window starts now" in said.output
    report = tmp_path / ".local/share/scoring/demo/output/_scoring_report.html"
    assert report.exists() and str(report) in " ".join(said.output.split())
    assert json.loads(report.with_suffix(".json").read_text())["rows"] == 40_000
    planned = runner.invoke(app, ["plan", str(JOBS / "demo.toml")])
    assert planned.exit_code == 0 and "rows: 40,000 in 8 file(s)" in planned.output
    # The demo's model is models/demo/'s declaration, applied: applied again, it matches.
    registry = tmp_path / ".local/share/scoring"
    assert "registered demo-reference@1" in said.output
    applied = runner.invoke(app, ["models", "apply", str(JOBS.parent / "models" / "demo"),
                                  "--registry", str(registry)])  # fmt: skip
    assert applied.exit_code == 0, applied.output
    assert applied.stdout == "" and "the registry matches them" in applied.stderr
    assert scoring.Registry(registry).get("demo-reference@production").verified


def test_clock_deadlines() -> None:
    spec = load_job_text(deadline="01:45", timezone="Europe/Berlin")
    berlin = timezone(timedelta(hours=1))  # CET in November
    at = datetime(2026, 11, 21, 1, 0, tzinfo=berlin)
    assert spec.deadline_at(at) == datetime(2026, 11, 21, 1, 45, tzinfo=berlin)
    late = datetime(2026, 11, 21, 2, 0, tzinfo=berlin)  # already past: the job is late
    assert spec.deadline_at(late) == datetime(2026, 11, 21, 1, 45, tzinfo=berlin)
    evening = datetime(2026, 11, 20, 23, 30, tzinfo=berlin)  # tonight's 01:45
    assert spec.deadline_at(evening) == datetime(2026, 11, 21, 1, 45, tzinfo=berlin)
    assert load_job_text(deadline="1h30m").deadline_at(at) == at + timedelta(minutes=90)
    after_midnight = datetime(2026, 11, 21, 0, 30, tzinfo=berlin)  # 23:30 passed an hour ago
    evening_deadline = load_job_text(deadline="23:30", timezone="Europe/Berlin")
    assert evening_deadline.deadline_at(after_midnight) == datetime(2026, 11, 20, 23, 30,
                                                                    tzinfo=berlin)  # fmt: skip


def test_dated_deadlines_are_tied_to_the_data_s_date_not_to_the_start() -> None:
    """``${RUN_DATE}+1d 01:45`` (expanded before validation): the day after the data's
    date at 01:45 in the job's zone, whenever the run starts; a day or an hour that does
    not exist, or a form that is none of the three, is refused naming the value."""
    berlin = ZoneInfo("Europe/Berlin")
    spec = load_job_text(deadline="2026-11-20+1d 01:45", timezone="Europe/Berlin")
    for start in (
        datetime(2026, 11, 20, 23, 0, tzinfo=berlin),
        datetime(2026, 12, 5, tzinfo=berlin),
    ):
        assert spec.deadline_at(start) == datetime(2026, 11, 21, 1, 45, tzinfo=berlin)
    same_day = load_job_text(deadline="2026-07-01T23:30", timezone="Europe/Berlin")
    assert same_day.deadline_at(datetime.now(timezone.utc)) == datetime(
        2026, 7, 1, 21, 30, tzinfo=timezone.utc
    )  # CEST: UTC+2
    assert load_job_text(deadline="2026-11-20 + 2d 06:00").deadline_at(
        datetime.now(timezone.utc)
    ) == datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)
    for bad, said in [("2026-02-30 01:00", "day is out of range"),
                      ("2026-11-20+1d 24:00", "hour must be in 0..23"),
                      ("tomorrow 01:45", "is not a deadline: give a duration")]:  # fmt: skip
        with pytest.raises(ValueError, match=said):
            load_job_text(deadline=bad)


def load_job_text(**values: Any) -> Any:
    from scoring.jobs import JobSpec

    return JobSpec.model_validate({"name": "j", "model": "m", "input": "i", "output": "o",
                                   **values})  # fmt: skip


def test_impossible_deadline_exits_3_quickly_and_writes_only_its_report(
    tmp_path: Path, registry: Any
) -> None:
    write_rows(tmp_path / "in", 400_000)
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    path = job_file(tmp_path, registry, deadline=passed)  # an hour ago: however fast we are
    result = runner.invoke(app, ["run", str(path)])
    assert result.exit_code == 3, result.output
    assert "passed" in result.output and "NOT feasible" in result.output
    assert "for a rerun or a backfill give a deadline from the start (--deadline 2h)" in (
        " ".join(result.output.split())
    )
    refusal = result.stderr.strip().splitlines()[-1]
    assert refusal.startswith("scoring run: refused:") and "_scoring_report.html" in refusal
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "_scoring_report.html", "_scoring_report.json"
    ]  # fmt: skip
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    assert report["status"] == "refused" and "DeadlineError" in report["error"]
    assert "REFUSED" in (tmp_path / "out" / "_scoring_report.html").read_text()
    runs = runner.invoke(app, ["runs", "--registry", str(registry.uri), "--json"])
    assert runs.exit_code == 0, runs.output
    listed = json.loads(runs.stdout)["runs"]
    recorded = [r for r in listed if r["output"] == str(tmp_path / "out")]
    assert [(r["outcome"], r["exit_code"]) for r in recorded] == [("refused", 3)]
    # The job file finds its own registry and names its job.
    by_file = runner.invoke(app, ["runs", str(path), "--json"], env={"SCORING_HOME": "/nowhere"})
    assert by_file.exit_code == 0, by_file.output
    by_job = json.loads(by_file.stdout)["runs"]  # the module's registry: earlier runs too
    assert {r["job"] for r in by_job} == {"nightly"} and by_job[-1]["outcome"] == "refused"
    planned = runner.invoke(app, ["plan", str(path)])
    assert planned.exit_code == 3 and "rows: 400,000" in planned.output


def test_plan_counts_rows_and_measures_once_per_model(tmp_path: Path, registry: Any) -> None:
    # How close the estimate comes to the run is a benchmark (benchmarks/plan_accuracy.py),
    # not a unit test: a busy machine would fail any bound on wall time.
    write_rows(tmp_path / "in", 300_000, files=3)
    # One backend named: measurements are keyed by what runs, and ``auto``'s pick may
    # flip between two plans on a busy machine (native, then tensor), each measured once.
    spec = load_job(job_file(tmp_path, registry, deadline="30m", backend="native"))
    (Path(registry.uri) / "cache" / "throughput.json").unlink(missing_ok=True)
    plan = make_plan(spec)
    assert plan.rows == 300_000 and plan.files == 3 and not plan.cached
    assert plan.rows_per_second > 0 and plan.estimated_seconds > plan.compile_seconds
    again = make_plan(spec)  # measured once per model version and device type
    assert again.cached and again.rows_per_second == plan.rows_per_second


def test_plan_measurements_are_keyed_by_the_backend_that_will_run(
    tmp_path: Path, registry: Any
) -> None:
    """A rate measured for one backend never stands for another (a cached tensor rate
    once stood for the native run ``auto`` picked the second time), nor one of scores
    alone for a job writing contributions (which score far slower)."""
    write_rows(tmp_path / "in", 20_000)
    (Path(registry.uri) / "cache" / "throughput.json").unlink(missing_ok=True)
    plans = {}
    for backend in ("native", "tensor", "native"):
        spec = load_job(job_file(tmp_path, registry, deadline="30m", backend=backend))
        plans.setdefault(backend, []).append(make_plan(spec))
    assert [p.cached for p in plans["native"]] == [False, True]
    assert not plans["tensor"][0].cached
    explained = load_job(job_file(tmp_path, registry, deadline="30m", backend="tensor",
                                  outputs="contributions"))  # fmt: skip
    assert not make_plan(explained).cached
    keys = json.loads((Path(registry.uri) / "cache" / "throughput.json").read_text())
    picked = {(key.split("|")[2], key.split("|")[5]) for key in keys}
    assert picked == {("native", "default"), ("tensor", "default"),
                      ("tensor", explained.outputs)}  # fmt: skip
    assert all(len(key.split("|")) == 6 for key in keys)


def test_a_compile_spent_while_planning_counts_once_in_the_window(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first compile of 100 s (on a virtual clock) inside a 3-minute window: counted in
    the estimate, not also taken off the time left (the demo's first run was refused so)."""
    from scoring.jobs import _planner

    write_rows(tmp_path / "in", 20_000)
    spent = [0.0]
    real_now, real_counter, resolve = (
        datetime.now,
        _planner.time.perf_counter,
        _planner.resolve_model,
    )

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return real_now(tz) + timedelta(seconds=spent[0])

    def slow_compile(*args: Any, **kwargs: Any) -> Any:
        source = resolve(*args, **kwargs)
        spent[0] += 100.0
        return source

    monkeypatch.setattr(_planner, "datetime", Clock)
    monkeypatch.setattr(_planner, "time", type("T", (), {
        "perf_counter": staticmethod(lambda: real_counter() + spent[0])}))  # fmt: skip
    monkeypatch.setattr(_planner, "resolve_model", slow_compile)
    plan = make_plan(load_job(job_file(tmp_path, registry, deadline="3m")))
    assert plan.compile_seconds >= 100
    assert plan.available_seconds is not None and plan.available_seconds > 170
    assert plan.feasible and plan.estimated_seconds < plan.available_seconds


def test_run_writes_reports_and_exit_4_when_late(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(tmp_path / "in", 50_000)
    result = runner.invoke(app, ["run", str(job_file(tmp_path, registry, deadline="10m"))])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    assert report["rows"] == 50_000 and report["met_deadline"]
    assert report["plan"]["rows"] == 50_000
    assert set(report["gpu"]) == {"absent"}  # no GPU here: why, in one line
    assert report["gpu"]["absent"].startswith(("not sampled: ", "none: ")), report["gpu"]
    assert sum(w["rows"] for w in report["workers"].values()) == 50_000
    page = (tmp_path / "out" / "_scoring_report.html").read_text()
    assert "<svg" in page and "Timeline from start" in page and "Workers" not in page
    again = runner.invoke(app, ["run", str(job_file(tmp_path, registry, deadline="10m"))])
    assert again.exit_code == 0 and "nothing to do" in again.output
    kept = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    assert kept["rows"] == 50_000  # the report of the run that did the work stays

    # A run that finishes after its deadline (the plan is told it can make it).
    import scoring.jobs._runner as jobs_runner

    real = jobs_runner.plan_and_model

    def told_feasible(spec: Any, start: datetime) -> Any:
        planned = real(spec, start=start)
        return planned._replace(plan=replace(planned.plan, feasible=True))

    monkeypatch.setattr(jobs_runner, "plan_and_model", told_feasible)
    spec = load_job(job_file(tmp_path, registry, deadline="1m", output=str(tmp_path / "late")))
    outcome = run_job(spec, progress=False, start=datetime.now(timezone.utc) - timedelta(hours=1))
    assert outcome.late and outcome.exit_code == 4
    assert not json.loads((tmp_path / "late" / "_scoring_report.json").read_text())["met_deadline"]


def test_every_run_is_recorded_with_its_outcome_and_listed(tmp_path: Path, registry: Any) -> None:
    """Done, refused, failed: each run is a record in the registry database, with what
    the operator needs (rows, bytes, stages, window, model sha256), listed by
    ``scoring runs`` and shown in the next report's history."""
    files = write_rows(tmp_path / "in", 4_000)
    ok = job_file(tmp_path, registry, name="history", deadline="1h")
    assert runner.invoke(app, ["run", str(ok), "--no-progress"]).exit_code == 0
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    refused = job_file(tmp_path, registry, name="history", deadline=passed)
    assert runner.invoke(app, ["run", str(refused), "--no-progress"]).exit_code == 3
    failed = job_file(tmp_path, registry, name="history", model="churn@no-such-alias",
                      output=str(tmp_path / "out2"))  # fmt: skip
    assert runner.invoke(app, ["run", str(failed), "--no-progress"]).exit_code == 1
    ok = job_file(tmp_path, registry, name="history", deadline="1h")  # job.toml once more
    again = runner.invoke(app, ["run", str(ok), "--no-progress"])
    assert again.exit_code == 0, again.output

    listed = runner.invoke(app, ["runs", "history", "--json", "--registry", registry.uri])
    assert listed.exit_code == 0, listed.output
    runs = json.loads(listed.stdout)["runs"]
    assert [r["outcome"] for r in runs] == ["ok", "refused", "failed", "ok"]
    assert [r["exit_code"] for r in runs] == [0, 3, 1, 0]
    first = runs[0]
    assert first["rows"] == 4_000 and first["window_seconds"] == 3600
    assert first["bytes"] == sum(f.stat().st_size for f in files.iterdir())
    assert set(first["stages"]) == {"plan", "run", "read", "score", "write", "commit",
                                    "prepare", "kernel", "outputs"}  # fmt: skip
    assert first["stages"]["run"] >= first["stages"]["commit"] and first["engine"] == "local"
    production = registry.get("churn@production")
    assert first["models"] == [
        {"ref": "churn@production", "sha256": production.sha256, "version": production.ref}
    ]
    assert "no-such-alias" in runs[2]["error"] and runs[2]["models"][0]["sha256"] == ""
    assert "NOT feasible" in runs[1]["error"]
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    assert len(report["history"]["runs"]) == 1  # the second "ok" kept the first's report
    table = runner.invoke(app, ["runs", "--registry", registry.uri], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "refused" in table.stdout and "history" in table.stdout


def test_drift_breaches_name_the_drifted_features_and_stop_before_publishing(
    tmp_path: Path, registry: Any
) -> None:
    """The model is registered with a sample; a later input with one feature shifted and
    one all null breaches [checks] for exactly those two, exits 5 and publishes nothing.
    Its files stay journaled: a rerun that only warns publishes them without scoring
    again, from the counts the journal kept."""
    import pandas as pd

    rng = np.random.default_rng(5)
    sample = pd.DataFrame(
        rng.normal(size=(5_000, FEATURES)), columns=[f"f{j}" for j in range(FEATURES)]
    )
    model, _ = registry.bundle("churn@production").restore()
    registry.register("drifty", model, sample=sample)
    checks = "\n[checks]\nmax_psi = 0.2\nmax_null_rate = 0.05\nmin_rows = 100\nfail = true\n"

    def run(folder: str, *, fail: bool = True) -> Any:
        folders = {"input": str(tmp_path / folder), "output": str(tmp_path / f"out-{folder}")}
        path = job_file(tmp_path, registry, name="drift", model="drifty@latest", **folders)
        path.write_text(path.read_text() + checks.replace("true", "true" if fail else "false"))
        return runner.invoke(app, ["run", str(path), "--no-progress"])

    write_rows(tmp_path / "same", 20_000)
    same = run("same")
    assert same.exit_code == 0, same.output
    report = json.loads((tmp_path / "out-same" / "_scoring_report.json").read_text())
    assert report["checks"]["breaches"] == []
    drift = {d["column"]: d for d in report["checks"]["drift"]}
    assert set(drift) == {f"f{j}" for j in range(FEATURES)} | {"probability", "label"}
    assert max(d["psi"] for d in drift.values()) < 0.05 and drift["f0"]["rows"] == 20_000

    shifted = write_rows(tmp_path / "shifted", 20_000)
    for part in shifted.iterdir():
        table = pq.read_table(part)
        table = table.set_column(4, "f3", pa.array(table.column("f3").to_numpy() + 2.0))
        table = table.set_column(6, "f5", pa.nulls(table.num_rows, pa.float32()))
        pq.write_table(table, part)
    stopped = run("shifted")
    assert stopped.exit_code == 5, stopped.output
    breached = {m for m in re.findall(r"feature '(f\d+)'", stopped.output)}
    assert breached == {"f3", "f5"}, stopped.output
    assert "f5' is 100.0% null" in stopped.output and "nothing published" in stopped.output
    out = tmp_path / "out-shifted"
    assert not (out / "_SUCCESS").exists() and not list(out.glob("*.parquet"))
    failed = json.loads((out / "_scoring_report.json").read_text())  # what stopped it
    assert failed["status"] == "failed" and len(failed["checks"]["breaches"]) == 3
    assert "Checks: drift against the reference" in (out / "_scoring_report.html").read_text()
    assert runner.invoke(app, ["run", str(tmp_path / "job.toml"), "--no-progress"]).exit_code == 5

    warned = run("shifted", fail=False)
    assert warned.exit_code == 0, warned.output
    assert "(20,000 rows resumed)" in warned.output  # published from the journal
    report = json.loads((out / "_scoring_report.json").read_text())
    features = {b.split("'")[1] for b in report["checks"]["breaches"] if b.startswith("feature")}
    assert features == {"f3", "f5"}
    assert (out / "_SUCCESS").exists()
    assert "Checks: drift against the reference" in (out / "_scoring_report.html").read_text()


def test_each_run_publishes_its_metrics_for_prometheus(
    tmp_path: Path, registry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """[metrics]: a node_exporter textfile, replaced by each run, and a Pushgateway
    (here a one-request HTTP server): rows, deadline margin, outcome, exit code."""
    import http.server
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    pushed: list[tuple[str, str]] = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            pushed.append((self.path, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Gateway)
    serving = threading.Thread(target=server.handle_request)
    serving.start()
    textfile = tmp_path / "node_exporter" / "scoring.prom"
    write_rows(tmp_path / "in", 3_000)
    path = job_file(tmp_path, registry, name="metered", deadline="1h")
    path.write_text(path.read_text() + f'[metrics]\ntextfile = "{textfile}"\n'
                    f'pushgateway = "127.0.0.1:{server.server_port}"\n')  # fmt: skip
    assert runner.invoke(app, ["run", str(path), "--no-progress"]).exit_code == 0
    serving.join()
    server.server_close()

    def samples(text: str) -> dict[str, float]:
        return {
            s.name + "".join(f"[{v}]" for k, v in s.labels.items() if k != "job"): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    found = samples(textfile.read_text())
    assert found["scoring_job_rows"] == 3_000 and found["scoring_job_success"] == 1
    assert found["scoring_job_outcome[ok]"] == 1 and found["scoring_job_outcome[failed]"] == 0
    assert 3_000 < found["scoring_job_deadline_margin_seconds"] <= 3_600
    assert pushed[0][0] == "/metrics/job/scoring_metered"
    assert samples(pushed[0][1])["scoring_job_exit_code"] == 0
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    path.write_text(path.read_text().replace('deadline = "1h"', f'deadline = "{passed}"')
                    .replace(f"127.0.0.1:{server.server_port}", "127.0.0.1:1"))  # fmt: skip
    assert runner.invoke(app, ["run", str(path), "--no-progress"]).exit_code == 3
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # The unreachable gateway only warned, naming it.
    assert any(w.startswith("could not publish the run's metrics to the Pushgateway "
                            "127.0.0.1:1: ") for w in warned), warned  # fmt: skip
    found = samples(textfile.read_text())  # replaced
    assert found["scoring_job_outcome[refused]"] == 1 and found["scoring_job_exit_code"] == 3


def _runs(seconds: list[float], *, outcome: str = "ok") -> list[Any]:
    from scoring._registry import RunRecord

    day = datetime(2026, 11, 1, 1, 0, tzinfo=timezone.utc)
    return [
        RunRecord(
            job="j",
            started_at=day + timedelta(days=i),
            outcome=outcome,
            exit_code=0,
            finished_at=day + timedelta(days=i, seconds=s),
        )
        for i, s in enumerate(seconds)
    ]


def test_the_trend_projects_when_the_window_is_missed() -> None:
    from scoring.jobs import trend

    growing = trend(_runs([600, 610, 620, 630]), window_seconds=1000)
    assert growing["seconds_per_day"] == pytest.approx(10)
    assert growing["projected_miss"][:10] == "2026-12-11"  # 630 s + 37 days x 10 s/day
    assert trend(_runs([600, 590, 600, 590]), window_seconds=1000)["projected_miss"] is None
    over = trend(_runs([900, 1000, 1100]), window_seconds=1000)
    assert over["projected_miss"][:10] == "2026-11-03"  # the fit is past it already
    assert trend(_runs([600, 700]), window_seconds=1000)["seconds_per_day"] is None
    assert trend(_runs([600, 700, 800])[:1] * 3, window_seconds=1000)["seconds_per_day"] is None
    assert trend(_runs([1, 2, 3], outcome="failed"), window_seconds=10)["seconds_per_day"] is None
    assert trend(_runs([600, 610, 620]), window_seconds=None)["projected_miss"] is None


def test_facade_imports_engines_on_first_use() -> None:
    import subprocess
    import sys

    code = (
        "import sys, scoring\n"
        "assert 'ray' not in sys.modules and 'pyspark' not in sys.modules\n"
        "assert callable(scoring.spark.register_udf) and callable(scoring.ray.score_dataset)\n"
        "assert callable(scoring.jobs.run_job)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _failure_report(out: Path) -> dict[str, Any]:
    data = json.loads((out / "_scoring_report.json").read_text())
    assert data["status"] == "failed" and (out / "_scoring_report.html").exists()
    assert not (out / "_SUCCESS").exists() and not list(out.glob("*.parquet"))  # unpublished
    return dict(data)


def test_a_refused_input_still_writes_a_report_of_the_failure(
    tmp_path: Path, registry: Any
) -> None:
    write_rows(tmp_path / "in", 4_000)
    bad = tmp_path / "in" / "part-2.parquet"
    pq.write_table(pq.read_table(bad).drop_columns(["f1"]), bad)
    result = runner.invoke(app, ["run", str(job_file(tmp_path, registry))])
    assert result.exit_code == 1 and "part-2.parquet" in result.output
    data = _failure_report(tmp_path / "out")
    assert "part-2.parquet" in data["error"] and data["files_done"] == 0
    assert data["rerun"].startswith("a rerun fails the same way until the cause above is fixed")


def test_a_run_failing_mid_way_reports_what_a_rerun_will_skip(
    tmp_path: Path, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(tmp_path / "in", 8_000, files=4)
    path = job_file(tmp_path, registry)
    real_open = scoring._journal.journal.Journal.open

    def failing_open(self: Any, fragment: Any) -> Any:
        if fragment.relpath == "part-2.parquet":
            raise OSError(28, "No space left on device", fragment.relpath)
        return real_open(self, fragment)

    monkeypatch.setattr(scoring._journal.journal.Journal, "open", failing_open)
    result = runner.invoke(app, ["run", str(path)])
    assert result.exit_code == 1 and "No space left on device" in result.output
    data = _failure_report(tmp_path / "out")
    journal = list((tmp_path / "out" / "_temporary" / "_journal").glob("*.json"))
    assert data["files_done"] == len(journal) and data["files_total"] == 4
    assert data["rerun"].startswith(f"a rerun resumes: it skips the {len(journal)} file(s)")
    monkeypatch.undo()  # the disk has room again
    again = run_job(load_job(path), progress=False)
    assert again.report.rows_skipped == data["rows_done"]
    assert again.report.rows == 8_000 - data["rows_done"]
    assert json.loads((tmp_path / "out" / "_scoring_report.json").read_text())["rows"] > 0


def test_a_deadline_warning_is_resolved_only_by_a_run_that_met_its_deadline() -> None:
    from scoring.jobs._report import DEADLINE_WARNING, _warnings

    early = f"{DEADLINE_WARNING}: projected finish 02:10, deadline 02:00 (1 of 9 rows done)"
    other = "metrics not published: the Pushgateway at 127.0.0.1:9 refused the connection"
    assert _warnings([early, other], met_deadline=True) == {
        "warnings": [other], "resolved_warnings": [early]
    }  # fmt: skip
    assert _warnings([early, other], met_deadline=False) == {
        "warnings": [early, other], "resolved_warnings": []
    }  # fmt: skip

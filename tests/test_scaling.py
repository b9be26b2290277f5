"""``[autoscale]`` without a cluster: the job file's bounds, the planner's count, the
wait for workers (an autoscaler whose nodes join as a test says), the held and released
request, Spark's dynamic allocation settings.  The same on a real autoscaling Ray
cluster: tests/test_autoscale.py."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import scoring
from scoring._engines.ray import RayEngine
from scoring._engines.scaling import Autoscale, bundles_that_fit
from scoring._engines.spark import SparkAllocation, SparkOptions
from scoring.errors import DeadlineError, EngineError, JobFileError
from scoring.jobs import _planner as planner
from scoring.jobs import load_job, make_plan
from scoring.jobs._planner import Plan, workers_needed
from scoring.jobs._scaling import Scaling, scaled

from .test_score_parquet import model_frame, write_input


def _job_file(tmp_path: Path, body: str, *, engine: str = "ray") -> Path:
    job = tmp_path / "job.toml"
    job.write_text(f'name = "j"\nmodel = "m@1"\ninput = "in"\noutput = "out"\n'
                   f'engine = "{engine}"\n{body}')  # fmt: skip
    return job


@pytest.mark.parametrize(("engine", "body", "said"), [
    ("local", "[autoscale]\nmax_workers = 3\n", "engine 'local' runs in one process"),
    ("ray", "workers = 2\n[autoscale]\nmax_workers = 3\n", "workers = 2 fixes the count"),
    ("ray", "[autoscale]\nmin_workers = 4\nmax_workers = 3\n", "more than max_workers 3"),
    ("ray", "[autoscale]\nmin_workers = 0\nmax_workers = 3\n", "autoscale.min_workers"),
    ("spark", "[autoscale]\nmax_workers = 3\nwait = '0s'\n", "positive duration"),
    ("ray", "[autoscale]\nmin_workers = 1\n", "autoscale.max_workers"),
    ("ray", "[autoscale]\nmax_workers = 2\nmaximum = 3\n", "unknown key"),
])  # fmt: skip
def test_bad_autoscale_tables_are_refused_in_one_line(
    tmp_path: Path, engine: str, body: str, said: str
) -> None:
    with pytest.raises(JobFileError) as refused:
        load_job(_job_file(tmp_path, body, engine=engine))
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_good_table_reads_as_its_bounds(tmp_path: Path) -> None:
    spec = load_job(_job_file(tmp_path, "[autoscale]\nmax_workers = 5\nwait = '90s'\n"))
    assert spec.autoscale == Autoscale(min_workers=1, max_workers=5, wait="90s")
    assert spec.autoscale.wait_seconds == 90 and spec.autoscale.clamp(9) == 5
    assert load_job(_job_file(tmp_path, "")).autoscale is None


def test_workers_needed() -> None:
    assert workers_needed(1000, rate=10.0, seconds=60.0, fixed=10.0) == 2  # 100 s of work
    assert workers_needed(1000, rate=10.0, seconds=110.0, fixed=10.0) == 1
    assert workers_needed(1000, rate=10.0, seconds=10.0, fixed=10.0) is None  # no time left
    assert workers_needed(1000, rate=10.0, seconds=None, fixed=10.0) is None


def test_bundles_that_fit_never_split_a_worker() -> None:
    nodes = [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 1.0}, {"CPU": 3.0, "GPU": 2.0}]
    assert bundles_that_fit(nodes, {"CPU": 1.0, "GPU": 1.0}) == 3
    assert bundles_that_fit(nodes, {"CPU": 2.0}) == 3
    assert bundles_that_fit(nodes, {"CPU": 4.0}) == 1
    assert bundles_that_fit([], {"CPU": 1.0}) == 0


@pytest.fixture(scope="module")
def job_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scaled")
    model, X = model_frame("xgb_clf", rows=40_000)
    write_input(X, root / "in", files=4)
    scoring.Registry(root / "registry").register("m", model)
    return root


def _plan_of(root: Path, body: str, deadline: str | None = None) -> Plan:
    job = root / "job.toml"
    job.write_text(f'name = "j"\nmodel = "m@1"\ninput = "in"\noutput = "out"\n'
                   f'registry = "registry"\nengine = "ray"\ndevice = "cpu"\n{body}')  # fmt: skip
    spec = load_job(job)
    if deadline is not None:
        spec = spec.model_copy(update={"deadline": deadline})
    return make_plan(spec)


def test_the_plan_asks_for_what_the_deadline_needs_within_the_bounds(
    job_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a rate of 400 rows/s per worker (100 s of one worker's work; the measurement
    itself is the cluster test's): a window that needs about 2.5 workers plans 3; a long
    one plans min_workers; one needing more than max_workers is not feasible and says
    so, naming the maximum."""
    monkeypatch.setattr(planner, "_measure", lambda *_, **__: (400.0, 4000.0))
    table = "[resources]\ncpus = 1\n[autoscale]\nmin_workers = 2\nmax_workers = 4\n"
    free = _plan_of(job_folder, table)  # no deadline: the fewest
    assert free.workers == 2 and free.max_workers == 4 and free.feasible
    assert free.rows / free.rows_per_second == 100
    fixed = free.startup_seconds + free.compile_seconds + free.commit_seconds
    # A deadline of fixed + 100 s / share, less what planning itself takes (counted).
    for share, expected in [(0.8, 2), (2.4, 3), (3.4, 4), (4.4, None)]:
        plan = _plan_of(job_folder, table, deadline=f"{round(fixed + 100 / share)}s")
        assert plan.workers_needed == math.ceil(share) and plan.max_workers == 4
        if expected is None:
            assert not plan.feasible and plan.workers == 4
            assert "needs 5 workers, more than [autoscale] max_workers 4" in plan.summary()
        else:
            assert plan.feasible and plan.workers == expected, plan.summary()
            assert f"on {expected} workers (needs {math.ceil(share)}" in plan.summary()


class _Nodes:
    """An autoscaler whose workers join as the test says: ``join`` sets how many."""

    observes = True

    def __init__(self, renew: float | None = 0.01):
        self.shape = {"CPU": 1.0}
        self.renew_seconds = renew
        self.joined = 0
        self.requests: list[int] = []
        self.released = threading.Event()
        self.renewed = threading.Event()

    def request(self, workers: int) -> None:
        if self.requests and workers == self.requests[-1]:
            self.renewed.set()
        self.requests.append(workers)

    def granted(self) -> int:
        return self.joined

    def options(self, workers: int) -> Any:
        return SparkOptions(conf={"workers": str(workers)})  # any engine's options

    def release(self) -> None:
        self.released.set()


def _fake(monkeypatch: pytest.MonkeyPatch, nodes: _Nodes) -> None:
    monkeypatch.setattr(RayEngine, "autoscaler", lambda self, options, **_: nodes)


def _scaling_plan(tmp_path: Path, *, rows: int, rate: float, workers: int) -> tuple[Any, Plan]:
    spec = load_job(_job_file(tmp_path, "[autoscale]\nmax_workers = 4\nwait = '1h'\n"))
    plan = Plan(job="j", engine="ray", device="cpu", backend="tensor", rows=rows, files=1,
                rows_per_second=rate, workers=workers, startup_seconds=1.0,
                compile_seconds=1.0, commit_seconds=0.0, estimated_seconds=1.0,
                deadline=None, available_seconds=None, workers_needed=workers, feasible=True,
                cached=True, min_workers=1, max_workers=4)  # fmt: skip
    return spec, plan


def test_the_run_waits_for_its_workers_holds_them_and_releases_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import datetime, timedelta, timezone

    nodes = _Nodes()
    _fake(monkeypatch, nodes)
    spec, plan = _scaling_plan(tmp_path, rows=1000, rate=1.0, workers=3)
    deadline = datetime.now(timezone.utc) + timedelta(hours=1)
    joins = iter([0, 1, 1, 3])

    def sleep(_: float) -> None:  # each poll: the next count of joined workers
        nodes.joined = next(joins)

    with scaled(spec, plan, deadline=deadline, sleep=sleep) as options:
        assert options["conf"] == {"workers": "3"}  # the run's options: three workers
        assert nodes.renewed.wait(30)  # held: the same request sent again
        assert not nodes.released.is_set()
    assert nodes.released.is_set() and nodes.requests[0] == 3
    assert plan.scaling is not None
    timeline = plan.scaling["timeline"]
    assert [p["granted"] for p in timeline] == [0, 1, 3]
    assert all(p["requested"] == 3 and p["needed"] == 1 for p in timeline)
    assert 0 < plan.scaling["worker_seconds"] <= 3 * plan.scaling["held_seconds"]


def test_a_run_that_fails_releases_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = _Nodes(renew=None)
    nodes.joined = 2
    _fake(monkeypatch, nodes)
    spec, plan = _scaling_plan(tmp_path, rows=1000, rate=1.0, workers=2)
    with pytest.raises(RuntimeError, match="scoring failed"), scaled(spec, plan, deadline=None):
        raise RuntimeError("scoring failed")
    assert nodes.released.is_set() and plan.scaling["granted"] == 2


def test_too_few_joined_is_refused_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of the three needed joins within the wait: with one the run would miss the
    deadline, so it is refused (exit 3's error) and the request withdrawn; with no
    deadline, none at all is an error naming the shape."""
    from datetime import datetime, timedelta, timezone

    nodes = _Nodes(renew=None)
    nodes.joined = 1
    _fake(monkeypatch, nodes)
    spec, plan = _scaling_plan(tmp_path, rows=10_000, rate=1.0, workers=3)
    spec = spec.model_copy(update={"autoscale": replace_wait(spec, "1s")})
    deadline = datetime.now(timezone.utc) + timedelta(seconds=5000)
    refused = pytest.raises(DeadlineError, match=r"1 of the 3 workers it needs joined within")
    with refused, scaled(spec, plan, deadline=deadline):
        pytest.fail("ran without its workers")
    assert nodes.released.is_set()
    nodes.joined = 0
    nodes.released.clear()
    none = pytest.raises(EngineError, match=r"no worker of 1 CPU joined the cluster within 1 s")
    with none, scaled(spec, plan, deadline=None):
        pytest.fail("ran without workers")
    assert nodes.released.is_set()


def replace_wait(spec: Any, wait: str) -> Autoscale:
    return Autoscale(min_workers=spec.autoscale.min_workers,
                  max_workers=spec.autoscale.max_workers, wait=wait)  # fmt: skip


def test_scaling_counts_granted_workers_up_to_those_requested() -> None:
    record = Scaling({"CPU": 1.0}, Autoscale(max_workers=4), began=0.0)
    record.events = [{"seconds": 0.0, "needed": 2, "requested": 2, "granted": 0},
                     {"seconds": 10.0, "needed": 2, "requested": 2, "granted": 3},
                     {"seconds": 20.0, "needed": 2, "requested": 2, "granted": 1}]  # fmt: skip
    record.released = 30.0
    assert record.worker_seconds() == 0 * 10 + 2 * 10 + 1 * 10


def test_spark_gets_dynamic_allocation_within_the_bounds() -> None:
    allocation = SparkAllocation(SparkOptions(conf={"spark.executor.cores": "4"}),
                                 bounds=Autoscale(min_workers=2, max_workers=10))  # fmt: skip
    assert allocation.shape == {"CPU": 4.0} and not allocation.observes
    allocation.request(6)
    assert allocation.granted() == 6
    conf = allocation.options(6).conf
    assert conf["spark.executor.cores"] == "4"
    assert conf["spark.dynamicAllocation.enabled"] == "true"
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert (conf["spark.dynamicAllocation.minExecutors"],
            conf["spark.dynamicAllocation.initialExecutors"],
            conf["spark.dynamicAllocation.maxExecutors"]) == ("2", "6", "6")  # fmt: skip


def test_plan_without_autoscale_is_unchanged(job_folder: Path) -> None:
    plan = _plan_of(job_folder, "workers = 3\n", deadline="1h")
    assert plan.workers == 3 and plan.max_workers is None and plan.scaling is None
    assert "[autoscale]" not in plan.summary()
    assert replace(plan, scaling=None).scaled() is None

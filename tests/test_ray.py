"""The Ray engine and ``scoring.ray.score_dataset`` on a local 2-CPU Ray instance."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._catalog import reference_profile
from scoring._engines import plan
from scoring._engines.placement import (
    PLACEMENT_ONLY,
    placement_only,
    scoring_device,
    worker_label,
)
from scoring._engines.ray_cluster import check_fits
from scoring._frameworks import import_model
from scoring.errors import ConfigError, MissingColumnError, OutputError, ScoringError
from scoring.ray import plan_workers

from .test_score_parquet import assert_native_parity, model_frame, write_input

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(300)  # a starved actor pool hangs forever: fail instead


#: How long a test's actors may take to give their CPUs back before the next test gets a
#: Ray instance of its own instead (a cost, never a failure).
RELEASE_GRACE_S = 5.0


@pytest.fixture(scope="module")
def _module_ray() -> Iterator[None]:
    """The module's tests share one Ray instance (starting one costs seconds; the file
    once took 15); it is shut down after them."""
    yield
    ray.shutdown()


@pytest.fixture
def ray_session(_module_ray: None) -> Iterator[Any]:
    """The module's Ray instance, all its CPUs free when the test starts: an actor pool a
    test leaves behind (a failed dataset's is freed only when Ray gets round to it) would
    take the next test's CPUs, and an unschedulable pool waits forever.  So each test
    ends by waiting for its actors to give their CPUs back; one that keeps them has its
    instance shut down, and the next test starts a fresh one."""
    if not ray.is_initialized():
        os.environ.setdefault("RAY_worker_niceness", "0")  # as scoring.ray.connect() does
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    gc.collect()  # a finished dataset's executor, and with it its actor pool
    deadline = time.monotonic() + RELEASE_GRACE_S
    while ray.available_resources().get("CPU", 0.0) < ray.cluster_resources()["CPU"]:
        if time.monotonic() > deadline:
            ray.shutdown()
            break
        time.sleep(0.05)


def test_worker_plan_leaves_cpus_for_reads() -> None:
    two = {"CPU": 2.0}
    engine = plan_workers(two, reserve_reads=False)
    assert (engine.workers, engine.num_cpus, engine.num_gpus, engine.device) == (1, 2.0, 0, "cpu")
    dataset = plan_workers(two, reserve_reads=True)
    assert dataset.workers * dataset.num_cpus <= 1.0  # one CPU stays free for reads
    many = plan_workers(two, num_workers=4, reserve_reads=True)
    assert many.workers == 4 and many.workers * many.num_cpus <= 1.0
    big = plan_workers({"CPU": 64.0}, reserve_reads=True)
    assert big.workers == 15 and big.workers * big.num_cpus == 63.0
    gpus = plan_workers({"CPU": 16.0, "GPU": 4.0})
    assert (gpus.workers, gpus.num_gpus, gpus.device) == (4, 1.0, "cuda")
    assert gpus.workers * gpus.num_cpus <= 8.0
    assert plan_workers({"CPU": 16.0, "GPU": 4.0}, device="cpu").device == "cpu"
    with pytest.raises(ScoringError, match="no GPUs"):
        plan_workers(two, device="cuda")


def test_no_actor_asks_for_more_cpus_than_a_node_has() -> None:
    """Two 1-CPU nodes: one actor of 2 CPUs would wait for a node forever."""
    two_nodes = plan_workers({"CPU": 2.0}, reserve_reads=False, node_cpus=[1.0, 1.0])
    assert (two_nodes.workers, two_nodes.num_cpus) == (2, 1.0)
    one_node = plan_workers({"CPU": 2.0}, reserve_reads=False, node_cpus=[2.0])
    assert (one_node.workers, one_node.num_cpus) == (1, 2.0)  # as without node sizes
    asked = plan_workers({"CPU": 8.0}, num_workers=1, reserve_reads=False, node_cpus=[4.0] * 2)
    assert (asked.workers, asked.num_cpus) == (1, 4.0)
    with pytest.raises(ConfigError, match="num_cpus=3 per actor, but the largest node"):
        check_fits(dataclasses.replace(two_nodes, num_cpus=3.0), [1.0, 1.0])


def test_a_worker_scores_on_the_gpu_its_cluster_gave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray sets an actor's CUDA_VISIBLE_DEVICES to its GPUs: GPU 3 is its cuda:0.  A
    Spark executor may see several, and its task takes the one it was given."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert scoring_device("cuda", ["3"]) == "cuda:0"
    assert scoring_device("auto", ["3"]) == "cuda:0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert scoring_device("cuda", ["3"]) == "cuda:1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert scoring_device("cuda", ["1"]) == "cuda:1"
    assert scoring_device("auto", []) == "cpu" and scoring_device("cuda", []) == "cuda"
    assert scoring_device("cuda:2", ["1"]) == "cuda:2" and scoring_device("cpu", ["1"]) == "cpu"
    assert scoring_device("cuda", ["1"], placement=True) == "cpu"
    assert worker_label(["0", "1"]).endswith(f":{os.getpid()} gpu 0,1")
    assert worker_label([], process=False) == socket.gethostname()
    monkeypatch.setenv(PLACEMENT_ONLY, "1")
    assert placement_only()
    monkeypatch.setenv(PLACEMENT_ONLY, "0")
    assert not placement_only()


@pytest.mark.parametrize("name", ["xgb_multi", "lgb_cat_frame", "sk_rf_clf"])
def test_ray_engine_matches_native(tmp_path: Path, ray_session: Any, name: str) -> None:
    model, X = model_frame(name, rows=4000)
    frame = write_input(X, tmp_path / "in", files=4)
    reference = reference_profile(model, import_model(model), X.iloc[:1000])
    result = scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, engine="ray",
                                   keep=["id"], progress=False,
                                   run=scoring.RunOptions(monitor=reference))  # fmt: skip
    assert result.engine == "ray" and result.rows == 4000
    assert sum(result.workers.values()) == 4000
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row once, files in order
    assert_native_parity(out, name, X)
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == 4000 and (tmp_path / "out" / "_SUCCESS").exists()
    assert manifest["metadata"]["scoring._model.sha256"] == result.sha256
    # Drift counted in the actors, from their journal entries, as the local engine counts
    # with the backend they picked (``auto`` measures in each process: probabilities of
    # native and tensor may differ in the last bits, and a bin edge between them).
    local = scoring.score_parquet(tmp_path / "in", tmp_path / "local", model, keep=["id"],
                                  progress=False, run=scoring.RunOptions(monitor=reference),
                                  backend=result.backend)  # fmt: skip
    assert result.drift_counts == local.drift_counts and local.drift_counts is not None
    assert all(sum(bins) == 4000 for bins in local.drift_counts.values())


def test_an_actor_with_two_files_at_once_writes_what_the_local_engine_writes(
    tmp_path: Path, ray_session: Any
) -> None:
    """The actor's one pipeline, fed file after file, two in flight: the same bytes in
    every output file as the local engine, every file once."""
    model, X = model_frame("lgb_clf", rows=6000)
    write_input(X, tmp_path / "in", files=6)
    outputs = {}
    for engine in ("local", "ray"):
        result = scoring.score_parquet(tmp_path / "in", tmp_path / engine, model, engine=engine,
                                       keep=["id"], backend="native", progress=False,
                                       engine_options={"files_at_once": 2})  # fmt: skip
        assert result.rows == 6000
        outputs[engine] = {p.name: p.read_bytes() for p in (tmp_path / engine).glob("*.parquet")}
    assert len(outputs["ray"]) == 6 and outputs["ray"] == outputs["local"]


def test_registered_model_through_the_cli(tmp_path: Path, ray_session: Any) -> None:
    from typer.testing import CliRunner

    from scoring.cli import app

    model, X = model_frame("xgb_clf", rows=2000)
    scoring.Registry(tmp_path / "reg").register("churn", model)
    write_input(X, tmp_path / "in", files=2)
    args = ["score", "--model", "churn@1", "--input", str(tmp_path / "in"), "--output",
            str(tmp_path / "out"), "--keep", "id", "--engine", "ray", "--registry",
            str(tmp_path / "reg")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2,000 rows" in result.output and "per worker" in result.output
    meta = pq.read_schema(tmp_path / "out" / "part-0.parquet").metadata
    assert meta[b"scoring._model"] == b"churn@1"
    again = CliRunner().invoke(app, args)  # the same job again: nothing to do
    assert again.exit_code == 0 and "nothing to do" in again.output


def test_missing_column_is_refused_before_writing(tmp_path: Path, ray_session: Any) -> None:
    model, X = model_frame("lgb_cat_frame", rows=500)
    write_input(X.drop(columns=["feat_2"]), tmp_path / "in", files=1)
    with pytest.raises(MissingColumnError, match="feat_2"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, engine="ray",
                              progress=False)  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_a_failure_inside_an_actor_is_raised_as_it_was(tmp_path: Path, ray_session: Any) -> None:
    model, X = model_frame("lgb_reg", rows=1000)
    write_input(X, tmp_path / "in", files=2)
    (tmp_path / "out" / "_temporary").mkdir(parents=True)
    # A file where the journal's folder goes: the actor fails journaling its first file.
    (tmp_path / "out" / "_temporary" / "_journal").write_text("not a folder")
    with pytest.raises(OutputError) as raised:  # the output's own error, named, with its path
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, engine="ray",
                              keep=["id"], progress=False)  # fmt: skip
    said = str(raised.value)  # as the actor said it: not Ray Data's wrapper
    assert f"File exists ({tmp_path / 'out' / '_temporary' / '_journal'})" in said, said
    assert "\n" not in said and "RayTaskError" not in said
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_score_dataset_is_lazy_and_matches_native(tmp_path: Path, ray_session: Any) -> None:
    from scoring.ray import score_dataset

    model, X = model_frame("lgb_cat_frame", rows=3000)
    write_input(X, tmp_path / "in", files=3)
    ds = ray.data.read_parquet(str(tmp_path / "in"))
    scored = score_dataset(ds, model, keep=["id"], batch_rows=700)
    out = scored.to_pandas().sort_values("id").reset_index(drop=True)
    assert list(out.columns[:1]) == ["id"] and len(out) == 3000
    assert_native_parity(out, "lgb_cat_frame", X)
    with pytest.raises(Exception, match="feat_1"):  # named by the first batch's error
        score_dataset(ds.drop_columns(["feat_1"]), model).materialize()


def test_ray_publishes_what_an_interrupted_run_journaled(
    tmp_path: Path, ray_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scoring._formats.folder import FolderPublisher

    model, X = model_frame("xgb_clf", rows=1500)
    scoring.Registry(tmp_path / "reg").register("churn", model)
    write_input(X, tmp_path / "in", files=3)
    args = (tmp_path / "in", tmp_path / "out", "churn@1")

    def crash(*_: Any, **__: Any) -> None:
        raise OSError("killed before publishing")

    with monkeypatch.context() as patch:
        patch.setattr(FolderPublisher, "publish", crash)
        with pytest.raises(OSError):
            scoring.score_parquet(*args, registry=tmp_path / "reg", keep=["id"], progress=False)
    result = scoring.score_parquet(*args, engine="ray", registry=tmp_path / "reg", keep=["id"],
                                   progress=False)  # fmt: skip
    assert result.rows == 0 and result.rows_skipped == 1500
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["metadata"]["scoring._model"] == "churn@1"
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(1500)) and (tmp_path / "out" / "_SUCCESS").exists()


def test_killed_actor_leaves_complete_duplicate_free_output(
    tmp_path: Path, ray_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, X = model_frame("xgb_clf", rows=40_000)
    write_input(X, tmp_path / "in", files=40)
    journal = tmp_path / "out" / "_temporary" / "_journal"
    hold = tmp_path / "hold"
    hold.mkdir()
    # Each actor announces itself after its first file and waits: the kill lands mid-job
    # by that event, however fast or slow the machine is.
    held = plan.Hooks(on_file_journaled=plan.HoldAfterFirstFile(str(hold)))
    monkeypatch.setattr(plan, "HOOKS", held)
    outcome: dict[str, Any] = {}

    def job() -> None:
        try:
            outcome["result"] = scoring.score_parquet(
                tmp_path / "in", tmp_path / "out", model, engine="ray", keep=["id"],
                progress=False,
            )  # fmt: skip
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=job)
    thread.start()
    try:
        # The event: actors hold after their first file, and every journaled file is
        # a holder's (another actor may have journaled one and not yet said so).
        while True:
            held = [int(p.name) for p in hold.iterdir()]
            if held and len(list(journal.glob("*.json"))) == len(held):
                break
            assert thread.is_alive(), outcome
            time.sleep(0.01)
        assert len(held) < 40  # files remain to be scored
        for pid in held:
            os.kill(pid, signal.SIGKILL)
    finally:  # even when this test fails: a job left waiting outlives the Ray session
        (hold / "release").touch()  # restarted actors go straight on
        thread.join()
    assert "error" not in outcome, outcome
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert len(ids) == 40_000 and sorted(ids.tolist()) == list(range(40_000))
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["_SUCCESS", "_scoring_manifest.json", *(f"part-{i}.parquet" for i in range(40))]
    )
    # The killed actors' first files count for nobody: a restarted actor (a new
    # process) scored every row that reached the output.
    assert not set(outcome["result"].workers) & {f"{socket.gethostname()}:{p}" for p in held}


def test_after_a_failure_of_rays_own_the_files_not_journaled_go_to_a_new_job(
    tmp_path: Path, ray_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy cluster Ray Data may cancel an actor still starting and fail the job for
    it.  The journal, not Ray, proves a file: the files it lacks go to a fresh job, and
    a run fails only when Ray fails every attempt, publishing nothing."""
    from scoring._engines import ray as engine

    model, X = model_frame("lgb_clf", rows=3000)
    frame = write_input(X, tmp_path / "in", files=3)
    scored_files = engine._scored_files
    jobs: list[int] = []

    class Failing:
        """A Ray job that reports ``rows``, then fails."""

        def __init__(self, rows: list[Any]):
            self.rows = rows

        def iter_rows(self) -> Any:
            yield from self.rows
            raise ray.exceptions.RaySystemError(
                "The actor never ran - it was cancelled before it started running."
            )

    def scoring_then_failing(run: Any, spec: Any, plan: Any, *, files: int) -> Any:
        """The first job scores ``files`` files (reporting one), then fails."""
        jobs.append(len(run.todo))
        if len(jobs) > 1:
            return scored_files(run, spec, plan)
        part = dataclasses.replace(run, todo=run.todo[:files])
        return Failing(list(scored_files(part, spec, plan).iter_rows())[:1])

    def score(out: str) -> Any:
        return scoring.score_parquet(tmp_path / "in", tmp_path / out, model, engine="ray",
                                     keep=["id"], progress=False)  # fmt: skip

    monkeypatch.setattr(engine, "_scored_files", lambda *_: Failing([]))
    with pytest.raises(
        ScoringError, match=f"the Ray job failed {engine.RAY_ATTEMPTS} times"
    ) as failed:
        score("never")
    assert "RAY_AUTH_MODE" in str(failed.value)  # what cancels every actor at once
    assert not (tmp_path / "never" / "_SUCCESS").exists()
    for files, retried in [(1, [2]), (3, [])]:  # a file left to do; every file journaled
        jobs.clear()
        monkeypatch.setattr(
            engine, "_scored_files", lambda *a, n=files: scoring_then_failing(*a, files=n)
        )
        result = score(f"out-{files}")
        assert jobs == [3, *retried]
        assert result.rows == 3000 and sum(result.workers.values()) == 3000
        assert ("(not reported by Ray)" in result.workers) == (files == 3)
        out = pq.read_table(tmp_path / f"out-{files}").to_pandas()
        np.testing.assert_array_equal(out["id"], frame["id"])  # every row once
        assert_native_parity(out, "lgb_clf", X)


def test_a_set_of_models_on_ray_matches_the_local_engine(tmp_path: Path, ray_session: Any) -> None:
    import pandas as pd

    from .test_many_models import _input, _models

    models = {k: v for k, v in _models().items() if k != "rf"}
    listed = [{"model": m, "prefix": k} for k, m in models.items()]
    write_input(_input(models), tmp_path / "in", files=4)
    args = {"keep": ["id"], "backend": "tensor", "progress": False}
    result = scoring.score_parquet(tmp_path / "in", tmp_path / "out", listed, engine="ray",
                                   **args)  # fmt: skip
    local = scoring.score_parquet(tmp_path / "in", tmp_path / "local", listed,
                                  **args)  # fmt: skip
    assert result.sha256 == local.sha256 and result.backend == "tensor"
    want = pq.read_table(tmp_path / "local").to_pandas()
    pd.testing.assert_frame_equal(pq.read_table(tmp_path / "out").to_pandas(), want)
    scored = scoring.ray.score_dataset(ray.data.read_parquet(str(tmp_path / "in")), listed,
                                       keep=["id"], backend="tensor")  # fmt: skip
    got = scored.to_pandas().sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(
        got[want.columns], want, check_dtype=False, check_categorical=False
    )


def test_score_dataset_writes_contributions(tmp_path: Path, ray_session: Any) -> None:
    from scoring.ray import score_dataset

    model, X = model_frame("lgb_cat_frame", rows=2000)
    write_input(X, tmp_path / "in", files=2)
    ds = ray.data.read_parquet(str(tmp_path / "in"))
    scored = score_dataset(ds, model, keep=["id"], outputs="default+contributions")
    out = scored.to_pandas().sort_values("id").reset_index(drop=True)
    expected = scoring.compile(model, backend="native").predict_contributions(X)
    classes = scoring.compile(model, backend="native").forest.classes
    names = [f"contrib_{k}_{c}" for k in classes for c in [*X.columns, "bias"]]
    got = out[names].to_numpy(dtype=np.float64)  # Ray's frames hold pyarrow dtypes
    np.testing.assert_allclose(got, expected.reshape(len(X), -1), atol=1e-9)
    with pytest.raises(ConfigError, match="'reason' is not an output"):
        score_dataset(ds, model, outputs=["reason"])


@pytest.mark.parametrize("backend", ["native", "tensor"])
def test_a_zero_row_file_among_others_on_ray(
    tmp_path: Path, ray_session: Any, backend: str
) -> None:
    from .test_schema_drift import test_a_zero_row_file_among_others_is_scored_as_zero_rows

    test_a_zero_row_file_among_others_is_scored_as_zero_rows(tmp_path, backend, engine="ray")


#: A Ray job from a fresh process (its own local Ray instance), as a user starts one.
_FRESH_RAY_JOB = """
import sys
import numpy as np, pandas as pd, xgboost as xgb, scoring
X = pd.DataFrame(np.random.default_rng(0).normal(size=(2000, 4)), columns=list("abcd"))
model = xgb.XGBClassifier(n_estimators=3).fit(X, X.a > 0)
X.assign(id=range(2000)).to_parquet(sys.argv[1] + "/a.parquet")
scoring.score_parquet(sys.argv[1], sys.argv[2], model, engine="ray", progress=False)
print("scored")
"""


def test_ray_s_own_log_lines_stay_out_of_the_terminal(tmp_path: Path) -> None:
    """Ray's C++ core worker logs an error-level line about actor arguments on every
    job; the user sees only the product's output (``--debug`` keeps Ray's lines)."""
    import subprocess
    import sys

    (tmp_path / "in").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND_LOG_LEVEL",)}
    env["SCORING_DEBUG"] = "0"
    done = subprocess.run([sys.executable, "-c", _FRESH_RAY_JOB, str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=280)  # fmt: skip
    assert done.returncode == 0 and "scored" in done.stdout, done.stderr[-2000:]
    assert "core_worker" not in done.stderr, done.stderr[-2000:]
    assert "(raylet)" not in done.stderr, done.stderr[-2000:]  # the daemons' lines too


def test_progress_follows_the_actors_batch_by_batch(
    ray_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The driver's progress moves while an actor is still inside its job: the actor
    holds after its first file (before Ray hears the file is done), and by then the
    driver's progress already counts that file's rows, which only the actor's own counter
    could tell it; its log lines (stderr not a terminal) say so as the local engine's
    do.  Then the run ends with every row counted once."""
    from scoring import _progress
    from scoring._engines.ray_progress import RowCounter, Sender

    model, X = model_frame("xgb_clf", rows=6000)
    write_input(X, tmp_path / "in", files=2)
    first = pq.ParquetFile(tmp_path / "in" / "part-0.parquet").metadata.num_rows
    hold = tmp_path / "hold"
    hold.mkdir()
    holding = plan.Hooks(on_file_journaled=plan.HoldAfterFirstFile(str(hold)))
    monkeypatch.setattr(plan, "HOOKS", holding)
    monkeypatch.setattr(_progress, "LOG_EVERY_S", 0.0)  # a line at every update
    seen, moved = [], threading.Event()

    def watch(seconds: float, rows: int) -> None:
        seen.append(rows)
        if rows >= first and not (hold / "release").exists():
            moved.set()

    done: dict[str, Any] = {}

    def run() -> None:
        done["report"] = scoring.score_parquet(
            tmp_path / "in", tmp_path / "out", model, engine="ray", keep=["id"],
            engine_options={"num_workers": 1, "files_at_once": 1}, progress=True,
            run=scoring.RunOptions(on_progress=watch),
        )  # fmt: skip

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert moved.wait(240), f"the driver's progress did not move while held: {seen}"
    finally:
        (hold / "release").touch()
        runner.join()
    assert done["report"].rows == 6000 and seen[-1] == 6000
    assert seen == sorted(seen)  # never backwards
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " scoring: " in ln]
    assert f"scoring: {first:,}/6,000 rows" in "\n".join(lines), lines
    assert lines[-1].split(" scoring: ")[1].startswith("6,000/6,000 rows"), lines
    # A pipeline's progress reports its cumulative rows; the counter gets the new ones.
    counter, sent = RowCounter(), []
    sender = Sender(SimpleNamespace(add=SimpleNamespace(remote=sent.append)))
    for rows in (100, 100, 250):
        sender(0.0, rows)
    for rows in sent:
        counter.add(rows)
    assert sent == [100, 150] and counter.total() == 250

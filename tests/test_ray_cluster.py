"""The Ray engine on a real cluster of two nodes (``ray start --head`` and a second
``ray start --address``, one CPU each), not the single-process Ray of test_ray.py
(``pytest -m cluster`` selects the cluster tests).  ``ray start --head`` turns token
authentication on (Ray 2.60), and a driver reads its mode when Ray is imported: the
nodes take the mode conftest.py fixes for the session (token, Ray's default, with the
token Ray keeps in ~/.ray/auth_token), since a driver whose mode differs from the
cluster's fails.

What outside runs found here: the default plan sized one actor from the cluster's two
CPUs, which no node has, and Ray waited for such a node forever; and a job on S3,
killed and run again, scored everything and then failed, the driver's cached listing
hiding what the actors had journaled."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._engines.placement import PLACEMENT_ONLY
from scoring.errors import ConfigError

from .test_object_store import read_s3, write_s3_input
from .test_score_parquet import assert_native_parity, cuda_job, model_frame, write_input

pytest.importorskip("ray")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
RAY = str(Path(sys.executable).parent / "ray")
SCORING = str(Path(sys.executable).parent / "scoring")
GPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """Two nodes on 127.0.0.1 of one CPU and two logical GPUs each (as ``ray start
    --num-gpus`` declares them on any machine), sharing the driver's token: the address.
    Each node's processes are a session of their own, ended by signal afterwards: not
    ``ray stop``, which ends every Ray on the machine (the suite's other process may be
    running one)."""
    import ray

    ray.shutdown()  # a session this process still holds would be used instead of the address
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--num-gpus={GPUS_PER_NODE}",
              "--disable-usage-stats"]  # fmt: skip
    temp = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths have a limit
    if os.environ["RAY_AUTH_MODE"] == "token":  # as a local ray.init() does when none exists
        _ray("get-auth-token", "--generate")
    sessions: list[int] = []
    try:
        sessions.append(_ray("start", "--head", f"--port={port}", "--include-dashboard=false",
                             f"--temp-dir={temp}", *common))  # fmt: skip
        sessions.append(_ray("start", f"--address=127.0.0.1:{port}", *common))
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        _end_sessions(sessions)


def _ray(*args: str, env: dict[str, str] | None = None) -> int:
    """``ray`` with ``args`` (and ``env`` added to the environment), in a session of its
    own: the session's id (what the processes it leaves running share)."""
    # No AWS settings: actors reach S3 only with the options their job ships them.
    nodes = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | (env or {})
    # Workers at Ray's default niceness (15) get a few percent of a CPU beside other work,
    # as on this busy test machine; scoring.ray.connect() starts its own clusters so too.
    nodes["RAY_worker_niceness"] = "0"
    command = subprocess.Popen([RAY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=nodes, start_new_session=True)  # fmt: skip
    _, err = command.communicate()
    if command.returncode != 0:
        pytest.fail(f"ray {args[0]} failed: {err.strip().splitlines()[-1:]}")
    return command.pid


def _end_sessions(sessions: list[int]) -> None:
    """SIGKILL to every live process of ``sessions`` (the nodes' daemons and workers),
    until none is left."""
    while members := _members(set(sessions)):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _members(sessions: set[int]) -> list[int]:
    """The live (not zombie) processes whose session is one of ``sessions``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if state[0] != "Z" and int(state[3]) in sessions:  # fields 3 and 6: state, sid
                found.append(int(proc.name))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return found


def test_the_default_plan_scores_on_two_one_cpu_nodes(ray_cluster: str, tmp_path: Path) -> None:
    model, X = model_frame("lgb_clf", rows=30_000)
    frame = write_input(X, tmp_path / "in", files=4)
    result = scoring.score_parquet(
        tmp_path / "in", tmp_path / "out", model, engine="ray", keep=["id"], device="cpu",
        engine_options={"address": ray_cluster}, progress=False,
    )  # fmt: skip
    # The CPU plan (the nodes' GPUs are logical ones).  It finishes (an actor of two
    # CPUs, planned from the cluster's total, waited forever).
    assert result.rows == 30_000 and sum(result.workers.values()) == 30_000
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row once, in file order
    assert_native_parity(out, "lgb_clf", X)
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == 30_000


def test_an_actor_larger_than_every_node_is_refused_at_once(
    ray_cluster: str, tmp_path: Path
) -> None:
    model, X = model_frame("lgb_clf", rows=1000)
    write_input(X, tmp_path / "in", files=1)
    options: dict[str, Any] = {"address": ray_cluster, "num_cpus": 2}
    with pytest.raises(ConfigError, match="largest node of the Ray cluster") as refused:
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, engine="ray",
                              device="cpu", engine_options=options, progress=False)  # fmt: skip
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out" / "_SUCCESS").exists()


#: ``scoring run`` whose actors each hold after their first file until told to go on
#: (the plan's ``on_file_journaled`` hook), so the kill lands mid-job on an event.
HELD_RUN = (
    "import sys; from scoring._engines import plan; "
    "plan.HOOKS = plan.Hooks(on_file_journaled=plan.HoldAfterFirstFile(sys.argv.pop(1))); "
    "from scoring.cli import app; app(prog_name='scoring')"
)


def _held_run(hold: Path, job: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``scoring run JOB`` whose actors hold after their first file (``HELD_RUN``)."""
    return subprocess.Popen(
        [sys.executable, "-c", HELD_RUN, str(hold), "run", str(job), "--no-progress"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def test_a_job_on_s3_killed_mid_run_finishes_on_its_rerun(
    ray_cluster: str, s3_bucket: str, s3_server: str, postgres_url: str, tmp_path: Path
) -> None:
    """The driver is killed while the actors are mid-job, then the same command runs
    again: it scores only what the journal lacks, and every row lands once.  Registry,
    input and output are in the bucket; the nodes have no AWS settings of their own, so
    the job file's ``[storage_options]`` is what reaches S3 from the actors."""
    model, X = model_frame("xgb_clf", rows=100_000)
    frame = write_s3_input(X, f"{s3_bucket}/in", files=20)
    store = scoring.Registry(f"{s3_bucket}/registry", db_url=postgres_url)
    store.register("churn", model)
    job = tmp_path / "job.toml"
    job.write_text(f"""
name = "nightly"
model = "churn@1"
input = "{s3_bucket}/in"
output = "{s3_bucket}/out"
engine = "ray"
device = "cpu"
keep = ["id"]
registry = "{s3_bucket}/registry"
registry_db = "{postgres_url}"

[ray]
address = "{ray_cluster}"

[storage_options]
endpoint_url = "{s3_server}"
key = "testing"
secret = "testing"
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    hold = tmp_path / "hold"
    hold.mkdir()
    first = _held_run(hold, job, env)
    try:
        held = _held_and_journaled(hold, f"{s3_bucket}/out/_temporary/_journal", first)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        (hold / "release").touch()  # actors not yet gone go on (and find no driver)
    first.wait()
    s3 = fsspec.filesystem("s3")
    s3.invalidate_cache()
    assert not s3.exists(f"{s3_bucket}/out/_SUCCESS")
    rerun = subprocess.run([SCORING, "run", str(job), "--no-progress"], env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = re.search(r"\(([\d,]+) rows resumed\)", rerun.stderr)
    assert resumed, rerun.stderr[-3000:]  # what the killed run journaled, and only that
    assert held * 5000 <= int(resumed.group(1).replace(",", "")) < 100_000
    out = read_s3(f"{s3_bucket}/out")
    assert out["id"].tolist() == frame["id"].tolist()  # every row exactly once
    assert_native_parity(out.drop(columns="id"), "xgb_clf", X)
    manifest = json.loads(s3.cat_file(f"{s3_bucket}/out/_scoring_manifest.json"))
    assert manifest["rows"] == 100_000 and len(manifest["fragments"]) == 20


def _held_and_journaled(hold: Path, journal: str, driver: subprocess.Popen[bytes]) -> int:
    """Wait until the actors hold and every journaled file is a holder's: how many."""
    s3 = fsspec.filesystem("s3")
    while True:
        held = len(list(hold.iterdir()))
        s3.invalidate_cache()
        journaled = len(s3.glob(f"{journal}/*.json")) if held else 0
        if held and journaled == held:
            return held
        if driver.poll() is not None:
            output = driver.stdout.read().decode()[-3000:] if driver.stdout else ""
            pytest.fail(f"the first run ended before the kill: {output}")
        time.sleep(0.05)


def _cuda_job(tmp_path: Path, address: str, *, files: int) -> tuple[Path, Any, Any]:
    """A job of ``files`` files on ``device = "cuda"``: its file, input and features."""
    table = f'[ray]\naddress = "{address}"'
    return cuda_job(tmp_path, recipe="xgb_clf", rows=4000 * files, files=files, engine="ray",
                    table=table)  # fmt: skip


#: The driver's environment for a job on the logical GPUs: placed on them, scored on CPU.
PLACED = {**os.environ, PLACEMENT_ONLY: "1"}


def test_a_cuda_job_runs_one_actor_per_gpu_each_named_by_its_gpu(
    ray_cluster: str, tmp_path: Path
) -> None:
    job, frame, X = _cuda_job(tmp_path, ray_cluster, files=8)
    done = subprocess.run([SCORING, "run", str(job), "--no-progress"], env=PLACED,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    workers = report["workers"]
    # Four actors (two nodes of two GPUs), each holding one GPU: two processes per node
    # name GPU 0 and 1 of theirs, and each scored rows.
    assert len(workers) == 2 * GPUS_PER_NODE, workers
    assert sorted(w.rsplit(" gpu ", 1)[1] for w in workers) == ["0", "0", "1", "1"], workers
    assert all(w["rows"] > 0 for w in workers.values())
    assert sum(w["rows"] for w in workers.values()) == len(frame)
    assert report["device"] == "cpu"  # placement only: what the actors ran on
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row once, in file order
    assert_native_parity(out, "xgb_clf", X)


def test_an_actor_killed_mid_run_leaves_every_row_once(ray_cluster: str, tmp_path: Path) -> None:
    """An actor (one GPU's worker) is killed after journaling its first file, while the
    other actors hold after theirs: the run goes on without it and publishes every row
    once."""
    job, frame, X = _cuda_job(tmp_path, ray_cluster, files=12)
    hold = tmp_path / "hold"
    hold.mkdir()
    first = _held_run(hold, job, PLACED)
    try:
        victim = _first_holder(hold, first)
        os.kill(victim, signal.SIGKILL)
    finally:
        (hold / "release").touch()
    said = first.communicate()[0].decode()
    assert first.returncode == 0, said[-3000:]
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")  # part-10 < part-2
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row exactly once
    assert_native_parity(out.reset_index(drop=True), "xgb_clf", X)
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    assert not any(w.split()[0].endswith(f":{victim}") for w in report["workers"])
    assert sum(w["rows"] for w in report["workers"].values()) == len(frame)


def _first_holder(hold: Path, driver: subprocess.Popen[bytes]) -> int:
    """The pid of the first actor holding after its first journaled file."""
    while True:
        held = [p.name for p in hold.iterdir() if p.name.isdigit()]
        if held:
            return int(held[0])
        if driver.poll() is not None:
            output = driver.stdout.read().decode()[-3000:] if driver.stdout else ""
            pytest.fail(f"the run ended before an actor held: {output}")
        time.sleep(0.05)

"""The Spark engine on a real standalone cluster (a master and a two-core worker with
two logical GPUs, started with ``spark-class`` from the pyspark package), driven as the
docs/clusters.md says (``spark-submit jobs/spark_score.py``) and by ``scoring run`` on the GPUs.
Not the in-process ``local[2]`` of test_spark.py (``pytest -m cluster`` selects the cluster
tests)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._engines.placement import PLACEMENT_ONLY

from .conftest import free_ports
from .test_score_parquet import assert_native_parity, cuda_job, model_frame, write_input

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
BIN = Path(sys.executable).parent
SUBMIT = [str(BIN / "spark-submit"), "--conf", f"spark.pyspark.python={sys.executable}",
          "--conf", "spark.ui.enabled=false", "--executor-memory", "1g",
          str(Path(__file__).parents[1] / "jobs" / "spark_score.py")]  # fmt: skip
ROWS, FILES = 100_000, 10
GPUS = 2
ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


@dataclass(frozen=True)
class Cluster:
    """A standalone master's URL and its worker's work folder (one per executor)."""

    url: str
    work: Path


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker of two cores on 127.0.0.1.  The worker has two
    logical GPUs: its discovery script names addresses 0 and 1 on any machine."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime and none was found")
    logs = tmp_path_factory.mktemp("spark-cluster")
    gpus = logs / "gpus.sh"
    gpus.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    gpus.chmod(0o755)
    (logs / "worker.conf").write_text(
        f"spark.worker.resource.gpu.amount {GPUS}\n"
        f"spark.worker.resource.gpu.discoveryScript {gpus}\n"
    )
    port, ui = free_ports(2)
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            started.append(subprocess.Popen([str(BIN / "spark-class"), *args], env=ENV,
                                            stdout=log, stderr=subprocess.STDOUT))  # fmt: skip

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))  # fmt: skip
        start("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
              "--cores", "2", "--memory", "3g", "--webui-port", "0",
              "--properties-file", str(logs / "worker.conf"),
              "--work-dir", str(logs / "work"), url)  # fmt: skip
        _wait_for_worker(ui, started, logs)
        yield Cluster(url, logs / "work")
    finally:
        for process in started:
            process.terminate()
            process.wait()


@pytest.fixture
def spark_master(spark_cluster: Cluster) -> str:
    return spark_cluster.url


def _wait_for_worker(ui: int, started: list[subprocess.Popen[bytes]], logs: Path) -> None:
    """Until the master reports a live worker (or a process has exited: fail, saying so)."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
                state = json.load(answer)
            if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                return
        except (OSError, ValueError):
            pass  # the master's web UI is not up yet, or answers before it has a page
        for process, name in zip(started, ("master", "worker"), strict=False):
            if process.poll() is not None:
                tail = (logs / f"{name}.log").read_text()[-2000:]
                pytest.fail(f"the Spark {name} exited with {process.returncode}: {tail}")
        time.sleep(0.2)


def test_spark_submit_killed_mid_job_then_rerun_scores_every_row_once(
    spark_master: str, tmp_path: Path
) -> None:
    """``spark-submit jobs/spark_score.py`` is killed once Spark has committed a task's
    output, then submitted again: nothing was published by the first, and the second
    replaces the partial output with every row once, scored as the native model does."""
    model, X = model_frame("lgb_clf", rows=ROWS)
    frame = write_input(X, tmp_path / "in", files=FILES)
    scoring.Registry(tmp_path / "registry").register("churn", model)
    args = [*SUBMIT[:1], "--master", spark_master, *SUBMIT[1:], "--model", "churn@1",
            "--registry", str(tmp_path / "registry"), "--input", str(tmp_path / "in"),
            "--output", str(tmp_path / "out"), "--keep", "id"]  # fmt: skip
    first = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)  # fmt: skip
    try:
        _wait_for_a_committed_task(tmp_path / "out", first)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert not (tmp_path / "out" / "_SUCCESS").exists()  # the kill landed mid-job
    rerun = subprocess.run(args, env=ENV, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    said = rerun.stdout + rerun.stderr  # spark-submit passes its Python's stderr to stdout
    summary = " ".join(said[said.index("scored ") :].split())  # wrapped at 80 columns
    assert summary.startswith(f"scored {ROWS:,} rows"), summary
    assert " on auto/" not in summary, summary  # what the executors ran, not what was asked
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row exactly once
    assert_native_parity(out.reset_index(drop=True), "lgb_clf", X)
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == ROWS and manifest["metadata"]["scoring._model"] == "churn@1"


def _wait_for_a_committed_task(output: Path, driver: subprocess.Popen[bytes]) -> None:
    """Until a task's ``part-*`` file is somewhere under the output (staged)."""
    while not any(output.rglob("part-*")):
        if driver.poll() is not None:
            tail = driver.stdout.read().decode()[-3000:] if driver.stdout else ""
            pytest.fail(f"spark-submit ended before the kill ({driver.returncode}): {tail}")
        time.sleep(0.05)


def _cuda_job(tmp_path: Path, master: str, *, files: int, rows: int) -> tuple[Path, Any, Any]:
    """``scoring run`` on the cluster with ``device = "cuda"``, one task per logical GPU
    (each of the executor's two tasks gets one address): the job file, frame, features."""
    table = f"""[spark]
master = "{master}"

[spark.conf]
"spark.executor.cores" = "2"
"spark.executor.memory" = "1g"
"spark.executor.resource.gpu.amount" = "{GPUS}"
"spark.task.resource.gpu.amount" = "1"
"spark.ui.enabled" = "false"
"""
    return cuda_job(tmp_path, recipe="lgb_clf", rows=rows, files=files, engine="spark",
                    table=table)  # fmt: skip


#: The driver's environment for a job on the logical GPUs: placed on them, scored on CPU.
PLACED = {**ENV, PLACEMENT_ONLY: "1"}


def test_a_cuda_job_runs_a_task_per_gpu_and_survives_a_lost_executor(
    spark_cluster: Cluster, tmp_path: Path
) -> None:
    """Each task gets one of the executor's two GPUs and counts its rows under it.  The
    executor is killed once a task has committed its file: the master starts another,
    Spark runs the lost tasks again, and the output holds every row once."""
    files = 40
    job, frame, X = _cuda_job(tmp_path, spark_cluster.url, files=files, rows=400_000)
    run = subprocess.Popen([str(BIN / "scoring"), "run", str(job), "--no-progress"], env=PLACED,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        _wait_for_a_committed_task(tmp_path / "out", run)
        committed = len(list((tmp_path / "out").rglob("part-*")))
        for pid in _executors(spark_cluster.work):
            # The executor's Python workers may end with it before their turn comes.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        said = run.communicate()[0].decode()
    assert committed < files  # the kill landed mid-job
    assert run.returncode == 0, said[-3000:]
    newest = max(spark_cluster.work.iterdir(), key=lambda app: app.stat().st_mtime)
    assert len(list(newest.iterdir())) >= 2  # the killed executor and its replacement
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row exactly once
    assert_native_parity(out.reset_index(drop=True), "lgb_clf", X)
    report = json.loads((tmp_path / "out" / "_scoring_report.json").read_text())
    host = socket.gethostname()
    assert set(report["workers"]) == {f"{host} gpu {g}" for g in range(GPUS)}, report["workers"]
    assert report["device"] == "cpu"  # placement only: what the tasks ran on
    assert "rows per worker: " in said


def _executors(work: Path) -> list[int]:
    """The pids of this cluster's running executors: processes working in ``work``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(work):
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    assert found, f"no executor runs in {work}"
    return found

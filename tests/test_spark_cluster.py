"""The Spark engine on a real standalone cluster (a master and a one-core worker,
started with ``spark-class`` from the pyspark package), driven as the README says: by
``spark-submit jobs/spark_score.py``.  Not the in-process ``local[2]`` of test_spark.py.
Run alone with ``pytest -m cluster``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import scoring

from .conftest import free_ports
from .test_score_parquet import assert_native_parity, model_frame, write_input

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
BIN = Path(sys.executable).parent
SUBMIT = [str(BIN / "spark-submit"), "--conf", f"spark.pyspark.python={sys.executable}",
          "--conf", "spark.ui.enabled=false", "--executor-memory", "1g",
          str(Path(__file__).parents[1] / "jobs" / "spark_score.py")]  # fmt: skip
ROWS, FILES = 100_000, 10


@pytest.fixture(scope="module")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker of one core on 127.0.0.1: the master URL."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime and none was found")
    logs = tmp_path_factory.mktemp("spark-cluster")
    port, ui = free_ports(2)
    url = f"spark://127.0.0.1:{port}"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            started.append(subprocess.Popen([str(BIN / "spark-class"), *args], env=env,
                                            stdout=log, stderr=subprocess.STDOUT))  # fmt: skip

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))  # fmt: skip
        start("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
              "--cores", "1", "--memory", "2g", "--webui-port", "0",
              "--work-dir", str(logs / "work"), url)  # fmt: skip
        _wait_for_worker(ui, started, logs)
        yield url
    finally:
        for process in started:
            process.terminate()
            process.wait()


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
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)  # fmt: skip
    try:
        _wait_for_a_committed_task(tmp_path / "out", first)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert not (tmp_path / "out" / "_SUCCESS").exists()  # the kill landed mid-job
    rerun = subprocess.run(args, env=env, capture_output=True, text=True)
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

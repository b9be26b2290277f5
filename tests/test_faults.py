"""Fault injection: what an operator meets beyond the happy path ends in one line, an
exit status, nothing wrong published, and a rerun that finishes the job.

Each case of issue 15's list is reproduced by a test; those that belong to one stage
live beside that stage's other tests:

- schema drift between files, zero-row files, duplicate names: ``test_schema_drift.py``
- two runs writing one output: here (a run paused mid-write by an event), and the lease
  itself (dead holders, stale heartbeats, a lost lease): ``test_lease.py``
- output inside the input, stale completion (a published file deleted, truncated or
  rewritten; ``_temporary/`` left by a kill after ``_SUCCESS``), a kill mid-run:
  ``test_score_parquet.py``; on Ray, a killed actor: ``test_ray.py``
- unnamed models and generic column names: ``test_column_names.py``
- disk full and a non-writable output (a filesystem that fails writes), a corrupt
  registry database and a truncated LightGBM file at the command line: here; the same
  boundaries in the SDK: ``test_errors.py``, ``test_compile.py``
- job files (``${VAR}`` unset anywhere, a failed run's report): ``test_jobs.py``
- Ctrl-C and SIGTERM (a scheduler stopping the job) at the command line: here
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from typer.testing import CliRunner

import scoring
from scoring.cli import app

from .conftest import built
from .test_score_parquet import model_frame, write_input

runner = CliRunner()


def _one_line_failure(result: Any, *expected: str) -> str:
    """The command failed with exit 1 and one line on stderr, naming ``expected``."""
    message = str(result.stderr).strip()
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "\n" not in message and "Traceback" not in message, message
    for text in expected:
        assert text in message, message
    return message


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORING_DEBUG", "0")  # an operator's shell: no tracebacks


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Any]:
    model, X = model_frame("lgb_reg", rows=2000)
    model.booster_.save_model(tmp_path / "model.txt")
    write_input(X, tmp_path / "in", files=4)
    return {"model": str(tmp_path / "model.txt"), "input": str(tmp_path / "in"),
            "output": str(tmp_path / "out")}  # fmt: skip


def _cli_score(job: dict[str, Any], *extra: str) -> Any:
    return runner.invoke(app, ["score", "--model", job["model"], "--input", job["input"],
                               "--output", job["output"], "--keep", "id", *extra])  # fmt: skip


def _ids(output: str) -> list[int]:
    return sorted(pq.read_table(output, columns=["id"]).column("id").to_pylist())


# -- two runs writing one output ---------------------------------------------------------


@pytest.mark.parametrize("second", ["the same job", "another model"])
def test_a_second_run_while_the_first_is_paused_mid_write_is_refused(
    job: dict[str, Any], tmp_path: Path, second: str
) -> None:
    paused, resume = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def pause_once(seconds: float, rows: int) -> None:  # called after a file is written
        if not paused.is_set():
            paused.set()
            resume.wait()

    def first() -> None:
        try:
            outcome["report"] = scoring.score_parquet(
                job["input"], job["output"], job["model"], keep=["id"], progress=False,
                run=scoring.RunOptions(on_progress=pause_once),
            )  # fmt: skip
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=first)
    thread.start()
    try:
        while not paused.wait(0.05):  # the event: the first run has written a file
            assert thread.is_alive(), outcome
        if second == "another model":
            model, _ = model_frame("lgb_reg", rows=10)
            model.booster_.save_model(tmp_path / "other.txt")
            job = {**job, "model": str(tmp_path / "other.txt")}
        refused = _cli_score(job, "--overwrite")
        _one_line_failure(refused, "being written by another run", f"pid {os.getpid()} on")
    finally:
        resume.set()
        thread.join()
    assert "error" not in outcome, outcome  # the paused run finishes and publishes
    assert outcome["report"].rows == 2000 and _ids(job["output"]) == list(range(2000))
    assert not (Path(job["output"]) / "_scoring_lease.json").exists()


# -- a filesystem that fails writes ------------------------------------------------------


class _FailingWrites(MemoryFileSystem):
    """An in-memory filesystem whose writes fail once ``room`` bytes are used up, or
    at once with ``denied`` (a read-only output): ENOSPC and EACCES as a disk gives."""

    protocol = "faulty"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    room: ClassVar[int] = 0
    denied: ClassVar[bool] = False

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("faulty://"):
            path = f"memory://{path[len('faulty://') :]}"
        return super()._strip_protocol(path)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if self.denied and mode[0] in "wxa":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        f = super()._open(path, mode, **kwargs)
        if mode[0] in "wxa":
            write = f.write

            def limited(data: Any) -> int:
                size = memoryview(data).nbytes
                if size > _FailingWrites.room:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                _FailingWrites.room -= size
                return int(write(data))

            f.write = limited
        return f


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> type[_FailingWrites]:
    fsspec.register_implementation("faulty", _FailingWrites, clobber=True)
    monkeypatch.setattr(_FailingWrites, "store", {})
    monkeypatch.setattr(_FailingWrites, "pseudo_dirs", [""])
    return _FailingWrites


def test_a_disk_that_fills_mid_run_fails_in_one_line_and_the_rerun_resumes(
    job: dict[str, Any], faulty: type[_FailingWrites], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = {**job, "output": "faulty://scores"}
    monkeypatch.setattr(faulty, "room", 10**9)
    assert _cli_score(job).exit_code == 0  # how many bytes a whole run writes
    written = 10**9 - faulty.room
    monkeypatch.setattr(faulty, "store", {})
    monkeypatch.setattr(faulty, "room", written // 2)  # the disk fills half way
    _one_line_failure(_cli_score(job), "No space left on device", "scores/")
    fs = faulty()
    assert not fs.exists("/scores/_SUCCESS") and not fs.glob("/scores/*.parquet")
    journaled = len(fs.glob("/scores/_temporary/_journal/*.json"))
    assert 0 < journaled < 4  # files before the fault were finished and journaled
    assert not fs.glob("/scores/_temporary/*.inprogress-*")  # the one it stopped is gone
    monkeypatch.setattr(faulty, "room", 10**9)  # room again: the rerun skips those files
    again = _cli_score(job)
    assert again.exit_code == 0, again.output
    table = pq.read_table("/scores", filesystem=fs, columns=["id"])
    assert sorted(table.column("id").to_pylist()) == list(range(2000))
    assert fs.exists("/scores/_SUCCESS") and not fs.exists("/scores/_temporary")


def test_an_output_that_cannot_be_written_fails_in_one_line(
    job: dict[str, Any], faulty: type[_FailingWrites], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(faulty, "denied", True)
    job = {**job, "output": "faulty://readonly"}
    _one_line_failure(_cli_score(job), "Permission denied", "readonly/")
    assert not faulty().find("/readonly")  # not a file, not even a lease


# -- a damaged registry or model file ----------------------------------------------------


def test_a_corrupt_registry_database_is_one_line(tmp_path: Path) -> None:
    model, _, _ = built("lgb_reg")
    scoring.Registry(tmp_path / "reg").register("m", model)
    (tmp_path / "reg" / "registry.db").write_bytes(b"\x00garbage" * 400)
    for command in (["models", "list"], ["models", "show", "m@1"]):
        result = runner.invoke(app, [*command, "--registry", str(tmp_path / "reg")])
        _one_line_failure(result, "registry.db")


def test_a_truncated_lightgbm_file_is_one_line(job: dict[str, Any]) -> None:
    path = Path(job["model"])
    text = path.read_bytes()
    path.write_bytes(text[: len(text) // 3])
    _one_line_failure(_cli_score(job), "model.txt")
    assert not Path(job["output"]).exists() or not list(Path(job["output"]).rglob("*.parquet"))
    path.write_bytes(text)  # the model saved again: the same command now scores
    assert _cli_score(job).exit_code == 0 and _ids(job["output"]) == list(range(2000))


#: Patches for a run in a child process: Ctrl-C restored (a suite started in the background
#: of a non-interactive shell hands its children SIGINT ignored, and Python then installs
#: no KeyboardInterrupt for it), and every pipeline kept in ``pipelines``.
PIPELINES_KEPT = """
import signal, sys, threading
from scoring._journal.journal import Journal
from scoring._engines import local

signal.signal(signal.SIGINT, signal.default_int_handler)
pipelines, finish = [], Journal.finish
start = local._Pipeline.__init__
def remembered(self, *args, **kwargs):
    start(self, *args, **kwargs)
    pipelines.append(self)
local._Pipeline.__init__ = remembered
"""

#: The ``scoring`` command, held after its first journaled file until a signal has
#: stopped its pipeline (bounded, so a broken stop cannot hang the test): the run cannot
#: finish before the test's signal arrives, however fast or slow the machine.
HELD_COMMAND = (
    PIPELINES_KEPT
    + """
from scoring.cli import app

def held(self, *args, **kwargs):
    if held.files and not pipelines[-1].failed.wait(timeout=300):
        raise RuntimeError("no signal stopped the run")
    held.files += 1
    return finish(self, *args, **kwargs)
held.files = 0
Journal.finish = held
sys.argv[0] = "scoring"
app()
"""
)

#: A run whose last commit waits, after every batch was handed to the writer, for Ctrl-C
#: to reach the main thread: it lands while the pipeline waits for its stages, outside
#: any stage.  Prints whether the writer was told to stop (it waits at most 120 s, so a
#: broken stop ends).
JOINING_COMMAND = (
    PIPELINES_KEPT
    + """
import scoring

dispatched, dispatch = threading.Event(), local._Pipeline._dispatch
def dispatching(self, lane, *, pool):
    dispatch(self, lane, pool=pool)
    dispatched.set()
def held(self, *args, **kwargs):
    dispatched.wait()
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    print("writer stopped:", pipelines[-1].failed.wait(timeout=120), flush=True)
    return finish(self, *args, **kwargs)
local._Pipeline._dispatch, Journal.finish = dispatching, held
try:
    scoring.score_parquet(sys.argv[1], sys.argv[2], sys.argv[3], progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""
)


def test_ctrl_c_while_the_pipeline_waits_for_its_stages_stops_them(tmp_path: Path) -> None:
    model, X = model_frame("xgb_reg", rows=500)
    write_input(X, tmp_path / "in", files=1)
    model.save_model(tmp_path / "model.json")
    args = [str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "model.json")]
    done = subprocess.run([sys.executable, "-c", JOINING_COMMAND, *args], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert done.stdout.split() == ["writer", "stopped:", "True", "interrupted"], done.stderr
    assert not (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.parametrize(("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_command_says_what_was_done_and_the_rerun_finishes(
    tmp_path: Path, sent: signal.Signals, status: int
) -> None:
    """Stopped once a file is journaled: exit 128 + the signal, one line naming it and
    the rows written, nothing published; the same command then resumes."""
    model, X = model_frame("lgb_clf", rows=60_000)
    write_input(X, tmp_path / "in", files=30)
    model.booster_.save_model(tmp_path / "model.txt")
    command = ["scoring", "score", "--keep", "id",
               "--model", str(tmp_path / "model.txt"), "--input", str(tmp_path / "in"),
               "--output", str(tmp_path / "out"), "--backend", "native"]  # fmt: skip
    held = [sys.executable, "-c", HELD_COMMAND, *command[1:]]
    first = subprocess.Popen(held, stderr=subprocess.PIPE, text=True)
    journal = tmp_path / "out" / "_temporary" / "_journal"
    while not (journal.exists() and any(journal.glob("*.json"))):  # the event: a file done
        assert first.poll() is None, first.communicate()[1][-2000:]
        time.sleep(0.01)
    first.send_signal(sent)
    _, said = first.communicate()
    assert first.returncode == status, said[-2000:]
    last = said.strip().splitlines()[-1]
    assert last.startswith(f"scoring score: stopped by {sent.name} after ") and last.endswith(
        "the files already written are journaled, and the same command resumes from them"
    )
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    rerun = runner.invoke(app, command[1:])
    assert rerun.exit_code == 0, rerun.output
    assert "rows resumed" in " ".join(rerun.output.split())
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(60_000))

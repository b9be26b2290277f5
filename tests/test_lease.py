"""The output lease: one run writes an output at a time; a dead holder's lease is taken
over; a run that lost its lease publishes nothing.  No sleeps: holders are written as
files, and the takeover happens from inside the run through its progress callback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._journal.lease import LEASE, OutputLease
from scoring.errors import OutputError

from .test_score_parquet import model_frame, write_input


@pytest.fixture
def job(tmp_path: Path) -> tuple[str, str, Any]:
    model, X = model_frame("lgb_reg", rows=2000)
    write_input(X, tmp_path / "in", files=2)
    return str(tmp_path / "in"), str(tmp_path / "out"), model


def _score(job: tuple[str, str, Any], **kw: Any) -> Any:
    return scoring.score_parquet(*job, keep=["id"], progress=False, **kw)


def _holder(out: Path, **fields: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"token": "theirs", "user": "them", "host": socket.gethostname(), "pid": 1,
              "started": time.time(), "heartbeat": time.time(), **fields}  # fmt: skip
    (out / LEASE).write_text(json.dumps(record))


def test_a_second_run_is_refused_while_the_first_holds_the_output(
    job: tuple[str, str, Any],
) -> None:
    out = Path(job[1])
    first = OutputLease(job[1])
    first.acquire()
    try:
        with pytest.raises(OutputError, match=r"being written by another run \(pid \d+ on "):
            _score(job)
        assert not list(out.glob("*.parquet")) and not (out / "_SUCCESS").exists()
    finally:
        first.release()
    assert _score(job).rows == 2000
    assert not (out / LEASE).exists()  # released with the run


def test_the_lease_of_a_dead_process_on_this_host_is_taken_over(
    job: tuple[str, str, Any],
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    _holder(Path(job[1]), pid=int(gone.stdout))
    assert _score(job).rows == 2000


@pytest.mark.parametrize(("age", "taken"), [(10.0, False), (3600.0, True)])
def test_another_hosts_lease_is_taken_over_only_when_its_heartbeat_is_stale(
    job: tuple[str, str, Any], age: float, taken: bool
) -> None:
    _holder(Path(job[1]), host="elsewhere", heartbeat=time.time() - age)
    if taken:
        assert _score(job).rows == 2000
    else:
        with pytest.raises(OutputError, match="on elsewhere, user them"):
            _score(job)


def test_a_run_that_lost_its_lease_publishes_nothing(job: tuple[str, str, Any]) -> None:
    out = Path(job[1])

    def taken_over(seconds: float, rows: int) -> None:  # another run took it mid-run
        _holder(out, host="elsewhere")

    with pytest.raises(OutputError, match="lost its lease"):
        _score(job, run=scoring.RunOptions(on_progress=taken_over))
    assert not (out / "_SUCCESS").exists() and not list(out.glob("*.parquet"))
    assert json.loads((out / LEASE).read_text())["token"] == "theirs"  # theirs is left
    (out / LEASE).unlink()  # the other run finished
    assert _score(job).rows_skipped == 2000  # this run's journaled files are reused
    ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    assert np.array_equal(np.sort(ids), np.arange(2000))


@pytest.mark.parametrize("content", [b"", b'{"token": "theirs", "us'])
def test_a_lease_being_written_is_not_taken_over(tmp_path: Path, content: bytes) -> None:
    """The report: an empty or half-written lease counted as stale whatever its age, so a
    second run starting while the first wrote its lease took it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / LEASE).write_bytes(content)
    with pytest.raises(OutputError, match="cannot be read yet"):
        OutputLease(str(out)).acquire()
    assert (out / LEASE).read_bytes() == content


def test_an_unreadable_lease_as_old_as_a_stale_one_is_taken_over(tmp_path: Path) -> None:
    import os

    out = tmp_path / "out"
    out.mkdir()
    (out / LEASE).write_bytes(b"")
    old = time.time() - 3600
    os.utime(out / LEASE, (old, old))
    lease = OutputLease(str(out), stale_after=60)
    lease.acquire()
    try:
        assert json.loads((out / LEASE).read_text())["token"] == lease.token
    finally:
        lease.release()


def test_the_lease_file_is_never_seen_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every state a reader can see while a lease is created and renewed is a whole record."""
    import os

    out = tmp_path / "out"
    seen: list[bytes] = []
    link, replace = os.link, os.replace

    def watched_link(src: Any, dst: Any) -> None:
        seen.append(Path(src).read_bytes())
        link(src, dst)

    def watched_replace(src: Any, dst: Any) -> None:
        seen.append(Path(src).read_bytes())
        replace(src, dst)

    monkeypatch.setattr(os, "link", watched_link)
    monkeypatch.setattr(os, "replace", watched_replace)
    lease = OutputLease(str(out))
    lease.acquire()
    lease._renew()
    lease.release()
    assert len(seen) == 2 and all(json.loads(b)["token"] == lease.token for b in seen)

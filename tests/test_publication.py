"""Publication under signals: a run overwriting a complete output is stopped by SIGTERM
and by SIGKILL after each step of its publication, and what a reader sees then is
either the previous complete output or the new one, never a mix, and the command's
last line says which; the same command then finishes.

The reader follows the output's contract (docs/batch.md): with ``_SUCCESS``
the folder's data files, which must be exactly those the manifest names; without it,
the files the manifest names; neither, nothing.  The stop is an event: the command's
publication waits at the chosen step until the signal arrives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from scoring.cli import app

from . import zygote
from .test_score_parquet import model_frame, write_input

runner = CliRunner()

#: The ``scoring`` command, its publication held after the given occurrence of a step
#: until a signal stops it (bounded, so that a signal that never lands fails the test).
STOPPED_AT = """
import sys, threading
from scoring._engines import plan

target, wanted, seen = sys.argv[1], int(sys.argv[2]), {}
def step(done):
    seen[done] = seen.get(done, 0) + 1
    if done == target and seen[done] == wanted:
        print("held", flush=True)
        if not threading.Event().wait(timeout=300):
            raise RuntimeError("no signal stopped the publication")
plan.HOOKS = plan.Hooks(on_publish_step=step)
sys.argv = ["scoring", *sys.argv[3:]]
from scoring.cli import app
app()
"""

#: (step, occurrence) in the order a publication over a previous output takes them.
STEPS = [
    ("unmarked the previous run", 1),
    ("kept a file of the previous run", 1),
    ("kept a file of the previous run", 3),
    ("pointed the manifest at the previous run's kept files", 1),
    ("removed a file of the previous run", 1),
    ("placed a new file", 1),
    ("placed a new file", 2),
    ("wrote the new manifest", 1),
    ("marked the output complete", 1),
]


def read_output(out: Path) -> pa.Table | None:
    """What a reader following the output's contract reads (rows sorted by id)."""
    manifest_path = out / "_scoring_manifest.json"
    if not manifest_path.exists():
        assert not (out / "_SUCCESS").exists()
        return None
    manifest = json.loads(manifest_path.read_text())
    named = sorted(f["output"] for f in manifest["fragments"])
    if (out / "_SUCCESS").exists():
        listed = sorted(p.name for p in out.glob("*.parquet"))
        assert listed == named, "a folder marked complete holds other files than its manifest"
    tables = [pq.read_table(out / name) for name in named]
    return pa.concat_tables(tables).sort_by("id")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model, the input of the previous run (4 files) and of the new one (3 files:
    one of the previous run's outputs is removed, three replaced), and each run's
    complete output as read."""
    root = tmp_path_factory.mktemp("publication")
    model, X = model_frame("lgb_reg", rows=1200)
    model.booster_.save_model(root / "model.txt")
    write_input(X, root / "before", files=4)
    write_input(X.iloc[:900], root / "after", files=3)
    common = ["--model", str(root / "model.txt"), "--keep", "id"]
    previous = ["score", *common, "--input", str(root / "before")]
    new = ["score", *common, "--input", str(root / "after"), "--outputs", "all", "--overwrite"]
    read = {}
    for name, command in (("previous", previous), ("new", new)):
        assert runner.invoke(app, [*command, "--output", str(root / name)]).exit_code == 0
        read[name] = read_output(root / name)
    return {"previous": previous, "new": new, "read": read}


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize(("step", "occurrence"), STEPS)
def test_an_overwrite_stopped_at_each_step_loses_nothing_and_says_what_is_true(
    tmp_path: Path, runs: dict[str, Any], step: str, occurrence: int, sent: signal.Signals
) -> None:
    out = tmp_path / "out"
    assert runner.invoke(app, [*runs["previous"], "--output", str(out)]).exit_code == 0
    command = [*runs["new"], "--output", str(out)]
    child = zygote.popen(STOPPED_AT, step, str(occurrence), *command)
    assert child.stdout is not None
    held = child.stdout.readline()  # the event: the publication waits at the step
    assert held == "held\n", child.communicate()[1][-2000:]
    child.send_signal(sent)
    _, said = child.communicate()
    assert child.returncode == (143 if sent == signal.SIGTERM else -signal.SIGKILL), said

    seen = read_output(out)
    published = step == "marked the output complete"
    new_manifest = published or step == "wrote the new manifest"
    assert seen is not None and seen.equals(runs["read"]["new" if new_manifest else "previous"])
    assert (out / "_SUCCESS").exists() == published
    if sent == signal.SIGTERM:
        last = said.strip().splitlines()[-1]
        if published:
            assert last == f"scoring score: stopped by SIGTERM after publishing {out}: the " \
                "output is complete"  # fmt: skip
        else:
            assert last.startswith(f"scoring score: stopped by SIGTERM while publishing {out} "
                                   "over its previous run: not complete"), last  # fmt: skip
            assert "previous run stays readable" in last
    rerun = runner.invoke(app, command)
    assert rerun.exit_code == 0, rerun.output
    finished = read_output(out)
    assert finished is not None and finished.equals(runs["read"]["new"])
    assert (out / "_SUCCESS").exists() and not (out / "_temporary").exists()


def test_a_first_publication_stopped_says_it_is_not_complete(tmp_path: Path, runs: Any) -> None:
    """No previous output: stopped while placing its files, nothing is readable yet,
    the message says the publication did not finish, and the same command finishes it."""
    out = tmp_path / "out"
    command = [*runs["new"], "--output", str(out)]
    child = zygote.popen(STOPPED_AT, "placed a new file", "2", *command)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    child.send_signal(signal.SIGTERM)
    _, said = child.communicate()
    assert child.returncode == 143
    assert said.strip().splitlines()[-1] == (
        f"scoring score: stopped by SIGTERM while publishing {out}: not complete (no "
        "_SUCCESS); the files are journaled, and the same command finishes publishing"
    )
    assert read_output(out) is None
    assert runner.invoke(app, command).exit_code == 0
    finished = read_output(out)
    assert finished is not None and finished.equals(runs["read"]["new"])


def _info_calls(runs: dict[str, Any], out: Path) -> int:
    """How many times an overwrite's command asks the filesystem about a path."""
    from fsspec.implementations.local import LocalFileSystem

    calls = []
    info = LocalFileSystem.info

    def counted(self: Any, path: Any, **kw: Any) -> Any:
        calls.append(path)
        return info(self, path, **kw)

    assert runner.invoke(app, [*runs["previous"], "--output", str(out)]).exit_code == 0
    LocalFileSystem.info = counted  # type: ignore[method-assign]
    try:
        assert runner.invoke(app, [*runs["new"], "--output", str(out)]).exit_code == 0
    finally:
        LocalFileSystem.info = info  # type: ignore[method-assign]
    return len(calls)


def test_a_sigterm_raised_inside_a_filesystem_question_is_never_lost(
    tmp_path: Path, runs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's cause: fsspec's ``exists`` answers False for any exception, the
    SIGTERM a command raises included, so a signal landing there was lost and the run
    went on believing a file gone.  Raised at every such question of an overwrite: the
    command stops with 143 and a true line, and the same command then finishes."""
    from fsspec.implementations.local import LocalFileSystem

    total = _info_calls(runs, tmp_path / "count")
    info = LocalFileSystem.info
    for k in range(1, total + 1, max(1, total // 25)):
        out = tmp_path / f"out{k}"
        assert runner.invoke(app, [*runs["previous"], "--output", str(out)]).exit_code == 0
        seen = [0]

        def interrupted(
            self: Any, path: Any, _k: int = k, _seen: list[int] = seen, **kw: Any
        ) -> Any:
            _seen[0] += 1
            if _seen[0] == _k:  # the signal arrives: its handler raises inside the question
                os.kill(os.getpid(), signal.SIGTERM)
            return info(self, path, **kw)

        monkeypatch.setattr(LocalFileSystem, "info", interrupted)
        stopped = runner.invoke(app, [*runs["new"], "--output", str(out)])
        monkeypatch.setattr(LocalFileSystem, "info", info)
        assert stopped.exit_code == 143, (k, stopped.output)
        assert "stopped by SIGTERM" in stopped.stderr.strip().splitlines()[-1]
        assert read_output(out) is not None
        rerun = runner.invoke(app, [*runs["new"], "--output", str(out)])
        assert rerun.exit_code == 0, (k, rerun.output)
        finished = read_output(out)
        assert finished is not None and finished.equals(runs["read"]["new"]), k


def test_a_sigterm_a_library_swallows_still_stops_the_command(tmp_path: Path, runs: Any) -> None:
    """A real SIGTERM delivered inside a bare ``except:`` (as fsspec's own code has):
    the command finishes what it was doing, then exits 143 saying what is true."""
    out = tmp_path / "out"
    command = [*runs["new"], "--output", str(out)]
    script = """
import os, signal, sys
from scoring._engines import plan
def step(done):
    if done == "placed a new file":
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        except:  # noqa: E722  (a library's bare except)
            pass
plan.HOOKS = plan.Hooks(on_publish_step=step)
sys.argv = ["scoring", *sys.argv[1:]]
from scoring.cli import app
app()
"""
    done = subprocess.run([sys.executable, "-c", script, *command], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"scoring score: stopped by SIGTERM after publishing {out}: the output is complete"
    )
    finished = read_output(out)
    assert finished is not None and finished.equals(runs["read"]["new"])

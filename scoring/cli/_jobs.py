"""``scoring plan JOB`` and ``scoring run JOB``: a job file, against its deadline.

Exit codes: 0 done in time (plan: feasible), 1 failed, 2 usage (a bad job file),
3 the deadline cannot be met (nothing written), 4 finished after the deadline.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from ._common import VERIFY_HELP, fail, reported

if TYPE_CHECKING:
    from ..jobs import JobSpec

__all__ = ["plan", "run"]

console = Console(stderr=True)


def _load(path: Path, command: str) -> JobSpec:
    from ..errors import JobFileError
    from ..jobs import EXIT_USAGE, load_job

    try:
        return load_job(path)
    except JobFileError as exc:
        raise fail(command, str(exc), code=EXIT_USAGE) from None


def plan(job: Path = typer.Argument(..., help="job file (TOML)")) -> None:
    """Count rows, measure throughput, and say whether JOB meets its deadline (exit 3 if not)."""
    from ..jobs import EXIT_INFEASIBLE, make_plan

    spec = _load(job, "plan")
    with reported("plan"):
        result = make_plan(spec)
    print(result.summary())
    if not result.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def run(
    job: Path = typer.Argument(..., help="job file (TOML)"),
    progress: bool = typer.Option(True, help="progress bar / log lines while running"),
    verify: bool = typer.Option(False, help=VERIFY_HELP),
) -> None:
    """Plan JOB, refuse an impossible deadline (exit 3), run it, write its report."""
    from ..errors import DeadlineError
    from ..jobs import EXIT_INFEASIBLE, EXIT_LATE, run_job

    logging.basicConfig(level=logging.WARNING, format="scoring run: %(message)s")
    spec = _load(job, "run")
    if verify:  # the job file's own ``verify`` is the default
        spec = spec.model_copy(update={"verify": True})
    with reported("run"):
        try:
            outcome = run_job(spec, progress=progress, on_plan=lambda p: console.print(p.summary()))
        except DeadlineError as exc:  # before anything is written
            raise fail("run", f"refused: {exc}", code=EXIT_INFEASIBLE) from None
    console.print(f"scored {outcome.report.summary()}")
    console.print(f"report: {outcome.report_files[1]}")
    if outcome.late:
        raise fail("run", "finished after the deadline", code=EXIT_LATE)

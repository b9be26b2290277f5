"""``scoring plan JOB`` and ``scoring run JOB``: a job file, against its deadline.

Exit codes: 0 done in time (plan: feasible), 1 failed, 2 usage (a bad job file),
3 the deadline cannot be met (nothing written), 4 finished after the deadline,
130/143 stopped by SIGINT/SIGTERM (a rerun resumes).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ._common import STORAGE_OPTION, VERIFY_HELP, RowsWritten, fail, key_values, messages, reported

if TYPE_CHECKING:
    from ..jobs import JobSpec

__all__ = ["load_job_options", "plan", "run"]


# In place of the job file's keys; SCORING_HOME and SCORING_REGISTRY_DB come after it.
_REGISTRY = typer.Option(None, "--registry", help="registry root, in place of the job file's")
_REGISTRY_DB = typer.Option(
    None, "--registry-db", help="registry database URL, in place of the job file's registry_db"
)
_DEADLINE = typer.Option(
    None, "--deadline", help="in place of the job file's deadline: a duration from the start "
    "(45m, 1h30m), a clock time in its timezone (01:45) or a date and time in it "
    "(\"$RUN_DATE+1d 01:45\")",
)  # fmt: skip


_RUN_DATE = typer.Option(
    None, "--run-date", help="RUN_DATE where the environment has none: 'today' (the day the "
    "run starts in the job's timezone, as a rendered CronJob runs it) or a date (YYYY-MM-DD)",
)  # fmt: skip


def load_job_options(
    path: Path, command: str, registry: str | None, registry_db: str | None, storage: list[str],
    *, deadline: str | None = None, run_date: str | None = None,
) -> JobSpec:  # fmt: skip
    """The job file, with the registry options and deadline given on the command line in
    place of its own, and its storage options with those given added; ``run_date``:
    ``RUN_DATE``'s value where the environment has none (``today``: in the job's zone)."""
    from pydantic import ValidationError

    from ..errors import JobFileError
    from ..jobs import EXIT_USAGE, JobSpec, load_job
    from ..jobs._spec import job_run_date

    try:
        if run_date is not None and "RUN_DATE" not in os.environ:
            os.environ["RUN_DATE"] = job_run_date(path, run_date)
        spec = load_job(path)
    except JobFileError as exc:
        raise fail(command, str(exc), code=EXIT_USAGE) from None
    given: dict[str, Any] = {"registry": registry, "registry_db": registry_db}
    stores = key_values(storage, command=command, option="--storage-option")
    given["storage_options"] = {**spec.storage_options, **stores}
    spec = spec.model_copy(update={k: v for k, v in given.items() if v is not None})
    if deadline is None:
        return spec
    try:  # validated as the job file's own key would be
        JobSpec.model_validate({"name": spec.name, "model": "m", "input": "i", "output": "o",
                                "deadline": deadline})  # fmt: skip
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise fail(command, f"--deadline {deadline!r}: {reason}", code=EXIT_USAGE) from None
    return spec.model_copy(update={"deadline": deadline})


def plan(
    job: Path = typer.Argument(..., help="job file (TOML)"),
    registry: str | None = _REGISTRY,
    registry_db: str | None = _REGISTRY_DB,
    storage_option: list[str] = STORAGE_OPTION,
    deadline: str | None = _DEADLINE,
    run_date: str | None = _RUN_DATE,
) -> None:
    """Count rows, measure throughput, and say whether JOB meets its deadline (exit 3 if not)."""
    from .._progress import waiting
    from ..jobs import EXIT_INFEASIBLE, make_plan

    spec = load_job_options(job, "plan", registry, registry_db, storage_option,
                            deadline=deadline, run_date=run_date)  # fmt: skip
    loading = waiting("planning: reading footers, loading and timing the model ...",
                      console=messages)  # fmt: skip
    with reported("plan"), loading:
        result = make_plan(spec)
    print(result.summary())
    if not result.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def run(
    job: Path = typer.Argument(..., help="job file (TOML)"),
    registry: str | None = _REGISTRY,
    registry_db: str | None = _REGISTRY_DB,
    storage_option: list[str] = STORAGE_OPTION,
    progress: bool = typer.Option(True, help="progress bar / log lines while running"),
    verify: bool = typer.Option(False, help=VERIFY_HELP),
    deadline: str | None = _DEADLINE,
    run_date: str | None = _RUN_DATE,
) -> None:
    """Plan JOB, refuse an impossible deadline (exit 3), run it, write its report."""
    from .._progress import waiting
    from ..errors import DeadlineError, DriftError
    from ..jobs import EXIT_CHECKS, EXIT_INFEASIBLE, EXIT_LATE, run_job
    from ..jobs._report import pace_vs_io

    logging.basicConfig(level=logging.WARNING, format="scoring run: %(message)s")
    spec = load_job_options(job, "run", registry, registry_db, storage_option,
                            deadline=deadline, run_date=run_date)  # fmt: skip
    if verify:  # the job file's own ``verify`` is the default
        spec = spec.model_copy(update={"verify": True})
    written = RowsWritten()
    loading = waiting("planning: reading footers, loading and timing the model ...",
                      console=messages, enabled=progress)  # fmt: skip
    with reported("run", written=written), loading:
        try:
            outcome = run_job(spec, progress=progress, on_progress=written,
                              on_plan=lambda p: messages.print(p.summary()))  # fmt: skip
        except DeadlineError as exc:  # before anything is scored; its report is written
            raise fail("run", f"refused: {exc}", code=EXIT_INFEASIBLE) from None
        except DriftError as exc:  # before anything is published
            raise fail("run", str(exc), code=EXIT_CHECKS) from None
    messages.print(f"scored {outcome.report.summary()}")
    if outcome.plan.scaled():
        messages.print(outcome.plan.scaled())
    if outcome.report.busy():
        messages.print(outcome.report.busy())
    pace = pace_vs_io(outcome.plan, outcome.report)
    if pace is not None:
        messages.print(f"pace: {pace:.0%} of reading and writing the input alone "
                       f"({outcome.plan.io_rows_per_second:,.0f} rows/s, as planned)")  # fmt: skip
    messages.print(f"report: {outcome.report_files[1]}")
    if outcome.late:
        raise fail("run", "finished after the deadline", code=EXIT_LATE)

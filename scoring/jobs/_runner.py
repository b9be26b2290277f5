"""``scoring run``: plan, refuse an impossible deadline, run, watch, report.

Exit codes (for cron and Airflow): 0 done in time, 1 failed, 2 usage (a bad job file),
3 the plan cannot meet the deadline (nothing written), 4 finished after the deadline,
5 a check of the job's ``[checks]`` failed and it says to stop (nothing published).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .._engines import ModelSource, ScoreReport, score_parquet
from .._formats.dataset import InputDataset
from .._registry import RunRecord, describe_trend, trend
from .._specs import Input, Output, RunOptions
from .._stores import configured
from ..errors import (
    CompileError,
    ConfigError,
    DeadlineError,
    DependencyError,
    DriftError,
    InputError,
    InputFileError,
    OutputError,
    RegistryError,
    ScoringError,
)
from ._checks import RunChecks
from ._gpu import GpuSampler
from ._history import Recorder
from ._planner import Plan, plan_and_model
from ._report import DEADLINE_WARNING, cpu_seconds, write_failure_report, write_report
from ._scaling import scaled
from ._spec import JobSpec

__all__ = [
    "EXIT_CHECKS",
    "EXIT_FAILED",
    "EXIT_INFEASIBLE",
    "EXIT_INPUT",
    "EXIT_LATE",
    "EXIT_OK",
    "EXIT_USAGE",
    "JobOutcome",
    "run_job",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFEASIBLE, EXIT_LATE, EXIT_CHECKS = 0, 1, 2, 3, 4, 5
#: The input does not fit the model (a column missing or not numeric, a value the
#: framework refuses): a retry reads the same rows.  An unreadable file stays 1.
EXIT_INPUT = 6
log = logging.getLogger("scoring.jobs")
#: Errors a rerun cannot fix: a configuration mistake, a model that does not compile,
#: bad input, a refused output, an unknown model, a package that is not installed.
_PERMANENT = (ConfigError, CompileError, InputError, OutputError, RegistryError, DriftError,
              DependencyError)  # fmt: skip


@dataclass
class JobOutcome:
    plan: Plan
    report: ScoreReport
    late: bool
    attempts: int
    report_files: list[str]
    checks: RunChecks | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_LATE if self.late else EXIT_OK


def exit_code(exc: BaseException) -> int:
    """What ``scoring run`` exits with for a run that raised ``exc``."""
    if isinstance(exc, DeadlineError):
        return EXIT_INFEASIBLE
    if isinstance(exc, DriftError):
        return EXIT_CHECKS
    if isinstance(exc, InputError) and not isinstance(exc, InputFileError):
        return EXIT_INPUT
    return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED


class _Watch:
    """Projects the finish from the rows done so far; warns once when it is too late."""

    def __init__(
        self,
        deadline: datetime | None,
        total: int,
        *,
        then: Callable[[float, int], None] | None = None,
    ):
        self.deadline, self.total, self.then = deadline, total, then
        self.warned = False

    def __call__(self, seconds: float, rows: int) -> None:
        if self.then is not None:
            self.then(seconds, rows)
        if self.deadline is None or self.warned or rows <= 0 or seconds < 1.0:
            return
        left = seconds * (self.total - rows) / rows
        finish = datetime.now(timezone.utc) + timedelta(seconds=left)
        if finish > self.deadline:
            self.warned = True
            log.warning(
                "%s: projected finish %s, deadline %s (%s of %s rows done)", DEADLINE_WARNING,
                finish.isoformat(timespec="seconds"),
                self.deadline.isoformat(timespec="seconds"), f"{rows:,}", f"{self.total:,}",
            )  # fmt: skip


def run_job(
    spec: JobSpec,
    *,
    progress: bool = True,
    start: datetime | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    on_progress: Callable[[float, int], None] | None = None,
) -> JobOutcome:
    """Plan, then run ``spec``; raises :class:`DeadlineError` before writing anything
    when the plan cannot meet the deadline.  ``start`` (default: now) is the job's
    nominal start, from which a duration deadline counts; ``on_plan`` sees the plan
    before anything runs, ``on_progress(seconds, rows)`` the rows as they are written."""
    with configured(spec.stores()):
        return _run(spec, progress=progress, start=start, on_plan=on_plan,
                    on_progress=on_progress)  # fmt: skip


def _run(
    spec: JobSpec,
    *,
    progress: bool,
    start: datetime | None,
    on_plan: Callable[[Plan], None] | None,
    on_progress: Callable[[float, int], None] | None,
) -> JobOutcome:
    start = start or datetime.now(timezone.utc)
    recorder = Recorder(spec, start=start)
    cpu_since = cpu_seconds()
    plan: Plan | None = None
    checks: RunChecks | None = None
    try:
        plan, model, data, reference = plan_and_model(spec, start=start)
        recorder.planned(plan, model, data)
        checks = RunChecks(spec.checks, reference, model=spec.model_ref)
        if on_plan is not None:
            on_plan(plan)
        if not plan.feasible:
            raise DeadlineError(plan.summary().splitlines()[-1].strip())
        deadline = spec.deadline_at(start)
        watch = _Watch(deadline, plan.rows, then=_both(recorder.progress, on_progress))
        with _workers(spec, plan, deadline) as options, GpuSampler() as gpu, \
                _Warnings() as warned:  # fmt: skip
            report, attempts = _with_retries(spec, data, model, watch, checks, options=options,
                                             progress=progress)  # fmt: skip
    except DeadlineError as exc:  # refused before anything is scored: only the report
        recorder.record("refused", exit_code=EXIT_INFEASIBLE, error=exc)
        written = _report_failure(spec, exc, plan=plan, start=start, checks=checks,
                                  refused=True)  # fmt: skip
        if not written:
            raise
        raise DeadlineError(f"{exc}; report: {written[-1]}") from None
    except Exception as exc:
        failed = exit_code(exc)
        recorder.record("failed", exit_code=failed, error=exc)
        _report_failure(spec, exc, plan=plan, start=start, checks=checks)
        raise
    finished = datetime.now(timezone.utc)
    _saved(report, plan)
    late = deadline is not None and finished > deadline
    runs = recorder.record("late" if late else "ok", exit_code=EXIT_LATE if late else EXIT_OK,
                           finished=finished, report=report, gpu=gpu.result())  # fmt: skip
    window = (deadline - start).total_seconds() if deadline else None
    files = write_report(spec, plan, report, gpu=gpu.result(), started=start,
                         stages=recorder.stages(report), deadline=deadline, finished=finished,
                         attempts=attempts, input_bytes=data.bytes, cpu_since=cpu_since,
                         warnings=warned.messages,
                         checks=checks, history=_history(runs, window))  # fmt: skip
    return JobOutcome(plan, report, late, attempts, files, checks)


class _Warnings(logging.Handler):
    """The warnings the product logs while a run scores, for its report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> _Warnings:
        logging.getLogger("scoring").addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        logging.getLogger("scoring").removeHandler(self)


def _workers(
    spec: JobSpec, plan: Plan, deadline: datetime | None
) -> AbstractContextManager[dict[str, Any]]:
    """The engine options to run with: the job's, or with ``[autoscale]`` those of the
    workers the cluster gave, held for the run (:mod:`._scaling`)."""
    if spec.autoscale is None:
        return nullcontext(spec.engine_options())
    return scaled(spec, plan, deadline=deadline)


def _both(
    first: Callable[[float, int], None], then: Callable[[float, int], None] | None
) -> Callable[[float, int], None]:
    if then is None:
        return first

    def both(seconds: float, rows: int) -> None:
        first(seconds, rows)
        then(seconds, rows)

    return both


def _history(runs: list[RunRecord], window: float | None) -> dict[str, Any]:
    """The report's history section: the runs, and their trend against the window."""
    found = trend(runs, window_seconds=window)
    return {
        "runs": [
            {"started": r.started_at.isoformat(), "seconds": r.seconds, "outcome": r.outcome,
             "rows": r.rows}
            for r in runs
        ],
        **found,
        "trend": describe_trend(found),
    }  # fmt: skip


def _report_failure(
    spec: JobSpec,
    exc: Exception,
    *,
    plan: Plan | None,
    start: datetime,
    checks: RunChecks | None,
    refused: bool = False,
) -> list[str]:
    """The failed (or refused) run's report, where it was written (none: see
    :func:`write_failure_report`)."""
    permanent = isinstance(exc, _PERMANENT) or plan is None
    try:
        return write_failure_report(spec, error=exc, plan=plan, started=start,
                                    permanent=permanent, checks=checks, refused=refused,
                                    attempts=1 if permanent else spec.retries + 1)  # fmt: skip
    except Exception as failed:  # the run's own error is the one to report
        log.warning("could not write the report of the failed run: %s", failed)
        return []


def _saved(report: ScoreReport, plan: Plan) -> None:
    """An incremental run's seconds saved: the rows a full run would also have scored,
    at the plan's measured rate (per worker, times the workers)."""
    changes = report.changes
    if changes is None or changes["kind"] != "incremental" or plan.rows_per_second <= 0:
        return
    skipped = max(0, changes["input_rows"] - report.rows - report.rows_skipped)
    changes["saved_seconds"] = skipped / (plan.rows_per_second * max(1, plan.workers))


def _with_retries(
    spec: JobSpec,
    data: InputDataset,
    model: ModelSource,
    watch: _Watch,
    checks: RunChecks,
    *,
    options: dict[str, Any],
    progress: bool,
) -> tuple[ScoreReport, int]:
    """Runs the engine; a failure that a rerun may fix is retried (the rerun resumes)."""
    for attempt in range(1, spec.retries + 2):
        try:
            # The planner's input carries the job's filter already (_dataset.filtered).
            source = Input(data, incremental=spec.incremental, on_changed=spec.on_changed)
            target = Output(spec.output, format=spec.format, mode=spec.mode,
                            partition_by=spec.partition_by, key=spec.key)  # fmt: skip
            run = RunOptions(verify=spec.verify, monitor=checks.reference, on_progress=watch,
                             before_publish=checks)  # fmt: skip
            report = score_parquet(
                source, target, model, engine=spec.engine, keep=spec.keep,
                outputs=spec.outputs, device=spec.device, backend=spec.backend,
                strategy=spec.strategy, registry=spec.registry,
                engine_options=options, progress=progress,
                storage_options=spec.storage_options, run=run,
            )  # fmt: skip
            return report, attempt
        except _PERMANENT:
            raise
        except (ScoringError, OSError) as exc:
            if attempt > spec.retries:
                raise
            log.warning("attempt %d of job %r failed (%s); retrying", attempt, spec.name, exc)
    raise AssertionError("unreachable")  # pragma: no cover

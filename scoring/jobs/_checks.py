"""A job's ``[checks]`` on what a run scored, before anything is published.

The run counts every file's rows into the bins of the model's reference profile
(:mod:`scoring._drift`); :class:`RunChecks` is handed the run's report once every file
is written, compares the counts with the reference, and says what breaches the job's
limits: a warning each, or with ``fail = true`` a :class:`~scoring.errors.DriftError`
that publishes nothing (``scoring run`` exits 5).  The files stay journaled, so a rerun
after the limits (or the input) changed scores nothing again.
"""

from __future__ import annotations

import logging

from .._drift import ColumnDrift, Profile, compare
from .._engines import ScoreReport
from ..errors import DriftError
from ._spec import Checks

__all__ = ["RunChecks"]

log = logging.getLogger("scoring.jobs")


class RunChecks:
    """The ``before_publish`` hook of a job's run; keeps what it found for the report."""

    def __init__(self, checks: Checks, reference: Profile | None, *, model: str):
        self.checks, self.reference, self.model = checks, reference, model
        self.drift: list[ColumnDrift] = []
        self.breaches: list[str] = []
        self.note: str | None = None  # why no drift was measured
        self.seen: ScoreReport | None = None  # the run checked

    def __call__(self, report: ScoreReport) -> None:
        self.seen = report
        rows = report.rows + report.rows_skipped
        if report.changes is not None and report.changes["kind"] != "full":
            rows = report.changes["input_rows"]  # the output holds the input's rows
        self.breaches = self._rows(rows) + self._drift(report)
        for breach in self.breaches:
            log.warning("check failed: %s", breach)
        if self.breaches and self.checks.fail:
            raise DriftError(
                f"{len(self.breaches)} check(s) failed, nothing published: "
                f"{'; '.join(self.breaches)}; the scored files stay journaled: rerun once "
                "the input is fixed, or raise the limits in [checks]"
            )

    def _rows(self, rows: int) -> list[str]:
        least = self.checks.min_rows
        return [f"{rows:,} rows, fewer than min_rows {least:,}"] if least and rows < least else []

    def _drift(self, report: ScoreReport) -> list[str]:
        if self.reference is None:
            self.note = f"model {self.model} has no reference profile (register it with a sample)"
        elif report.drift_counts is None:
            self.note = (
                f"no counts from engine {report.engine} (files journaled by a run without "
                "a reference have none)"
            )
        if self.note is not None:
            if self.checks.max_psi is not None or self.checks.max_null_rate is not None:
                log.warning("drift not measured: %s", self.note)
            return []
        assert self.reference is not None and report.drift_counts is not None
        self.drift = compare(self.reference, report.drift_counts)
        found = []
        for d in self.drift:
            what = f"{d.role} {d.column!r}"
            if self.checks.max_psi is not None and d.psi > self.checks.max_psi:
                found.append(f"{what} drifted: PSI {d.psi:.3f} > max_psi {self.checks.max_psi}")
            limit = self.checks.max_null_rate
            if limit is not None and d.role == "feature" and d.null_rate > limit:
                found.append(f"{what} is {d.null_rate:.1%} null > max_null_rate {limit:.1%}")
        return found

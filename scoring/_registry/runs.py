"""Run history: one record per ``scoring run`` of a job, in the registry's database.

Every outcome is kept (``ok``, ``late``, ``failed``, ``refused``) so that an operator
sees a window being missed coming, not only the night it is missed.  The columns that
queries filter on are columns; the rest of a record is one JSON document, so a field
added later needs no migration.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np
import sqlalchemy as sa
from pydantic import BaseModel, Field
from sqlalchemy.engine import Engine

from . import db

__all__ = ["OUTCOMES", "RunHistory", "RunRecord", "describe_trend", "trend"]
#: Fewer finished runs than this, or runs spanning less time, make no trend: a slope
#: per day fitted over minutes of reruns is noise.
MIN_TREND_RUNS = 3
MIN_TREND_DAYS = 1.0

Outcome = Literal["ok", "late", "failed", "refused"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "late", "failed", "refused")


class RunRecord(BaseModel):
    """What one run of a job did.  ``stages`` holds seconds per stage (``plan``: input
    listing, model load and throughput measurement; ``run``: scoring and commit; where
    the engine measures them, ``commit`` and the overlapping busy seconds of ``read``,
    ``score`` and ``write``); ``window_seconds`` is the time from start to deadline."""

    job: str
    started_at: datetime
    finished_at: datetime
    outcome: Outcome
    exit_code: int
    rows: int = 0
    rows_resumed: int = 0
    bytes: int = 0
    stages: dict[str, float] = Field(default_factory=dict)
    deadline: datetime | None = None
    window_seconds: float | None = None
    host: str = ""
    engine: str = ""
    device: str = ""
    backend: str = ""
    models: list[dict[str, str]] = Field(default_factory=list)
    output: str = ""
    error: str | None = None
    #: Each GPU's summary over the run (``scoring.jobs._gpu``), or why none was sampled.
    gpu: dict[str, Any] | None = None
    id: int | None = None

    @property
    def seconds(self) -> float:
        """Wall time from start to finish."""
        return (self.finished_at - self.started_at).total_seconds()


class RunHistory:
    """The ``job_runs`` table of one registry database."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def add(self, record: RunRecord) -> int:
        """Store ``record``; returns its id."""
        row = {
            "job": record.job,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
            "outcome": record.outcome,
            "record_json": record.model_dump_json(exclude={"id"}),
        }
        with self.engine.begin() as conn:
            result = conn.execute(db.runs.insert().values(**row))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def list(self, job: str | None = None, *, limit: int = 50) -> list[RunRecord]:
        """The latest ``limit`` runs (of ``job``, or of every job), oldest first."""
        query = sa.select(db.runs.c.id, db.runs.c.record_json)
        if job is not None:
            query = query.where(db.runs.c.job == job)
        query = query.order_by(db.runs.c.started_at.desc(), db.runs.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_record(row.id, row.record_json) for row in reversed(rows)]


def _record(id_: int, text: str) -> RunRecord:
    return RunRecord.model_validate_json(text).model_copy(update={"id": id_})


def trend(runs: list[RunRecord], *, window_seconds: float | None) -> dict[str, Any]:
    """The durations of ``runs`` that scored (ok or late) against ``window_seconds``:
    the fitted growth in seconds per day, and the date the fit reaches the window
    (``None`` when it is not growing, or too few runs over too short a time)."""
    finished = [r for r in runs if r.outcome in ("ok", "late")]
    result: dict[str, Any] = {
        "window_seconds": window_seconds, "seconds_per_day": None, "projected_miss": None,
    }  # fmt: skip
    if len(finished) < MIN_TREND_RUNS or not window_seconds:
        return result
    first = finished[0].started_at
    days = np.array([(r.started_at - first).total_seconds() / 86_400 for r in finished])
    seconds = np.array([r.seconds for r in finished])
    if np.ptp(days) < MIN_TREND_DAYS:
        return result
    slope, intercept = np.polyfit(days, seconds, 1)
    result["seconds_per_day"] = float(slope)
    now = float(days[-1])
    fitted_now = intercept + slope * now
    if fitted_now >= window_seconds:
        result["projected_miss"] = finished[-1].started_at.isoformat()  # already there
    elif slope > 0:
        left = (window_seconds - fitted_now) / slope
        result["projected_miss"] = (finished[-1].started_at + timedelta(days=left)).isoformat()
    return result


def describe_trend(found: dict[str, Any]) -> str:
    """:func:`trend`'s result in one line."""
    if found["seconds_per_day"] is None:
        return "trend: too few finished runs over at least a day, or no deadline"
    line = f"trend: {found['seconds_per_day']:+,.1f} s/day"
    miss = found["projected_miss"]
    return line + (f"; at this pace the window is missed from {miss[:10]}" if miss else
                   "; not growing")  # fmt: skip

"""Run history: one record per ``scoring run`` of a job, in the registry's database.

Every outcome is kept (``ok``, ``late``, ``failed``, ``refused``) so that an operator
sees a window being missed coming, not only the night it is missed.  The columns that
queries filter on are columns; the rest of a record is one JSON document, so a field
added later needs no migration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from pydantic import BaseModel, Field
from sqlalchemy.engine import Engine

from . import db

__all__ = ["OUTCOMES", "RunHistory", "RunRecord"]

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

"""A job's runs, recorded in the registry database, and their trend against the window.

:class:`Recorder` collects what a run did as it goes and records it once, whatever the
outcome: a refused or failed run is history too.  :func:`trend` fits the last runs'
durations with a straight line over calendar time and says when, at that pace, a run
would no longer fit in the window from start to deadline.
"""

from __future__ import annotations

import logging
import socket
from datetime import datetime, timezone
from typing import Any

from .._engines import ModelSource, ScoreReport
from .._formats.dataset import InputDataset
from .._modelset import set_of
from .._registry import ModelStore, RunRecord
from ._metrics import publish_metrics
from ._planner import Plan
from ._spec import JobSpec

__all__ = ["HISTORY_RUNS", "Recorder"]

log = logging.getLogger("scoring.jobs")

#: Runs a report shows, and the trend is fitted on.
HISTORY_RUNS = 30


class Recorder:
    """What one run of ``spec`` did so far; :meth:`record` stores it."""

    def __init__(self, spec: JobSpec, *, start: datetime):
        self.spec, self.start = spec, start
        self.began = datetime.now(timezone.utc)
        self.plan: Plan | None = None
        self.planned_at: datetime | None = None
        self.data: InputDataset | None = None
        self.model: ModelSource | None = None
        self.rows = 0  # written so far, as progress reports them

    def planned(self, plan: Plan, model: ModelSource, data: InputDataset) -> None:
        self.plan, self.model, self.data = plan, model, data
        self.planned_at = datetime.now(timezone.utc)

    def progress(self, _seconds: float, rows: int) -> None:
        self.rows = rows

    def record(
        self,
        outcome: str,
        *,
        exit_code: int,
        finished: datetime | None = None,
        report: ScoreReport | None = None,
        error: BaseException | None = None,
        gpu: dict[str, Any] | None = None,
    ) -> list[RunRecord]:
        """Store this run (and publish its metrics, if the job asks); returns the job's
        last :data:`HISTORY_RUNS` runs (this one last), or nothing when the registry
        cannot be written: the run's own outcome stands, with a warning."""
        record = self._record(outcome, exit_code, finished or datetime.now(timezone.utc),
                              report, error)  # fmt: skip
        if gpu is not None:  # each device's summary (the samples stay in the report)
            record.gpu = {k: v for k, v in gpu.items() if k != "series"}
        publish_metrics(self.spec.metrics, record)
        try:
            history = ModelStore(self.spec.registry, db_url=self.spec.registry_db,
                                 storage_options=self.spec.storage_options).runs  # fmt: skip
            history.add(record)
            return history.list(self.spec.name, limit=HISTORY_RUNS)
        except Exception as exc:
            log.warning("could not record the run in the registry's history: %s", exc)
            return []

    def _record(
        self,
        outcome: str,
        exit_code: int,
        finished: datetime,
        report: ScoreReport | None,
        error: BaseException | None,
    ) -> RunRecord:
        deadline = self.spec.deadline_at(self.start)
        stages = self.stages(report)
        return RunRecord.model_validate({
            "job": self.spec.name, "started_at": self.began, "finished_at": finished,
            "outcome": outcome, "exit_code": exit_code,
            "rows": report.rows if report else self.rows,
            "rows_resumed": report.rows_skipped if report else 0,
            "bytes": self.data.bytes if self.data else 0, "stages": stages,
            "deadline": deadline,
            "window_seconds": (deadline - self.start).total_seconds() if deadline else None,
            "host": socket.gethostname(), "engine": self.spec.engine,
            "device": report.device if report else self.plan.device if self.plan else "",
            "backend": report.backend if report else self.plan.backend if self.plan else "",
            "models": [self._model(report)], "output": self.spec.output,
            "error": f"{type(error).__name__}: {error}" if error else None,
        })  # fmt: skip

    def stages(self, report: ScoreReport | None) -> dict[str, float]:
        """Seconds per stage so far: ``plan`` (listing, model load, timing), ``run``
        (scoring and commit), and what the engine measured: ``commit``, and the busy
        seconds of ``read``, ``score`` and ``write``, which overlap within ``run``."""
        stages = {}
        if self.planned_at is not None:
            stages["plan"] = (self.planned_at - self.began).total_seconds()
        if report is not None:
            stages["run"] = report.seconds
            stages.update(report.stages)
        return stages

    def _model(self, report: ScoreReport | None) -> dict[str, str]:
        """The model as the job names it, the registered version that resolved to (when
        it came from a registry) and its sha256."""
        sha = report.sha256 if report else self.model.sha256 if self.model else ""
        found = {"ref": self.spec.model_ref, "sha256": sha}
        bundle = self.model.bundle if self.model else None
        members = set_of(bundle)
        if members is not None:  # several models: each one's name@version
            found["version"] = members.ref
        manifest = getattr(bundle, "manifest", None) or {}
        if "name" in manifest:
            found["version"] = f"{manifest['name']}@{manifest['version']}"
        return found

"""``[autoscale]``: ask the cluster for the workers the deadline needs, wait for them,
run with those that joined, and release them.

The plan (:mod:`._planner`) says how many workers the window needs at the measured rate
per worker, within the job's bounds.  :func:`scaled` asks the engine's autoscaler for
them and, every :data:`POLL_SECONDS` until they have joined or the job's ``wait`` is
over, counts those that did and plans again with the time now left: the longer the
wait, the more workers the rest of the window needs, so the request grows with it (never
past ``max_workers``).  Then it plans once more with the workers that joined: if they
cannot meet the deadline (or none joined), nothing runs (exit 3, the request released).
Otherwise the request is held (sent again every ``renew_seconds``: another client's
request, such as Ray Data's, replaces it) while the run goes on, and withdrawn at the
end, whatever the outcome.  :class:`Scaling` records the needed, requested and granted
workers over time and the worker-seconds the run held (granted workers, at most the
requested ones, over the time from the first request to the release): the plan carries
it into the report.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._engines import engine_named, options_for
from .._engines.scaling import Autoscale, Autoscaler
from ..errors import DeadlineError, EngineError
from ._planner import Plan, workers_needed
from ._spec import JobSpec

__all__ = ["POLL_SECONDS", "Scaling", "scaled"]

#: Seconds between counts of the workers that joined, while waiting for them.
POLL_SECONDS = 1.0
log = logging.getLogger("scoring.jobs")


@dataclass
class Scaling:
    """Needed, requested and granted workers over time, from the first request."""

    shape: dict[str, float]
    bounds: Autoscale
    began: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    released: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, *, needed: int | None, requested: int, granted: int) -> None:
        """A point of the timeline, kept when any count changed."""
        with self.lock:
            last = self.events[-1] if self.events else None
            point = {"needed": needed, "requested": requested, "granted": granted}
            if last is None or any(last[k] != v for k, v in point.items()):
                self.events.append({"seconds": round(time.monotonic() - self.began, 3),
                                    **point})  # fmt: skip

    @property
    def last(self) -> dict[str, Any]:
        return self.events[-1]

    def worker_seconds(self) -> float:
        """Granted workers (at most those requested) over time, to the release."""
        end = (self.released or time.monotonic()) - self.began
        with self.lock:
            points = list(self.events)
        total = 0.0
        for point, after in zip(points, [*points[1:], None], strict=True):
            until = end if after is None else after["seconds"]
            total += min(point["granted"], point["requested"]) * max(0.0, until - point["seconds"])
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "min_workers": self.bounds.min_workers,
            "max_workers": self.bounds.max_workers,
            "wait_seconds": self.bounds.wait_seconds,
            "needed": self.last["needed"], "requested": self.last["requested"],
            "granted": self.last["granted"],
            "timeline": list(self.events),
            "held_seconds": None if self.released is None else self.released - self.began,
            "worker_seconds": self.worker_seconds(),
        }  # fmt: skip


@contextmanager
def scaled(
    spec: JobSpec,
    plan: Plan,
    *,
    deadline: datetime | None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """The engine options of a run on the workers that joined (the request held until
    the block ends, then withdrawn); :class:`DeadlineError` when they cannot meet the
    deadline.  ``plan.scaling`` follows what was asked and given."""
    bounds = spec.autoscale
    assert bounds is not None
    engine = engine_named(spec.engine)
    scaler = engine.autoscaler(options_for(engine, spec.engine_options()), device=spec.device,
                               bounds=bounds)  # fmt: skip
    record = Scaling(dict(scaler.shape), bounds)
    stop = threading.Event()
    holder: threading.Thread | None = None
    try:
        workers = _wait(scaler, plan, record, deadline=deadline, sleep=sleep)
        if scaler.renew_seconds is not None:
            holder = threading.Thread(target=_hold, args=(scaler, record, stop), daemon=True,
                                      name="scoring-autoscale")  # fmt: skip
            holder.start()
        yield scaler.options(workers).model_dump(exclude_none=True)
    finally:
        stop.set()
        if holder is not None:
            holder.join()
        _release(scaler)
        record.released = time.monotonic()
        if record.events:
            plan.scaling = record.to_dict()


def _wait(
    scaler: Autoscaler,
    plan: Plan,
    record: Scaling,
    *,
    deadline: datetime | None,
    sleep: Callable[[float], None],
) -> int:
    """Ask, wait (at most ``wait``, re-planning as time passes), and return the workers
    to run on; refuse when they cannot meet the deadline."""
    bounds = record.bounds
    requested = plan.workers
    scaler.request(requested)
    until = time.monotonic() + bounds.wait_seconds
    while True:
        granted = scaler.granted()
        left = _left(deadline)
        needed = _needed(plan, left)
        if needed is not None and requested < needed <= bounds.max_workers:
            requested = needed
            scaler.request(requested)
        record.note(needed=needed, requested=requested, granted=granted)
        if granted >= requested or not scaler.observes or time.monotonic() >= until:
            break
        if left is not None and (needed is None or needed > bounds.max_workers):
            break  # even the most cannot make it now: no use waiting
        sleep(POLL_SECONDS)
    workers = min(granted, requested)
    _check(plan, record, workers=workers, left=_left(deadline))
    if workers < requested:
        log.warning("[autoscale]: %d of %d workers joined within %s; running on %d",
                    granted, requested, _seconds(bounds.wait_seconds), workers)  # fmt: skip
    return workers


def _check(plan: Plan, record: Scaling, *, workers: int, left: float | None) -> None:
    """Refuse a run the joined workers cannot finish in time (or that none joined)."""
    bounds, last = record.bounds, record.last
    waited = _seconds(time.monotonic() - record.began)
    if workers == 0 and left is None:
        raise EngineError(
            f"[autoscale]: no worker of {_shape(record.shape)} joined the cluster within "
            f"{_seconds(bounds.wait_seconds)}; check that a node type of the cluster's "
            "autoscaler offers it, or set [resources] to one that does"
        )
    if left is None:
        return
    pace = plan.rows_per_second * workers
    estimate = _fixed_left(plan) + plan.rows / pace if workers else math.inf
    if estimate <= left:
        return
    needed = last["needed"]
    if needed is None or needed > bounds.max_workers:
        why = (
            f"after {waited} of waiting the deadline needs "
            + ("more time than is left for the fixed costs" if needed is None
               else f"{needed} workers, more than [autoscale] max_workers {bounds.max_workers}")
        )  # fmt: skip
    else:
        why = f"{workers} of the {needed} workers it needs joined within {waited}"
    raise DeadlineError(
        f"NOT feasible: {why} ({_shape(record.shape)} each); on {workers} workers the run "
        f"needs {_seconds(estimate)} and {_seconds(left)} are left; nothing was scored"
    )


def _needed(plan: Plan, left: float | None) -> int | None:
    """The workers the rest of the window needs now (the listing and compile are done)."""
    if left is None:
        return plan.workers
    return workers_needed(plan.rows, rate=plan.rows_per_second, seconds=left,
                          fixed=_fixed_left(plan))  # fmt: skip


def _fixed_left(plan: Plan) -> float:
    """The fixed costs still ahead once the workers are there: the engine's start and
    the commit (the listing and the compile were spent planning)."""
    return plan.startup_seconds + plan.commit_seconds


def _hold(scaler: Autoscaler, record: Scaling, stop: threading.Event) -> None:
    """Send the request again every ``renew_seconds`` and note the workers held."""
    assert scaler.renew_seconds is not None
    requested = record.last["requested"]
    while not stop.wait(scaler.renew_seconds):
        try:
            scaler.request(requested)
            record.note(needed=record.last["needed"], requested=requested,
                        granted=scaler.granted())  # fmt: skip
        except Exception as exc:  # the run goes on; the next renewal tries again
            log.warning("[autoscale]: could not renew the request: %s", exc)


def _release(scaler: Autoscaler) -> None:
    try:
        scaler.release()
    except Exception as exc:  # the run's own outcome is the one to report
        log.warning("[autoscale]: could not withdraw the request: %s", exc)


def _left(deadline: datetime | None) -> float | None:
    return None if deadline is None else (deadline - datetime.now(timezone.utc)).total_seconds()


def _shape(shape: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in shape.items())


def _seconds(value: float) -> str:
    return f"{value:,.0f} s"

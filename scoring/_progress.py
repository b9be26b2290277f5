"""Progress of a scoring run: a rich bar on a terminal, otherwise (a log) one line
every ``LOG_EVERY_S`` seconds, stamped with the UTC time.  Before there are rows to
count (a model loading, a plan measuring, a cluster starting) a command shows a spinner
(:func:`waiting`), which the run's bar replaces.

Every update is also kept as a ``(seconds, rows)`` point, the timeline that reports
plot against the deadline; :class:`StageClock` keeps each stage's busy seconds, which
reports and the command's summary show.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

__all__ = ["RunProgress", "StageClock", "waiting"]

LOG_EVERY_S = 10.0

#: The spinner showing, until a progress bar takes its place: a terminal holds one live
#: display at a time.
_spinners: list[Any] = []


@contextmanager
def waiting(text: str, *, console: Console, enabled: bool = True) -> Iterator[None]:
    """A spinner saying ``text`` while nothing can be counted yet, on a terminal only;
    what ``console`` prints meanwhile appears above it."""
    if not (enabled and console.is_terminal):
        yield
        return
    status = console.status(text)
    status.start()
    _spinners.append(status)
    try:
        yield
    finally:
        _stop_spinners()


#: An ETA before this many seconds and this share of the rows is a guess: none is shown.
ETA_AFTER_S, ETA_AFTER_SHARE = 2.0, 0.01


def _eta(seconds: float, rows: int, total: int) -> str:
    if seconds < ETA_AFTER_S or rows < ETA_AFTER_SHARE * total or rows <= 0:
        return "ETA -"
    return f"ETA {seconds * (total - rows) / rows:,.0f} s"


def _stop_spinners() -> None:
    while _spinners:
        _spinners.pop().stop()


class RunProgress:
    """Counts rows done; thread-safe; ``listeners`` get ``(seconds, rows)`` updates."""

    def __init__(
        self,
        total_rows: int,
        *,
        label: str = "scoring",
        enabled: bool = True,
        stream: TextIO | None = None,
    ):
        self.total = total_rows
        self.label = label
        self.stream = stream or sys.stderr
        self.rows = 0
        self.start = time.perf_counter()
        self.timeline: list[tuple[float, int]] = [(0.0, 0)]
        self.listeners: list[Callable[[float, int], None]] = []
        self._lock = threading.Lock()
        self._last_log = self.start
        self._bar: Any = None
        if enabled and self.stream.isatty():
            _stop_spinners()
            # Counts with separators, and an ETA from the run's average rate once it has
            # one (rich's own estimate of the first second is far off); the bar stays
            # on screen when done, with the time it took.
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn(
                    "{task.fields[done]} rows, {task.fields[rate]} rows/s, {task.fields[eta]}"
                ),
            )
            self._task = self._bar.add_task(label, total=total_rows, rate="-", eta="ETA -",
                                            done=f"0/{total_rows:,}")  # fmt: skip
            self._bar.start()
        self.enabled = enabled

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def advance(self, rows: int) -> None:
        with self._lock:
            self.rows += rows
            now = self.elapsed
            self.timeline.append((now, self.rows))
            rate = self.rows / now if now > 0 else 0.0
            if self._bar is not None:
                self._bar.update(self._task, completed=self.rows, rate=f"{rate:,.0f}",
                                 done=f"{self.rows:,}/{self.total:,}",
                                 eta=_eta(now, self.rows, self.total))  # fmt: skip
            elif self.enabled and time.perf_counter() - self._last_log >= LOG_EVERY_S:
                self._last_log = time.perf_counter()
                eta = (self.total - self.rows) / rate if rate > 0 else float("inf")
                stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
                print(
                    f"{stamp} {self.label}: {self.rows:,}/{self.total:,} rows, "
                    f"{rate:,.0f} rows/s, ETA {eta:,.0f} s",
                    file=self.stream,
                    flush=True,
                )
            for listener in self.listeners:
                listener(now, self.rows)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, eta=f"done in {self.elapsed:,.1f} s")
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class StageClock:
    """Busy seconds per stage of a run: read, score (within it: prepare, the rows read
    into the model's matrix and checked; kernel, the backend's call with its device
    copies; outputs, the output columns built), write.  The stages overlap, and scoring's
    are summed over its parallel calls, so together they exceed the run's wall time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"read": 0.0, "score": 0.0, "write": 0.0}
        self._lock = threading.Lock()

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - began

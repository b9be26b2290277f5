"""Progress of a scoring run: a rich bar on a terminal, otherwise (a log) one line
every ``LOG_EVERY_S`` seconds, stamped with the UTC time.

Every update is also kept as a ``(seconds, rows)`` point, the timeline that reports
plot against the deadline.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

__all__ = ["RunProgress"]

LOG_EVERY_S = 10.0


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
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} rows/s"),
                TimeRemainingColumn(),
                transient=True,
            )
            self._task = self._bar.add_task(label, total=total_rows, rate="-")
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
                self._bar.update(self._task, completed=self.rows, rate=f"{rate:,.0f}")
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
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

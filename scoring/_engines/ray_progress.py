"""A Ray run's progress, fed from its actors.

Each actor's pipeline counts the rows of every batch it writes, as the local engine's
does, and sends them to one counter actor; the driver moves its own progress bar (or its
log lines) from that counter, so a Ray run shows rows, rows/s and the time left while
its files are being scored, not only when each file is done.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._progress import RunProgress

__all__ = ["POLL_S", "RowCounter", "Sender", "following", "row_counter"]

#: How often the driver reads the counter.
POLL_S = 0.5


class RowCounter:
    """The run's rows scored so far, added to by every actor (a Ray actor of no CPU)."""

    def __init__(self) -> None:
        self.rows = 0

    def add(self, rows: int) -> None:
        self.rows += rows

    def total(self) -> int:
        return self.rows


def row_counter() -> Any:
    """A :class:`RowCounter` actor for one run."""
    import ray

    return ray.remote(num_cpus=0)(RowCounter).remote()


class Sender:
    """An actor pipeline's progress listener: the rows written since its last call, to
    the counter (fire and forget: a lost update only slows the bar)."""

    def __init__(self, counter: Any):
        self.counter, self.sent = counter, 0

    def __call__(self, seconds: float, rows: int) -> None:
        if rows > self.sent:
            self.counter.add.remote(rows - self.sent)
            self.sent = rows


@contextmanager
def following(counter: Any, progress: RunProgress, *, cap: int) -> Iterator[None]:
    """While the block runs, ``progress`` follows the counter, to at most ``cap`` rows
    (a file an actor began and another scored again counts once)."""
    import ray

    base, stop = progress.rows, threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            try:
                total = ray.get(counter.total.remote(), timeout=10)
            except Exception:  # a slow or lost answer: the next poll asks again
                continue
            step = min(total, cap) - (progress.rows - base)
            if step > 0:
                progress.advance(step)

    watcher = threading.Thread(target=poll, name="ray-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()

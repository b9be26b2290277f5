"""The local engine: one process, reading, scoring and writing overlapped in threads.

A reader thread decodes record batches (pyarrow uses its own threads and releases the
GIL), the calling thread scores them (torch and the native predictors release it too),
and a writer thread encodes and writes Parquet.  Bounded queues between the stages keep
memory flat however large the input, and FIFO order keeps rows in file order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..commit import Entry
from ..dataset import Fragment
from ..progress import RunProgress
from .base import Run

__all__ = ["run_local"]

QUEUE_DEPTH = 3
_END = object()  # marks the end of a fragment's batches


class _Stopped(Exception):
    """Another stage failed; this one stops quietly and lets that error surface."""


class _Pipe:
    """A bounded queue whose puts and gets give up once any stage has failed."""

    def __init__(self, failed: threading.Event):
        self.q: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_DEPTH)
        self.failed = failed

    def put(self, item: Any) -> None:
        while not self.failed.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def get(self) -> Any:
        while not self.failed.is_set():
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                continue
        raise _Stopped

    def drain(self) -> Iterator[Any]:
        while (item := self.get()) is not None:
            yield item


def run_local(run: Run, *, progress: RunProgress) -> list[Entry]:
    """Score every fragment still to do; returns their journal entries."""
    failed = threading.Event()
    errors: list[BaseException] = []
    read_q, write_q = _Pipe(failed), _Pipe(failed)
    entries: list[Entry] = []

    def guarded(stage: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                stage()
            except _Stopped:
                pass
            except BaseException as exc:  # surfaced by the calling thread below
                errors.append(exc)
                failed.set()

        return body

    def read() -> None:
        for fragment in run.todo:
            batches = run.data.batches(
                fragment, columns=run.columns, batch_rows=run.scorer.batch_rows
            )
            for batch in batches:
                read_q.put((fragment, batch))
            read_q.put((fragment, _END))
        read_q.put(None)

    def write() -> None:
        current: _OutputFile | None = None
        for fragment, table in write_q.drain():
            current = current or _OutputFile(run, fragment)
            if table is _END:
                entries.append(current.close())
                current = None
            else:
                current.write(table)
                progress.advance(table.num_rows)

    threads = [threading.Thread(target=guarded(s), daemon=True) for s in (read, write)]
    for t in threads:
        t.start()

    def score() -> None:
        for fragment, batch in read_q.drain():
            write_q.put((fragment, batch if batch is _END else run.scorer.score(batch)))
        write_q.put(None)

    guarded(score)()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return entries


class _OutputFile:
    """One fragment's output while it is being written."""

    def __init__(self, run: Run, fragment: Fragment):
        self.run, self.fragment, self.rows = run, fragment, 0
        self.tmp, self.sink = run.committer.open(fragment)
        self.writer = pq.ParquetWriter(self.sink, run.schema, compression="snappy")

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(self.run.cast(table))
        self.rows += table.num_rows

    def close(self) -> Entry:
        self.writer.close()
        self.sink.close()
        return self.run.committer.finish(self.fragment, self.tmp, self.sink, self.rows)

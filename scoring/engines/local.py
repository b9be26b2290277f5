"""The local engine: one process, reading, scoring and writing overlapped in threads.

A reader thread decodes record batches (pyarrow uses its own threads and releases the
GIL), a pool scores them (torch and the native predictors release it too), and a writer
thread encodes and writes Parquet.  The pool has one thread per CPU where the native
predictor runs one-thread calls side by side (``Scorer.allow_parallel_calls``), else
one.  Bounded queues between the stages keep memory flat however large the input, and
the writer takes the scored batches in the order they were read, so rows keep file order.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..commit import Entry
from ..dataset import Fragment
from ..progress import RunProgress
from ..scorer import Scorer
from .base import ModelSource, Run, Scored, output_metadata, parse_options

__all__ = ["ENGINE", "LocalEngine", "cpu_threads", "parallel_calls", "run_local"]

QUEUE_DEPTH = 3
MAX_SCORE_THREADS = 32  # past this the single reader thread sets the pace anyway
_END = object()  # marks the end of a fragment's batches


class _Stopped(Exception):
    """Another stage failed; this one stops quietly and lets that error surface."""


class _Pipe:
    """A bounded queue whose puts and gets give up once any stage has failed."""

    def __init__(self, failed: threading.Event, *, depth: int = QUEUE_DEPTH):
        self.q: queue.Queue[Any] = queue.Queue(maxsize=depth)
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


def cpu_threads() -> int:
    """The CPUs this process should use: OMP_NUM_THREADS where set (Ray sets it to an
    actor's CPUs), else the CPUs it may run on."""
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def parallel_calls(scorer: Scorer) -> int:
    """How many batches the engine scores side by side with ``scorer`` on this process."""
    return scorer.allow_parallel_calls(min(cpu_threads(), MAX_SCORE_THREADS))


def run_local(run: Run, *, progress: RunProgress) -> list[Entry]:
    """Score every fragment still to do; returns their journal entries."""
    failed = threading.Event()
    errors: list[BaseException] = []
    calls = parallel_calls(run.scorer)
    pool = ThreadPoolExecutor(max_workers=calls, thread_name_prefix="score")
    # Every batch in the pool has its future queued for the writer: room for all of them.
    read_q, write_q = _Pipe(failed), _Pipe(failed, depth=QUEUE_DEPTH + calls)
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
        for fragment, scored in write_q.drain():
            current = current or _OutputFile(run, fragment)
            if scored is _END:
                entries.append(current.close())
                current = None
            else:
                table = scored.result()
                current.write(table)
                progress.advance(table.num_rows)

    threads = [threading.Thread(target=guarded(s), daemon=True) for s in (read, write)]
    for t in threads:
        t.start()

    def dispatch() -> None:
        for fragment, batch in read_q.drain():
            scored: Future[pa.Table] | object = batch
            if batch is not _END:
                scored = pool.submit(run.scorer.score, batch)
            write_q.put((fragment, scored))
        write_q.put(None)

    guarded(dispatch)()
    for t in threads:
        t.join()
    pool.shutdown(cancel_futures=True)
    if errors:
        raise errors[0]
    return entries


@dataclass(frozen=True)
class LocalOptions:
    """The local engine takes no options (its threads follow the CPUs it may use)."""


class LocalEngine:
    """The embedded default: this process, the model compiled here."""

    name = "local"
    local = True
    resumes = True
    engine_files: tuple[str, ...] = ()
    startup_seconds = 0.0
    table = None

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        return {}

    def options(self, given: Mapping[str, Any]) -> LocalOptions:
        return parse_options(LocalOptions, self.name, given)

    def workers(self, options: Any, *, device: str) -> int:
        return 1

    def run(self, run: Run, *, source: ModelSource, options: Any, progress: RunProgress) -> Scored:
        entries = run_local(run, progress=progress)
        return Scored(entries, {"local": progress.rows}, output_metadata(run.model))


ENGINE = LocalEngine()


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

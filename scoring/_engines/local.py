"""The local engine: one process, reading, scoring and writing overlapped in threads.

A reader thread decodes record batches (pyarrow uses its own threads and releases the
GIL), a pool scores them (torch and the native predictors release it too), and a writer
thread encodes and writes Parquet, gathering each file's batches into row groups of
about 1M rows.  The pool has one thread per CPU where the backend runs one-thread calls
side by side (``Scorer.allow_parallel_calls``: native, and tensor on CPU but for
``fused``), else one.  Bounded queues between the stages keep memory flat however large
the input, and the writer takes the scored batches in the order they were read, so rows
keep file order.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from .._commit import Entry
from .._dataset import Fragment
from .._drift import Counts, merge
from .._modelset import SetScorer
from .._progress import RunProgress, StageClock
from .._scorer import Scorer
from .base import ModelSource, Run, Scored, output_metadata, parse_options, register

__all__ = [
    "ENGINE", "LocalEngine", "StageClock", "cpu_threads", "parallel_calls", "run_local",
]  # fmt: skip

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


def parallel_calls(scorer: Scorer | SetScorer) -> int:
    """How many batches the engine scores side by side with ``scorer`` on this process."""
    return scorer.allow_parallel_calls(min(cpu_threads(), MAX_SCORE_THREADS))


def run_local(run: Run, *, progress: RunProgress, clock: StageClock | None = None) -> list[Entry]:
    """Score every fragment still to do; returns their journal entries (``clock``: the
    busy seconds of each stage are added to it)."""
    return _Pipeline(run, progress, clock or StageClock()).run()


class _Pipeline:
    """The three stages of one run and the queues between them; the first stage to fail
    stops the others and its error is raised by :meth:`run`."""

    def __init__(self, run: Run, progress: RunProgress, clock: StageClock):
        self.job, self.progress, self.clock = run, progress, clock
        self.failed = threading.Event()
        self.errors: list[BaseException] = []
        self.calls = parallel_calls(run.scorer)
        # Every batch in the pool has its future queued for the writer: room for all.
        self.read_q = _Pipe(self.failed)
        self.write_q = _Pipe(self.failed, depth=QUEUE_DEPTH + self.calls)
        self.entries: list[Entry] = []

    def run(self) -> list[Entry]:
        # Stages are awaited on events, not join(): a join that Ctrl-C interrupts marks its
        # thread as stopped (Python 3.11), so waiting again would return while it runs.
        ended = [threading.Event(), threading.Event()]
        for stage, event in zip((self._read, self._write), ended, strict=True):
            threading.Thread(target=self._guarded(stage, ended=event), daemon=True).start()
        with ThreadPoolExecutor(max_workers=self.calls, thread_name_prefix="score") as pool:
            try:
                self._guarded(lambda: self._dispatch(pool))()
                for event in ended:
                    event.wait()
            except BaseException:  # Ctrl-C while waiting: the other stages stop first
                self.failed.set()
                for event in ended:
                    event.wait()
                raise
            pool.shutdown(cancel_futures=True)
        if self.errors:
            raise self.errors[0]
        return self.entries

    def _guarded(
        self, stage: Callable[[], None], *, ended: threading.Event | None = None
    ) -> Callable[[], None]:
        def body() -> None:
            try:
                stage()
            except _Stopped:
                pass
            except BaseException as exc:  # surfaced by the calling thread in run()
                self.errors.append(exc)
                self.failed.set()
            finally:
                if ended is not None:
                    ended.set()

        return body

    def _read(self) -> None:
        job = self.job
        for fragment in job.todo:
            batches = iter(
                job.data.batches(fragment, columns=job.columns, batch_rows=job.scorer.batch_rows)
            )
            while True:
                with self.clock.timing("read"):
                    batch = next(batches, None)
                if batch is None:
                    break
                self.read_q.put((fragment, batch))
            self.read_q.put((fragment, _END))
        self.read_q.put(None)

    def _dispatch(self, pool: ThreadPoolExecutor) -> None:
        for fragment, batch in self.read_q.drain():
            scored: Future[tuple[pa.Table, Counts | None]] | object = batch
            if batch is not _END:
                scored = pool.submit(self._score, batch)
            self.write_q.put((fragment, scored))
        self.write_q.put(None)

    def _score(self, batch: pa.RecordBatch) -> tuple[pa.Table, Counts | None]:
        with self.clock.timing("score"):
            table = self.job.scorer.score(batch, clock=self.clock)
            return table, self.job.count(batch, table)

    def _write(self) -> None:
        current: _OutputFile | None = None
        try:
            for fragment, scored in self.write_q.drain():
                current = current or _OutputFile(self.job, fragment)
                if scored is _END:
                    with self.clock.timing("write"):
                        self.entries.append(current.close())
                    current = None
                else:
                    table, counts = scored.result()
                    with self.clock.timing("write"):
                        current.write(table, counts)
                    self.progress.advance(table.num_rows)
        except BaseException:
            if current is not None:
                current.abandon()
            raise


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
    table: type[BaseModel] | None = None

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        return {}

    def options(self, given: Mapping[str, Any]) -> LocalOptions:
        return parse_options(LocalOptions, self.name, given)

    def workers(self, options: Any, *, device: str) -> int:
        return 1

    def run(self, run: Run, *, source: ModelSource, options: Any, progress: RunProgress) -> Scored:
        clock = StageClock()
        entries = run_local(run, progress=progress, clock=clock)
        return Scored(entries, {"local": progress.rows}, output_metadata(run.model),
                      stages=clock.seconds)  # fmt: skip


ENGINE = register(LocalEngine())


#: Rows (or bytes) of one row group: batches are gathered to this size before they are
#: written, so readers see row groups of about 1M rows, not one per scored batch.
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 128 << 20


def dictionary_columns(schema: pa.Schema, keep: list[str]) -> list[str]:
    """The columns worth a dictionary: an output's labels and reason codes (a handful of
    values) and kept text or dictionary columns.  Not scores (continuous: 3.5x the
    encoding of 20 models' outputs, no bytes saved) nor kept numbers such as a unique id
    (its dictionary outgrows its page and falls back: 2x the writer's time, measured)."""
    kept = set(keep)
    return [
        f.name for f in schema
        if (f.name not in kept and not pa.types.is_floating(f.type))
        or pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)
        or pa.types.is_boolean(f.type)
    ]  # fmt: skip


class _OutputFile:
    """One fragment's output while it is being written."""

    def __init__(self, run: Run, fragment: Fragment):
        self.run, self.fragment, self.rows = run, fragment, 0
        self.stats: Counts | None = None
        self.pending: list[pa.Table] = []  # scored batches gathered into one row group
        self.tmp, self.sink = run.committer.open(fragment)
        try:
            coded = dictionary_columns(run.schema, run.scorer.keep)
            self.writer = pq.ParquetWriter(self.sink, run.schema, compression="snappy",
                                           use_dictionary=coded)  # fmt: skip
        except BaseException:  # its first bytes could not be written
            self._drop()
            raise

    def write(self, table: pa.Table, counts: Counts | None = None) -> None:
        self.pending.append(self.run.cast(table))
        self.rows += table.num_rows
        self.stats = merge(self.stats, counts)
        gathered = sum(t.num_rows for t in self.pending)
        if gathered >= ROW_GROUP_ROWS or sum(t.nbytes for t in self.pending) >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        group = pa.concat_tables(self.pending) if self.pending else None
        self.pending = []
        if group is not None and group.num_rows:  # a file of no rows has no row group
            self.writer.write_table(group, row_group_size=group.num_rows)

    def close(self) -> Entry:
        self._flush()
        self.writer.close()
        self.sink.close()
        return self.run.committer.finish(self.fragment, self.tmp, self.sink, self.rows,
                                         stats=self.stats)  # fmt: skip

    def abandon(self) -> None:
        """Drop a file a failure interrupted.  Its writer is closed here, into a dropped
        sink: left open, the garbage collector would close it and print the failure's
        traceback again ("Exception ignored in ...")."""
        self.sink.drop()
        with contextlib.suppress(Exception):
            self.writer.close()
        self._drop()

    def _drop(self) -> None:
        self.sink.drop()
        self.run.committer.discard(self.tmp)

"""The local engine: one process, reading, scoring and writing overlapped in threads.

A reader thread decodes record batches (pyarrow uses its own threads and releases the
GIL), a pool scores them (torch and the native predictors release it too), and a writer
thread encodes and writes Parquet, gathering each file's batches into row groups of
about 1M rows.  The pool has one thread per CPU where the backend runs one-thread calls
side by side (``Scorer.allow_parallel_calls``: native, and tensor on CPU but for
``fused``), else one.  Bounded queues between the stages keep memory flat however large
the input, and the writer takes the scored batches in the order they were read, so rows
keep file order.

On a host with more CPUs than those stages keep busy (a GPU host of 16 cores decodes and
encodes on about two), several files go through at once: each *lane* is a reader and a
writer of its own, one file at a time, and every lane's batches share the scoring pool.
Outputs stay one per input file and each file is journaled as it closes, so resume is
unchanged; memory grows with the lanes, not with the input.  A Ray actor keeps one
pipeline for its lifetime and feeds it its files as they come (:class:`FileFeed`), so
one file's last batches and write overlap the next one's first reads.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from .._backends.staged import Stopped
from .._drift import Counts, merge
from .._formats.dataset import Fragment
from .._journal.journal import Entry
from .._modelset import SetScorer
from .._progress import RunProgress, StageClock
from .._scorer import Scorer
from ..errors import WRITE_FIX, ConfigError, translated, translating
from .base import ModelSource, Run, Scored, job_options, register
from .scaling import Autoscale, Autoscaler

__all__ = [
    "ENGINE", "FileFeed", "LocalEngine", "LocalOptions", "StageClock", "cpu_threads",
    "file_lanes", "parallel_calls", "run_local",
]  # fmt: skip

QUEUE_DEPTH = 3
MAX_SCORE_THREADS = 32  # past this the lanes' readers set the pace anyway
#: CPUs per lane (its reader and writer, and about two scoring), and the most lanes: past
#: four, files in flight cost memory for no gain on the hosts measured.
LANE_CPUS = 4
MAX_LANES = 4
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


def file_lanes(threads: int | None = None) -> int:
    """Files read and written at once by a process that may use ``threads`` CPUs (by
    default :func:`cpu_threads`): one lane per ``LANE_CPUS``, at least one."""
    return max(1, min(MAX_LANES, (threads or cpu_threads()) // LANE_CPUS))


class _Files:
    """A fixed list of fragments, taken one at a time by the lanes' readers."""

    def __init__(self, fragments: list[Fragment]):
        self.items = iter(fragments)
        self.lock = threading.Lock()

    def take(self, failed: threading.Event) -> Fragment | None:
        with self.lock:
            return next(self.items, None)


class FileFeed:
    """Fragments handed to a running pipeline as they come (a Ray actor's files, for
    the actor's lifetime): a reader waits for the next one until a stage fails."""

    def __init__(self) -> None:
        self.q: queue.Queue[Fragment] = queue.Queue()

    def put(self, fragment: Fragment) -> None:
        self.q.put(fragment)

    def take(self, failed: threading.Event) -> Fragment | None:
        while not failed.is_set():
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                continue
        raise _Stopped


def run_local(
    run: Run,
    *,
    progress: RunProgress,
    clock: StageClock | None = None,
    lanes: int = 1,
    feed: FileFeed | None = None,
    on_entry: Callable[[Entry], None] | None = None,
) -> list[Entry]:
    """Score every fragment still to do (or, for as long as it runs, those ``feed`` hands in),
    ``lanes`` files at once; returns their journal entries as the files closed (the
    manifest orders them).  ``clock``: the busy seconds of each stage are added to it;
    ``on_entry``: called with each file's entry once it is journaled (after the plan's
    ``on_file_journaled`` hook)."""
    files = feed or _Files(run.todo)
    return _Pipeline(
        run, progress, clock or StageClock(), lanes=lanes, files=files, on_entry=on_entry
    ).run()


def _await(event: threading.Event) -> None:
    """Wait for ``event`` where a signal always reaches the waiting thread.  The kernel
    may deliver SIGINT or SIGTERM to any thread; CPython then only flags it, and the main
    thread runs its handler when it next runs Python code, which an untimed wait in the
    main thread never does (seen: a stopped command that never stopped).  So the wait
    wakes now and then to let it."""
    while not event.wait(timeout=0.25):
        pass


class _Lane:
    """One file at a time from reading to writing: the queues between its stages."""

    def __init__(self, failed: threading.Event, *, calls: int):
        self.read_q = _Pipe(failed)
        # Every batch in the pool has its future queued for the writer: room for all.
        self.write_q = _Pipe(failed, depth=QUEUE_DEPTH + calls)


class _Submitted:
    """A batch whose model pass is in flight on the device (:meth:`Scorer.submit`): the
    writer's ``result()`` waits for it alone; ``cancel()`` lets it go unread."""

    def __init__(self, run: Run, batch: pa.RecordBatch, clock: StageClock,
                 stop: threading.Event):  # fmt: skip
        self.run, self.batch, self.clock = run, batch, clock
        try:
            with clock.timing("score"):
                self.pending = run.scorer.submit(batch, clock=clock, stop=stop)
        except Stopped:
            raise _Stopped from None

    def result(self) -> tuple[pa.Table, Counts | None]:
        with self.clock.timing("score"):
            table = self.pending.result()
            return table, self.run.count(self.batch, table)

    def cancel(self) -> None:
        self.pending.cancel()


def _cancel_queued(pipe: _Pipe) -> None:
    """Let every batch still queued for a writer that stopped go unread (a device slot
    each, which a later batch of the process may need)."""
    while True:
        try:
            item = pipe.q.get_nowait()
        except queue.Empty:
            return
        if item is not None and isinstance(item[1], _Submitted):
            item[1].cancel()


class _Pipeline:
    """The stages of one run, a reader, a dispatcher and a writer per lane around one
    scoring pool; the first stage to fail stops the others and its error is raised by
    :meth:`run`."""

    def __init__(
        self,
        run: Run,
        progress: RunProgress,
        clock: StageClock,
        *,
        lanes: int,
        files: _Files | FileFeed,
        on_entry: Callable[[Entry], None] | None,
    ):
        self.job, self.progress, self.clock, self.files = run, progress, clock, files
        self.failed = threading.Event()
        self.errors: list[BaseException] = []
        self.calls = parallel_calls(run.scorer)
        self.lanes = [_Lane(self.failed, calls=self.calls) for _ in range(max(1, lanes))]
        if run.scorer.in_flight:
            run.scorer.allow_in_flight(2 * len(self.lanes))
        self.entries: list[Entry] = []
        self.on_entry = on_entry

    def run(self) -> list[Entry]:
        # Stages are awaited on events, not join(): a join that Ctrl-C interrupts marks its
        # thread as stopped (Python 3.11), so waiting again would return while it runs.
        ended: list[threading.Event] = []
        with ThreadPoolExecutor(max_workers=self.calls, thread_name_prefix="score") as pool:
            for lane in self.lanes:
                for stage in (self._read, self._write, partial(self._dispatch, pool=pool)):
                    ended.append(threading.Event())
                    body = self._guarded(partial(stage, lane), ended=ended[-1])
                    threading.Thread(target=body, daemon=True).start()
            try:
                for event in ended:
                    _await(event)
            except BaseException:  # Ctrl-C while waiting: the other stages stop first
                self.failed.set()
                for event in ended:
                    _await(event)
                raise
            pool.shutdown(cancel_futures=True)
        for lane in self.lanes:  # what a stopped writer left
            _cancel_queued(lane.write_q)
        if self.errors:
            raise self.errors[0]
        return self.entries

    def _guarded(self, stage: Callable[[], None], *, ended: threading.Event) -> Callable[[], None]:
        def body() -> None:
            try:
                stage()
            except _Stopped:
                pass
            except BaseException as exc:  # surfaced by the calling thread in run()
                self.errors.append(exc)
                self.failed.set()
            finally:
                ended.set()

        return body

    def _read(self, lane: _Lane) -> None:
        job = self.job
        while (fragment := self.files.take(self.failed)) is not None:
            batches = iter(
                job.plan.data.batches(
                    fragment, columns=list(job.plan.columns), batch_rows=job.scorer.batch_rows
                )
            )
            while True:
                with self.clock.timing("read"):
                    batch = next(batches, None)
                if batch is None:
                    break
                lane.read_q.put((fragment, batch))
            lane.read_q.put((fragment, _END))
        lane.read_q.put(None)

    def _dispatch(self, lane: _Lane, *, pool: ThreadPoolExecutor) -> None:
        in_flight = self.job.scorer.in_flight
        for fragment, batch in lane.read_q.drain():
            scored: Future[tuple[pa.Table, Counts | None]] | _Submitted | object = batch
            if batch is not _END and in_flight:  # the device's steps queued, not awaited
                scored = _Submitted(self.job, batch, self.clock, self.failed)
            elif batch is not _END:
                scored = pool.submit(self._score, batch)
            try:
                lane.write_q.put((fragment, scored))
            except _Stopped:
                if isinstance(scored, _Submitted):
                    scored.cancel()
                raise
        lane.write_q.put(None)

    def _score(self, batch: pa.RecordBatch) -> tuple[pa.Table, Counts | None]:
        with self.clock.timing("score"):
            table = self.job.scorer.score(batch, clock=self.clock)
            return table, self.job.count(batch, table)

    def _write(self, lane: _Lane) -> None:
        current: _OutputFile | None = None
        try:
            for fragment, scored in lane.write_q.drain():
                current = current or _OutputFile(self.job, fragment)
                if scored is _END:
                    with self.clock.timing("write"):
                        entry = current.close()
                    current = None
                    self.entries.append(entry)
                    self.job.plan.hooks.file_journaled(entry)
                    if self.on_entry is not None:
                        self.on_entry(entry)
                else:
                    table, counts = scored.result()
                    with self.clock.timing("write"):
                        current.write(table, counts)
                    self.progress.advance(table.num_rows)
        except BaseException:
            _cancel_queued(lane.write_q)  # frees device slots a dispatcher may wait for
            if current is not None:
                current.abandon()
            raise


class LocalOptions(BaseModel):
    """The local engine's one option (``engine_options``, or a job file's ``[local]``
    table): files read and written at once (by default one per ``LANE_CPUS`` CPUs this
    process may use, see :func:`file_lanes`); its scoring threads follow the CPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    files_at_once: StrictInt | None = Field(default=None, ge=1)
    """Input files read, scored and written at once (default: one per 4 CPUs, at most 4)."""


class LocalEngine:
    """The embedded default: this process, the model compiled here."""

    name = "local"
    local = True
    resumes = True
    engine_files: tuple[str, ...] = ()
    startup_seconds = 0.0
    options: type[BaseModel] = LocalOptions

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        return job_options(table, self.name, {})

    def workers(self, options: Any, *, device: str) -> int:
        return 1

    def autoscaler(self, options: Any, *, device: str, bounds: Autoscale) -> Autoscaler:
        raise ConfigError(
            "[autoscale] sizes a cluster and the local engine runs in one process; use "
            "engine 'ray' or 'spark'"
        )

    def run(
        self, run: Run, *, source: ModelSource, options: LocalOptions, progress: RunProgress
    ) -> Scored:
        clock = StageClock()
        lanes = options.files_at_once or file_lanes()
        entries = run_local(run, progress=progress, clock=clock, lanes=lanes)
        return Scored(entries, {"local": progress.rows}, run.model.output_metadata(),
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


@translating("table write", lambda file: f"cannot write {file.tmp!r}", fix=WRITE_FIX)
class _OutputFile:
    """One fragment's output while it is being written."""

    def __init__(self, run: Run, fragment: Fragment):
        self.run, self.fragment, self.rows = run, fragment, 0
        self.stats: Counts | None = None
        self.pending: list[pa.Table] = []  # scored batches gathered into one row group
        self.tmp, self.sink = run.plan.journal.open(fragment)
        try:
            coded = dictionary_columns(run.plan.schema, run.scorer.keep)
            with translated("table write", f"cannot write {self.tmp!r}", fix=WRITE_FIX):
                self.writer = pq.ParquetWriter(
                    self.sink, run.plan.schema, compression="snappy", use_dictionary=coded
                )
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
        return self.run.plan.journal.finish(self.fragment, self.tmp, self.sink, self.rows,
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
        self.run.plan.journal.discard(self.tmp)

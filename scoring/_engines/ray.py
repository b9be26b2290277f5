"""``engine="ray"``: whole input files scored by a pool of Ray actors.

The driver plans the run as the local engine does (every check before writing), then
feeds the files still to do, one per task, to an actor pool. Each actor keeps one local
engine pipeline (reading, scoring and writing overlapped), feeds it its files as they
come and writes into the shared staging area, so the commit is the local engine's: a
retried task or a restarted actor rewrites the same staged file under a fresh temporary
name, and the journal, not the tasks' return values, decides what is published. Data
never passes through the object store; actors read the files where they are. An actor
is named by its host, process and GPUs (:mod:`scoring._engines.placement`). Workers get
the model as a bundle through the object store and check its sha256 before compiling it
(once per process). A file that fails in an actor comes back as a record, and the driver
raises its error as it was (ours, or the OS error naming the path), never Ray Data's
wrapper of it. When Ray fails the job for a reason of its own (a lost node, an actor
cancelled while starting), the files the journal does not prove done go to a fresh job,
up to ``RAY_ATTEMPTS``.

Joining the cluster, sizing the actor pool and loading the model in an actor:
:mod:`scoring._engines.ray_cluster`.
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from .. import errors
from .._formats.dataset import Fragment
from .._journal.journal import Entry
from .._modelset import scorer_for
from .._progress import RunProgress
from .._stores import install
from ..errors import EngineError, ScoringError, cause_line, translated
from .base import ModelSource, Run, Scored, job_options, register
from .local import FileFeed, file_lanes, run_local
from .placement import placement_only, scoring_device, worker_label
from .plan import RunPlan
from .ray_autoscale import RayAutoscaler
from .ray_cluster import (
    WorkerPlan,
    check_fits,
    connect,
    load_bundle,
    node_cpus,
    patient,
    plan_workers,
)
from .ray_progress import Sender, following, row_counter
from .scaling import Autoscale

__all__ = ["ENGINE", "RAY_ATTEMPTS", "RayEngine", "RayOptions"]


class RayOptions(BaseModel):
    """The Ray engine's options: ``engine_options``, a job file's ``[ray]`` table (its
    ``workers`` and ``[resources]`` give ``num_workers``, ``num_cpus``, ``num_gpus``)
    and the CLI's ``--ray-address`` and ``--workers``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    address: str | None = None
    """The cluster to join (``head:6379``, ``auto``); none: ``RAY_ADDRESS``, else a local one."""
    num_workers: StrictInt | None = Field(default=None, ge=1)
    """Actors in the pool (default: one per GPU, else from the cluster's CPUs)."""
    num_cpus: float | None = Field(default=None, gt=0)
    """CPUs per actor (not the planned share of the cluster)."""
    num_gpus: float | None = Field(default=None, ge=0)
    """GPUs per actor."""
    files_at_once: StrictInt | None = Field(default=None, ge=1)
    """Files an actor reads and writes at once (default: one per 4 of its CPUs)."""


@dataclass(frozen=True)
class _Spec:
    """What an actor gets: the run's plan (its device resolved for the actors), the model
    bundle through the object store (no registry, no model object), the threads it
    scores on and the files it reads and writes at once."""

    plan: RunPlan
    bundle: tuple[Any]
    threads: int
    lanes: int = 1
    placement: bool = False  # GPUs place the actors, the CPU scores (see .placement)
    counter: Any = None  # the run's RowCounter actor: rows as they are scored


class _FileWorker:
    """A Ray Data actor scoring whole input files into the run's staging area.

    One pipeline serves the actor's lifetime: each call hands its file to it
    (:class:`FileFeed`) and waits for that file's journal entry, and Ray Data keeps
    ``lanes + 1`` calls in flight, so the next file is read while the last one's final
    batches are scored and written (per-file pipelines cost about 0.5 s a file here).
    A failed pipeline fails the calls waiting on it with its error; the next call starts
    a fresh one.
    """

    def __init__(self, spec: _Spec):
        import ray

        plan, how = spec.plan, spec.plan.score
        install(plan.stores)  # for this actor's lifetime: it scores this run only
        gpus = [str(g) for g in ray.get_gpu_ids()]  # CUDA_VISIBLE_DEVICES is set to them
        device = scoring_device(how.device, gpus, placement=spec.placement)
        model = load_bundle(spec.bundle, device=device, backend=how.backend,
                            strategy=how.strategy, threads=spec.threads)  # fmt: skip
        scorer = scorer_for(model, keep=list(how.keep), outputs=how.outputs)
        metadata = model.output_metadata()
        self.metadata = json.dumps(metadata)  # what every file of this actor carries
        self.run = Run(replace(plan, schema=plan.schema.with_metadata(metadata)), model, scorer)
        self.name = worker_label(gpus)
        self.lanes, self.counter = spec.lanes, spec.counter
        self.lock = threading.Lock()
        self.feed: FileFeed | None = None  # the running pipeline's, None when there is none
        self.waiting: dict[str, Future[Entry]] = {}

    def _submit(self, fragment: Fragment) -> Future[Entry]:
        """``fragment`` handed to the pipeline (started if none runs): its entry to come."""
        with self.lock:
            if self.feed is None:
                self.feed = FileFeed()
                threading.Thread(target=self._serve, args=(self.feed,), daemon=True).start()
            done: Future[Entry] = Future()
            self.waiting[fragment.relpath] = done
            self.feed.put(fragment)
            return done

    def _serve(self, feed: FileFeed) -> None:
        progress = RunProgress(0, enabled=False)
        if self.counter is not None:  # the driver's bar follows every batch written
            progress.listeners.append(Sender(self.counter))
        try:
            run_local(self.run, progress=progress, lanes=self.lanes, feed=feed,
                      on_entry=self._journaled)  # fmt: skip
        except BaseException as exc:  # every file still waiting fails with the error
            with self.lock:
                self.feed = None
                waiting, self.waiting = self.waiting, {}
            for done in waiting.values():
                done.set_exception(exc)

    def _journaled(self, entry: Entry) -> None:
        """Runs in the pipeline's writer, after the plan's ``on_file_journaled`` hook."""
        with self.lock:
            done = self.waiting.pop(entry.relpath)
        done.set_result(entry)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            "fragment": [], "rows": [], "worker": [], "metadata": [], "error": []
        }  # fmt: skip
        for index in batch["fragment"]:
            try:
                entry = self._submit(self.run.plan.data.fragments[int(index)]).result()
                rows, error = entry.rows, ""
            except Exception as exc:  # raised again by the driver: see _failure
                rows, error = 0, _failure(exc)
            out["fragment"].append(int(index))
            out["rows"].append(rows)
            out["worker"].append(self.name)
            out["metadata"].append(self.metadata)
            out["error"].append(error)
            if error:
                return out
        return out


class RayEngine:
    """Files spread over a Ray actor pool (see the module docstring)."""

    name = "ray"
    local = False
    resumes = True
    engine_files: tuple[str, ...] = ()
    startup_seconds = 15.0  # a local cluster and its actors (benchmarks/results/e2e_ray_cpu.md)
    options: type[BaseModel] = RayOptions

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        given = {"num_workers": workers, "num_cpus": cpus, "num_gpus": gpus}
        return job_options(table, self.name, given)

    def workers(self, options: RayOptions, *, device: str) -> int:
        import ray

        if options.num_workers is not None:
            return options.num_workers
        connect(options.address)
        return plan_workers(
            ray.cluster_resources(), device=device, reserve_reads=False, node_cpus=node_cpus()
        ).workers

    def autoscaler(self, options: RayOptions, *, device: str, bounds: Autoscale) -> RayAutoscaler:
        return RayAutoscaler(options, device=device)  # the bounds are the plan's

    def run(
        self, run: Run, *, source: ModelSource, options: RayOptions, progress: RunProgress
    ) -> Scored:
        """Score ``run.todo`` on the cluster: the journal entries of every file, rows per
        worker and the output metadata the workers wrote."""
        import ray

        if not run.todo:  # every file journaled by an earlier run: only publication is left
            return Scored([], {}, _written_metadata(run))
        connect(options.address)
        nodes = node_cpus()
        plan = plan_workers(
            ray.cluster_resources(),
            device=run.plan.score.device,
            num_workers=options.num_workers,
            reserve_reads=False,  # actors read their own files; Ray runs no read tasks here
            node_cpus=nodes,
        )
        plan = replace(
            plan,
            num_cpus=options.num_cpus or plan.num_cpus,
            num_gpus=plan.num_gpus if options.num_gpus is None else options.num_gpus,
        )
        check_fits(plan, nodes)
        spec = _Spec(
            plan=replace(run.plan, score=replace(run.plan.score, device=plan.device)),
            bundle=(ray.put(source.shipped().to_bytes()),),
            threads=plan.threads,
            lanes=options.files_at_once or file_lanes(plan.threads),
            placement=placement_only(),
            counter=row_counter(),
        )
        tally = _Tally()
        cap = sum(f.rows for f in run.todo)
        with following(spec.counter, progress, cap=cap):
            self._attempts(run, spec, plan, tally)
        entries = _journaled(run)  # one listing of the journal for both
        tally.count_unreported(run, entries)
        progress.advance(max(0, sum(e.rows for e in entries) - progress.rows))
        return Scored(entries, tally.workers, tally.metadata)

    def _attempts(self, run: Run, spec: _Spec, plan: WorkerPlan, tally: _Tally) -> None:
        """Ray jobs until every file is journaled: after a failure of Ray's own, the
        files not yet journaled go to a new job, :data:`RAY_ATTEMPTS` at most."""
        todo = run.todo
        for attempt in range(1, RAY_ATTEMPTS + 1):
            failure = _attempt(replace(run, todo=todo), spec, plan, tally)
            if failure is None:
                return
            done = run.plan.journal.completed(todo)
            todo = [f for f in todo if f.relpath not in done]
            _warn(failure, left=len(todo), attempt=attempt)
            if not todo:
                return
            if attempt == RAY_ATTEMPTS:
                fix = NEVER_RAN_FIX if NEVER_RAN in str(failure) else ""
                with translated("ray", f"the Ray job failed {RAY_ATTEMPTS} times", fix=fix):
                    raise failure


ENGINE = register(RayEngine())

#: Ray jobs one run may take: after a failure of Ray's own (a lost or cancelled actor,
#: a dead node), the files the journal does not prove done go to a fresh job.
RAY_ATTEMPTS = 3

#: How Ray reports an actor cancelled before it ran.  Every actor of every attempt so
#: cancelled is what a driver whose authentication mode differs from the cluster's sees
#: (reproduced: a token-mode driver on a cluster started with RAY_AUTH_MODE=disabled).
NEVER_RAN = "cancelled before it started running"
NEVER_RAN_FIX = (
    "if every actor is cancelled so, this driver's RAY_AUTH_MODE may differ from the "
    "cluster's: a process that started a local Ray (ray.init()) stays in token mode, "
    "so set RAY_AUTH_MODE and the token on the driver as on the cluster (docs/ray.md)"
)


@dataclass
class _Tally:
    """What Ray reported over a run's jobs: rows per worker, files, the metadata."""

    workers: dict[str, int] = field(default_factory=dict)
    reported: set[int] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any]) -> None:
        self.workers[row["worker"]] = self.workers.get(row["worker"], 0) + int(row["rows"])
        self.reported.add(int(row["fragment"]))
        self.metadata = self.metadata or json.loads(row["metadata"])

    def count_unreported(self, run: Run, entries: list[Entry]) -> None:
        """Rows of files the journal proves done (``entries``, in ``run.todo``'s order)
        whose worker Ray never reported (its job failed after they were journaled):
        counted for nobody, not lost."""
        pairs = zip(run.todo, entries, strict=True)
        rows = sum(e.rows for f, e in pairs if f.index not in self.reported)
        if rows:
            self.workers[_UNREPORTED] = rows


def _attempt(run: Run, spec: _Spec, plan: WorkerPlan, tally: _Tally) -> BaseException | None:
    """One Ray job over ``run.todo``: None when it finished, else Ray's own failure (a
    file's error, ours or the OS's, is raised as it was)."""
    import ray

    with translated("ray", "the Ray job failed"):
        rows = iter(_scored_files(run, spec, plan).iter_rows())
        try:
            for row in rows:
                if row["error"]:
                    raise _raised(row["error"], worker=row["worker"])
                tally.add(row)
        except ray.exceptions.RayError as exc:
            ours = _ours(exc)
            if ours is not None:
                raise ours from exc
            return exc
        finally:  # stops the job and frees its actors now, not when collected
            getattr(rows, "close", lambda: None)()
    return None


def _warn(failure: BaseException, *, left: int, attempt: int) -> None:
    """Ray's failure, in one line, and what follows from it."""
    what = f"the Ray job failed ({type(failure).__name__}: {cause_line(failure, first_line=True)})"
    if not left:
        then = "every file was scored and journaled: publishing"
    elif attempt < RAY_ATTEMPTS:
        then = f"{left} file(s) not journaled go to a new job ({attempt + 1} of {RAY_ATTEMPTS})"
    else:
        return  # raised by the caller
    logging.getLogger(__name__).warning("%s; %s", what, then)


def _scored_files(run: Run, spec: _Spec, plan: WorkerPlan) -> Any:
    """A dataset of the files to do, one per block, mapped by a pool of file workers."""
    import ray.data

    todo = ray.data.from_items(
        [{"fragment": f.index} for f in run.todo], override_num_blocks=len(run.todo)
    )
    patient(todo.context)
    return todo.map_batches(
        _FileWorker,
        fn_constructor_kwargs={"spec": spec},
        batch_size=1,
        batch_format="numpy",
        # As many files per actor as its pipeline reads at once, and one more, so the next
        # file is read while the last is written.  No more: queued behind a busy actor,
        # files would wait while another starts, and Ray Data cancels (and fails the job
        # for) an actor still starting when every file is handed out.  Each call only
        # waits for its file, so the calls run side by side.
        compute=ray.data.ActorPoolStrategy(
            size=min(plan.workers, len(run.todo)),
            max_tasks_in_flight_per_actor=spec.lanes + 1,
            max_concurrent_calls_per_actor=spec.lanes + 1,
            enable_true_multi_threading=True,
        ),
        num_cpus=plan.num_cpus,
        num_gpus=plan.num_gpus or None,
    )


#: Rows of files the journal proves done whose worker Ray did not report.
_UNREPORTED = "(not reported by Ray)"


def _written_metadata(run: Run) -> dict[str, str]:
    """The scoring metadata an earlier run wrote into its first staged file."""
    if not run.done:
        return {}
    journal = run.plan.journal
    path = journal.where(next(iter(run.done.values())))  # staged, or published
    if path is None:
        return {}
    with journal.fs.open(path, "rb") as f:
        meta = pq.read_schema(f).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"scoring.")}


def _journaled(run: Run) -> list[Entry]:
    """The entries of this run's files, from the journal (the only proof of a file)."""
    done = run.plan.journal.completed(run.todo)
    missing = [f.relpath for f in run.todo if f.relpath not in done]
    if missing:
        raise EngineError(
            f"{len(missing)} input file(s) have no complete output after the Ray job "
            f"({missing[0]!r}, ...); rerun the same command to finish them"
        )
    return [done[f.relpath] for f in run.todo]


def _failure(exc: Exception) -> str:
    """A file's failure in an actor, as a record for the driver to raise again.  Raised
    through Ray instead, it would lose its cause on the way back (exceptions pickle
    without one) and surface as Ray Data's wrapper, whose message ends with advice."""
    record: dict[str, Any] = {"kind": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, OSError):
        filename = None if exc.filename is None else str(exc.filename)
        record.update(errno=exc.errno, strerror=exc.strerror, filename=filename)
    return json.dumps(record)


def _raised(text: str, *, worker: str) -> Exception:
    """The error a :func:`_failure` record stands for: ours and OS errors as they were
    (the command line words them as for the local engine), anything else named."""
    record = json.loads(text)
    kind, message = record["kind"], record["message"]
    ours = getattr(errors, kind, None)
    if isinstance(ours, type) and issubclass(ours, ScoringError):
        return ours(message)
    system = getattr(builtins, kind, None)
    if isinstance(system, type) and issubclass(system, OSError) and record.get("strerror"):
        return system(record["errno"], record["strerror"], record["filename"])
    first = next((line for line in message.splitlines() if line.strip()), "")
    return EngineError(f"a Ray worker ({worker}) failed: {kind}: {first}")


def _ours(exc: BaseException) -> ScoringError | None:
    """Our own error raised inside a worker, which Ray hands back as the cause."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ScoringError):
            return seen
        seen = getattr(seen, "cause", None) or seen.__cause__
    return None

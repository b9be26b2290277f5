"""``engine="ray"``: whole input files scored by a pool of Ray actors.

The driver plans the run as the local engine does (every check before writing), then
feeds the files still to do, one per task, to an actor pool.  Each actor runs the local
engine's pipeline on its file (reading, scoring and writing overlapped) into the shared
staging area, so the commit is the local engine's: a retried task or a restarted actor
rewrites the same staged file under a fresh temporary name, and the journal, not the
tasks' return values, decides what is published.  Data never passes through the object
store; actors read the files where they are.  Workers get the model as a bundle through
the object store and check its sha256 before compiling it (once per process).  A file
that fails in an actor comes back as a record, and the driver raises its error as it was
(ours, or the OS error naming the path), never Ray Data's wrapper of it.  When Ray
fails the job for a reason of its own (a lost node, an actor cancelled while starting),
the files the journal does not prove done go to a fresh job, up to ``RAY_ATTEMPTS``.

Resources (:func:`plan_workers`): one actor per GPU with a fractional CPU request, or,
without GPUs, CPU actors sized so that Ray's read tasks always find a CPU.
"""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from .. import errors
from .._bundle import Bundle
from .._cache import compiled
from .._commit import Committer, Entry
from .._dataset import InputDataset
from .._model import CompiledModel
from .._progress import RunProgress
from .._scorer import Scorer
from .._stores import StoreConfig, install
from ..errors import ConfigError, EngineError, ScoringError, cause_line, translated
from .base import ModelSource, Run, Scored, output_metadata, parse_options, register
from .local import run_local

__all__ = [
    "DATASET_BATCH_ROWS",
    "ENGINE",
    "RayEngine",
    "RayOptions",
    "RayTable",
    "WorkerPlan",
    "connect",
    "load_bundle",
    "plan_workers",
]

#: CPU threads a CPU-only actor gets: tree scoring scales well to about this many.
CPU_WORKER_THREADS = 4
#: Most of a CPU a GPU actor asks for; it mostly waits on the device and on I/O.
GPU_WORKER_CPUS = 1.0
#: Deaths of starting actors in a row that a Ray Data job survives (see :func:`connect`).
ACTOR_INIT_DEATHS = 4
#: Rows per batch handed to an actor by ``score_dataset`` unless told otherwise.
DATASET_BATCH_ROWS = 131_072


@dataclass(frozen=True)
class WorkerPlan:
    """How many scoring actors, what each asks Ray for, and the device they score on."""

    workers: int
    num_cpus: float
    num_gpus: float
    device: str

    @property
    def threads(self) -> int:
        """CPU threads an actor may use (Ray sets OMP_NUM_THREADS the same way)."""
        return max(1, math.floor(self.num_cpus))


def connect(address: str | None = None) -> None:
    """Join the cluster at ``address`` ("auto" finds a running one), or start a local one;
    a Ray session the caller already started is used as it is."""
    import ray
    import ray.data

    if not ray.is_initialized():
        # Ray starts workers at niceness 15, for a raylet's comfort; here the workers are
        # the job, and on a busy machine a niced actor pool starves (a cluster we join
        # keeps its own setting).
        os.environ.setdefault("RAY_worker_niceness", "0")
        try:
            ray.init(address=address, logging_level=logging.WARNING, include_dashboard=False)
        except ConnectionError as exc:
            raise EngineError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    context = ray.data.DataContext.get_current()
    # Ray Data drops a pending actor when it scales a pool down (a busy node, the input
    # running out) and then counts that actor's cancellation as a death during
    # initialisation, which by default fails the job at the first: tolerate a few.
    if 0 <= context.max_consecutive_actor_init_deaths < ACTOR_INIT_DEATHS:
        context.max_consecutive_actor_init_deaths = ACTOR_INIT_DEATHS
    # Our own progress and summary replace Ray Data's per-operator bars and its
    # execution log lines (and the notice that its bars are off).
    context.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


def plan_workers(
    resources: Mapping[str, float],
    *,
    device: str = "auto",
    num_workers: int | None = None,
    reserve_reads: bool = True,
    node_cpus: Sequence[float] = (),
) -> WorkerPlan:
    """Size the actor pool from ``ray.cluster_resources()`` and, when given, the CPUs of
    each node (:func:`node_cpus`).

    GPUs (device auto or cuda): one actor per GPU, ``num_gpus=1``, and at most
    ``GPU_WORKER_CPUS`` CPU each, never more than half the cluster's CPUs together.
    CPUs only: actors of ``CPU_WORKER_THREADS`` CPUs; with ``reserve_reads`` one CPU
    (half of a 2-CPU cluster) stays free for the read tasks, which an actor pool that
    claims every CPU starves forever.  An actor never asks for more CPUs than the largest
    node has: Ray would wait for such a node forever (two 1-CPU nodes are two actors of
    one CPU, not one of two).
    """
    plan = _plan(resources, device=device, num_workers=num_workers, reserve_reads=reserve_reads)
    largest = max(node_cpus, default=0.0)
    if largest <= 0 or plan.num_cpus <= largest:
        return plan
    if num_workers is not None:  # the caller's count, each actor as large as a node allows
        return replace(plan, num_cpus=largest)
    fitting = sum(int(n // largest) for n in node_cpus)  # actors of `largest` CPUs
    planned = plan.workers * plan.num_cpus
    return replace(plan, workers=max(1, min(fitting, int(planned // largest))), num_cpus=largest)


def node_cpus() -> list[float]:
    """The CPUs of each live node of the connected cluster."""
    import ray

    return [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]


def check_fits(plan: WorkerPlan, cpus_per_node: Sequence[float]) -> None:
    """An actor asking for more CPUs than any node has would wait forever: refuse it."""
    largest = max(cpus_per_node, default=0.0)
    if largest > 0 and plan.num_cpus > largest:
        raise ConfigError(
            f"num_cpus={plan.num_cpus:g} per actor, but the largest node of the Ray cluster "
            f"has {largest:g} CPUs, so no actor could start; ask for at most {largest:g}"
        )


def _plan(
    resources: Mapping[str, float], *, device: str, num_workers: int | None, reserve_reads: bool
) -> WorkerPlan:
    cpus = float(resources.get("CPU", 0))
    gpus = float(resources.get("GPU", 0)) if device != "cpu" else 0.0
    if num_workers is not None and num_workers < 1:
        raise ConfigError(f"num_workers={num_workers}: expected at least 1")
    if device.startswith("cuda") and gpus == 0:
        raise ConfigError(
            f"device={device!r} but the Ray cluster has no GPUs; use device='auto' or 'cpu'"
        )
    if cpus <= 0:
        raise EngineError("the Ray cluster reports no CPUs; cannot place scoring actors")
    if gpus > 0:
        workers = num_workers or int(gpus)
        per_cpu = min(GPU_WORKER_CPUS, cpus / (2 * workers))
        return WorkerPlan(workers, per_cpu, min(1.0, gpus / workers), "cuda")
    usable = max(cpus - 1, cpus / 2) if reserve_reads else cpus
    workers = num_workers or max(1, int(usable // CPU_WORKER_THREADS))
    return WorkerPlan(workers, usable / workers, 0.0, "cpu")


def load_bundle(ref: tuple[Any], *, device: str, backend: str, threads: int) -> CompiledModel:
    """The model from the object store, checksum verified, compiled once per process.

    ``ref`` is a 1-tuple so that Ray hands the actor the reference, not the value: the
    bytes are fetched (and checked) here, once per actor, even after a restart.
    """
    import ray
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    bundle = Bundle.from_bytes(ray.get(ref[0]))  # raises IntegrityError on a bad payload
    return compiled(bundle, device=device, backend=backend)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class RayTable(BaseModel):
    """A job file's ``[ray]`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str | None = None


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None
    num_workers: int | None = None
    num_cpus: float | None = None  # per actor, instead of the planned share
    num_gpus: float | None = None


@dataclass(frozen=True)
class _Spec:
    """Everything an actor needs to score files of this run (no registry, no model)."""

    bundle: tuple[Any]
    data: InputDataset
    output: str
    job: dict[str, Any]
    keep: Sequence[str]
    outputs: str
    columns: list[str]
    schema: pa.Schema
    device: str
    backend: str
    threads: int
    stores: StoreConfig
    hold: str | None = None


class _FileWorker:
    """A Ray Data actor scoring whole input files into the run's staging area."""

    def __init__(self, spec: _Spec):
        install(spec.stores)  # for this actor's lifetime: it scores this run only
        model = load_bundle(
            spec.bundle, device=spec.device, backend=spec.backend, threads=spec.threads
        )
        data = spec.data
        scorer = Scorer(model, keep=spec.keep, outputs=spec.outputs)
        metadata = output_metadata(model)
        self.metadata = json.dumps(metadata)  # what every file of this actor carries
        self.run = Run(
            data=data,
            model=model,
            scorer=scorer,
            committer=Committer(spec.output, job=spec.job),
            columns=spec.columns,
            schema=spec.schema.with_metadata(metadata),
            todo=[],
            done={},
            complete=False,
        )
        self.name = worker_name()
        self.hold = spec.hold

    def _held(self) -> None:
        """The test hook (:attr:`RayEngine.hold_after_first_file`): say this worker has
        journaled a file, then wait until the test releases it."""
        hold, self.hold = self.hold, None
        if hold is None:
            return
        with open(os.path.join(hold, str(os.getpid())), "w"):
            pass
        while not os.path.exists(os.path.join(hold, "release")):
            threading.Event().wait(0.05)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            "fragment": [], "rows": [], "worker": [], "metadata": [], "error": []
        }  # fmt: skip
        for index in batch["fragment"]:
            fragment = self.run.data.fragments[int(index)]
            run = replace(self.run, todo=[fragment])
            try:
                (entry,) = run_local(run, progress=RunProgress(fragment.rows, enabled=False))
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
            self._held()
        return out


class RayEngine:
    """Files spread over a Ray actor pool (see the module docstring)."""

    name = "ray"
    local = False
    resumes = True
    engine_files: tuple[str, ...] = ()
    startup_seconds = 15.0  # a local cluster and its actors (benchmarks/results/e2e_ray_cpu.md)
    table: type[BaseModel] | None = RayTable
    #: Tests only: a directory; each actor writes ``<pid>`` there after its first file
    #: and waits for a ``release`` file, so a kill lands mid-job by an event, not a clock.
    hold_after_first_file: str | None = None

    def options(self, given: Mapping[str, Any]) -> RayOptions:
        return parse_options(RayOptions, self.name, given)

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        given = {"num_workers": workers, "num_cpus": cpus, "num_gpus": gpus}
        options = table.model_dump(exclude_none=True) if table is not None else {}
        return {**options, **{k: v for k, v in given.items() if v is not None}}

    def workers(self, options: RayOptions, *, device: str) -> int:
        import ray

        if options.num_workers is not None:
            return options.num_workers
        connect(options.address)
        return plan_workers(
            ray.cluster_resources(), device=device, reserve_reads=False, node_cpus=node_cpus()
        ).workers

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
            device=run.device,
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
            bundle=(ray.put(source.shipped().to_bytes()),),
            data=run.data,
            output=run.committer.url,
            job=run.committer.job,
            keep=run.scorer.keep,
            outputs=run.outputs,
            columns=run.columns,
            schema=run.schema,
            device=plan.device,
            backend=run.backend,
            threads=plan.threads,
            stores=run.stores,
            hold=self.hold_after_first_file,
        )
        tally = _Tally()
        todo = run.todo
        for attempt in range(1, RAY_ATTEMPTS + 1):
            failure = _attempt(replace(run, todo=todo), spec, plan, tally, progress)
            if failure is None:
                break
            done = run.committer.completed(todo)
            todo = [f for f in todo if f.relpath not in done]
            _warn(failure, left=len(todo), attempt=attempt)
            if not todo:
                break
            if attempt == RAY_ATTEMPTS:
                with translated("ray", f"the Ray job failed {RAY_ATTEMPTS} times"):
                    raise failure
        tally.count_unreported(run, progress)
        return Scored(_journaled(run), tally.workers, tally.metadata)


ENGINE = register(RayEngine())

#: Ray jobs one run may take: after a failure of Ray's own (a lost or cancelled actor,
#: a dead node), the files the journal does not prove done go to a fresh job.
RAY_ATTEMPTS = 3


@dataclass
class _Tally:
    """What Ray reported over a run's jobs: rows per worker, files, the metadata."""

    workers: dict[str, int] = field(default_factory=dict)
    reported: set[int] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any], progress: RunProgress) -> None:
        self.workers[row["worker"]] = self.workers.get(row["worker"], 0) + int(row["rows"])
        self.reported.add(int(row["fragment"]))
        self.metadata = self.metadata or json.loads(row["metadata"])
        progress.advance(int(row["rows"]))

    def count_unreported(self, run: Run, progress: RunProgress) -> None:
        """Rows of files the journal proves done whose worker Ray never reported (its job
        failed after they were journaled): counted for nobody, not lost."""
        missing = [f for f in run.todo if f.index not in self.reported]
        done = run.committer.completed(missing) if missing else {}
        rows = sum(done[f.relpath].rows for f in missing if f.relpath in done)
        if rows:
            self.workers[_UNREPORTED] = rows
            progress.advance(rows)


def _attempt(
    run: Run, spec: _Spec, plan: WorkerPlan, tally: _Tally, progress: RunProgress
) -> BaseException | None:
    """One Ray job over ``run.todo``: None when it finished, else Ray's own failure (a
    file's error, ours or the OS's, is raised as it was)."""
    import ray

    with translated("ray", "the Ray job failed"):
        rows = iter(_scored_files(run, spec, plan).iter_rows())
        try:
            for row in rows:
                if row["error"]:
                    raise _raised(row["error"], worker=row["worker"])
                tally.add(row, progress)
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


ENGINE = register(RayEngine())


def _scored_files(run: Run, spec: _Spec, plan: WorkerPlan) -> Any:
    """A dataset of the files to do, one per block, mapped by a pool of file workers."""
    import ray.data

    todo = ray.data.from_items(
        [{"fragment": f.index} for f in run.todo], override_num_blocks=len(run.todo)
    )
    return todo.map_batches(
        _FileWorker,
        fn_constructor_kwargs={"spec": spec},
        batch_size=1,
        batch_format="numpy",
        # One file at a time per actor: queued behind a busy actor, files would wait while
        # another starts, and Ray Data cancels (and fails the job for) an actor still
        # starting when every file is handed out.
        compute=ray.data.ActorPoolStrategy(
            size=min(plan.workers, len(run.todo)), max_tasks_in_flight_per_actor=1
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
    output, committer = next(iter(run.done.values())).output, run.committer
    for where in (committer.staging, committer.root):  # staged, or moved by a publish
        path = f"{where}/{output}"
        if committer.fs.exists(path):
            with committer.fs.open(path, "rb") as f:
                meta = pq.read_schema(f).metadata or {}
            return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"scoring.")}
    return {}


def _journaled(run: Run) -> list[Entry]:
    """The entries of this run's files, from the journal (the only proof of a file)."""
    done = run.committer.completed(run.todo)
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

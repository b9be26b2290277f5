"""``score_parquet(..., engine="ray")``: whole input files scored by Ray actors.

The driver plans the run as the local engine does (every check before writing), then
feeds the files still to do, one per task, to an actor pool.  Each actor runs the local
engine's pipeline on its file (reading, scoring and writing overlapped) into the shared
staging area, so the commit is the local engine's: a retried task or a restarted actor
rewrites the same staged file under a fresh temporary name, and the journal, not the
tasks' return values, decides what is published.  Data never passes through the object
store; actors read the files where they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..commit import Committer, Entry
from ..dataset import InputDataset
from ..engines.base import Run, output_metadata
from ..engines.local import run_local
from ..errors import ScoringError
from ..progress import RunProgress
from ..scorer import Scorer
from ._cluster import WorkerPlan, connect, plan_workers
from ._worker import load_bundle, worker_name

__all__ = ["RayOptions", "run_ray"]


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


class _FileWorker:
    """A Ray Data actor scoring whole input files into the run's staging area."""

    def __init__(self, spec: _Spec):
        model = load_bundle(
            spec.bundle, device=spec.device, backend=spec.backend, threads=spec.threads
        )
        data = spec.data
        scorer = Scorer(model, keep=spec.keep, outputs=spec.outputs, ignore=data.partition_columns)
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

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"fragment": [], "rows": [], "worker": [], "metadata": []}
        for index in batch["fragment"]:
            fragment = self.run.data.fragments[int(index)]
            run = replace(self.run, todo=[fragment])
            (entry,) = run_local(run, progress=RunProgress(fragment.rows, enabled=False))
            out["fragment"].append(int(index))
            out["rows"].append(entry.rows)
            out["worker"].append(self.name)
            out["metadata"].append(self.metadata)
        return out


def run_ray(
    run: Run,
    bundle_bytes: bytes,
    *,
    device: str,
    backend: str,
    options: RayOptions,
    progress: RunProgress,
) -> tuple[list[Entry], dict[str, int], dict[str, str]]:
    """Score ``run.todo`` on the cluster; returns the journal entries of every fragment,
    rows per worker and the output metadata the workers wrote."""
    import ray

    if not run.todo:  # every file journaled by an earlier run: only publication is left
        return [], {}, _written_metadata(run)
    connect(options.address)
    plan = plan_workers(
        ray.cluster_resources(),
        device=device,
        num_workers=options.num_workers,
        reserve_reads=False,  # actors read their own files; Ray runs no read tasks here
    )
    plan = replace(
        plan,
        num_cpus=options.num_cpus or plan.num_cpus,
        num_gpus=plan.num_gpus if options.num_gpus is None else options.num_gpus,
    )
    spec = _Spec(
        bundle=(ray.put(bundle_bytes),),
        data=run.data,
        output=run.committer.url,
        job=run.committer.job,
        keep=run.scorer.keep,
        outputs=str(run.committer.job["outputs"]),
        columns=run.columns,
        schema=run.schema,
        device=plan.device,
        backend=backend,
        threads=plan.threads,
    )
    workers: dict[str, int] = {}
    metadata: dict[str, str] = {}
    try:
        for row in _scored_files(run, spec, plan).iter_rows():
            workers[row["worker"]] = workers.get(row["worker"], 0) + int(row["rows"])
            metadata = metadata or json.loads(row["metadata"])
            progress.advance(int(row["rows"]))
    except ray.exceptions.RayError as exc:
        raise _unwrap(exc) from exc
    return _journaled(run), workers, metadata


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
        compute=ray.data.ActorPoolStrategy(size=min(plan.workers, len(run.todo))),
        num_cpus=plan.num_cpus,
        num_gpus=plan.num_gpus or None,
    )


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
        raise ScoringError(
            f"{len(missing)} input file(s) have no complete output after the Ray job "
            f"({missing[0]!r}, ...); rerun the same command to finish them"
        )
    return [done[f.relpath] for f in run.todo]


def _unwrap(exc: BaseException) -> BaseException:
    """Our own error from inside a worker, else Ray's."""
    seen = exc
    while seen is not None:
        if isinstance(seen, ScoringError):
            return seen
        seen = getattr(seen, "cause", None) or seen.__cause__  # type: ignore[assignment]
    return ScoringError(f"the Ray job failed: {str(exc).splitlines()[0]}")

"""The Ray cluster side of ``engine="ray"`` and ``scoring.ray``: joining a cluster,
sizing the actor pool from its resources, and what each actor does once (loading the
model).

Resources (:func:`plan_workers`): one actor per GPU with a fractional CPU request, or,
without GPUs, CPU actors sized so that Ray's read tasks always find a CPU, and never an
actor larger than the largest node.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._cache import compiled
from .._modelset import Scoring, load_payload
from ..errors import ConfigError, EngineError, debugging

__all__ = [
    "ACTOR_INIT_DEATHS",
    "ACTOR_START_S",
    "CPU_WORKER_THREADS",
    "DATASET_BATCH_ROWS",
    "GPU_WORKER_CPUS",
    "WorkerPlan",
    "check_fits",
    "connect",
    "load_bundle",
    "node_cpus",
    "patient",
    "plan_workers",
]

#: CPU threads a CPU-only actor gets: tree scoring scales well to about this many.
CPU_WORKER_THREADS = 4
#: Most of a CPU a GPU actor asks for; it mostly waits on the device and on I/O.
GPU_WORKER_CPUS = 1.0
#: Deaths of starting actors in a row that a Ray Data job survives (see :func:`patient`).
ACTOR_INIT_DEATHS = 4
#: Seconds a pool's actors get to start (import, load and compile the model) before its
#: job fails; the plan was checked to fit the nodes (:func:`check_fits`).
ACTOR_START_S = 300
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
        # Ray's own C++ log lines ("E ... core_worker.cc: ...") reach the user's terminal
        # from this process, and its daemons' ("(raylet) ... logging.cc") through the
        # driver's log forwarding.  A worker's failure reaches us as a record anyway;
        # --debug keeps both, and Ray's session logs (/tmp/ray/session_latest/logs) too.
        if not debugging():
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        try:
            ray.init(address=address, logging_level=logging.WARNING, include_dashboard=False,
                     log_to_driver=debugging())  # fmt: skip
        except ConnectionError as exc:
            raise EngineError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    # Our own progress and summary replace Ray Data's per-operator bars and its
    # execution log lines (and the notice that its bars are off).
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


def patient(context: Any) -> None:
    """Set a dataset's Ray Data ``context`` so that a pool of actors still starting is
    waited for.  Otherwise Ray Data hands every input to the first actor up, finds "all
    inputs consumed", drops the actors still starting, and counts each as a death during
    initialisation, which by default fails the job at the first (reproduced on a busy
    two-node cluster, 5 such deaths in 0.6 s)."""
    context.wait_for_min_actors_s = ACTOR_START_S
    if 0 <= context.max_consecutive_actor_init_deaths < ACTOR_INIT_DEATHS:
        context.max_consecutive_actor_init_deaths = ACTOR_INIT_DEATHS


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


def load_bundle(ref: tuple[Any], *, device: str, backend: str, strategy: str = "auto",
                threads: int) -> Scoring:  # fmt: skip
    """The model (or a set's) from the object store, checksum verified, compiled once per process.

    ``ref`` is a 1-tuple so that Ray hands the actor the reference, not the value: the
    bytes are fetched (and checked) here, once per actor, even after a restart.
    """
    import ray
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    bundle = load_payload(ray.get(ref[0]))  # raises IntegrityError on a bad payload
    return compiled(bundle, device=device, backend=backend, strategy=strategy)

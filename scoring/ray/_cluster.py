"""Joining or starting Ray, and sizing the actor pool to the cluster."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ScoringError

__all__ = ["WorkerPlan", "connect", "plan_workers"]

#: CPU threads a CPU-only actor gets: tree scoring scales well to about this many.
CPU_WORKER_THREADS = 4
#: Most of a CPU a GPU actor asks for; it mostly waits on the device and on I/O.
GPU_WORKER_CPUS = 1.0
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
        try:
            ray.init(address=address, logging_level=logging.WARNING, include_dashboard=False)
        except ConnectionError as exc:
            raise ScoringError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    # Our own progress and summary replace Ray Data's per-operator bars and its
    # execution log lines (and the notice that its bars are off).
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


def plan_workers(
    resources: Mapping[str, float],
    *,
    device: str = "auto",
    num_workers: int | None = None,
    reserve_reads: bool = True,
) -> WorkerPlan:
    """Size the actor pool from ``ray.cluster_resources()``.

    GPUs (device auto or cuda): one actor per GPU, ``num_gpus=1``, and at most
    ``GPU_WORKER_CPUS`` CPU each, never more than half the cluster's CPUs together.
    CPUs only: actors of ``CPU_WORKER_THREADS`` CPUs; with ``reserve_reads`` one CPU
    (half of a 2-CPU cluster) stays free for the read tasks, which an actor pool that
    claims every CPU starves forever.
    """
    cpus = float(resources.get("CPU", 0))
    gpus = float(resources.get("GPU", 0)) if device != "cpu" else 0.0
    if num_workers is not None and num_workers < 1:
        raise ScoringError(f"num_workers={num_workers}: expected at least 1")
    if device.startswith("cuda") and gpus == 0:
        raise ScoringError(
            f"device={device!r} but the Ray cluster has no GPUs; use device='auto' or 'cpu'"
        )
    if cpus <= 0:
        raise ScoringError("the Ray cluster reports no CPUs; cannot place scoring actors")
    if gpus > 0:
        workers = num_workers or int(gpus)
        per_cpu = min(GPU_WORKER_CPUS, cpus / (2 * workers))
        return WorkerPlan(workers, per_cpu, min(1.0, gpus / workers), "cuda")
    usable = max(cpus - 1, cpus / 2) if reserve_reads else cpus
    workers = num_workers or max(1, int(usable // CPU_WORKER_THREADS))
    return WorkerPlan(workers, usable / workers, 0.0, "cpu")

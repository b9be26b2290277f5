"""Which device a cluster worker scores on, and the name it reports its rows under.

Ray and Spark hand each worker its GPUs: Ray an actor's ``ray.get_gpu_ids()`` (with
``CUDA_VISIBLE_DEVICES`` set to them, so the actor's ``cuda`` is its GPU), Spark a
task's ``resources()["gpu"]`` addresses.  A worker's name carries them, so a run's
summary and report show which GPU scored which rows.

``SCORING_GPU_PLACEMENT_ONLY=1``, set where the run is planned (the driver), keeps that
placement but scores on CPU.  It is for clusters whose GPUs are logical (``ray start
--num-gpus``, a Spark discovery script that names addresses), to rehearse a GPU
deployment on machines without one; the run's device then says ``cpu``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

__all__ = [
    "PLACEMENT_ONLY", "measured_on", "placement_only", "scoring_device", "worker_label",
]  # fmt: skip

PLACEMENT_ONLY = "SCORING_GPU_PLACEMENT_ONLY"


def placement_only() -> bool:
    """Whether this process (a run's driver) was told to place workers on GPUs only."""
    return os.environ.get(PLACEMENT_ONLY, "") not in ("", "0")


def measured_on(device: str) -> str:
    """The device a cluster job's driver times the model on, for its plan: the job's,
    unless its workers score on CPU (placement only) or this process has no CUDA device
    (a CPU driver of GPU workers, as in a Ray head pod): then the CPU, whose pace
    understates a GPU's, so the plan errs on the safe side."""
    import torch

    if device == "cpu" or placement_only() or not torch.cuda.is_available():
        return "cpu"
    return device


def scoring_device(requested: str, gpus: Sequence[str], *, placement: bool = False) -> str:
    """The device a worker given ``gpus`` (its cluster's addresses) compiles for.

    ``cpu`` stays on CPU; ``auto`` and ``cuda`` take the worker's first GPU, as an index
    among ``CUDA_VISIBLE_DEVICES`` when that lists it (Ray sets it to the actor's GPUs;
    a Spark executor may see several); ``auto`` without a GPU is the CPU.  ``placement``:
    the GPUs place the worker, the CPU scores."""
    if placement or requested == "cpu":
        return "cpu"
    if requested not in ("auto", "cuda"):
        return requested  # an explicit cuda:N
    if not gpus:
        return "cpu" if requested == "auto" else requested
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    address = str(gpus[0])
    return f"cuda:{visible.index(address) if address in visible else int(address)}"


def worker_label(gpus: Sequence[str], *, process: bool = True) -> str:
    """``host:pid``, or ``host`` when the process is not the worker (a Spark task's
    Python worker), followed by `` gpu 0,1`` when the cluster gave it GPUs."""
    where = f"{socket.gethostname()}:{os.getpid()}" if process else socket.gethostname()
    return f"{where} gpu {','.join(str(g) for g in gpus)}" if gpus else where

"""``[autoscale]`` on Ray: worker bundles asked of the cluster's autoscaler
(``ray.autoscaler.sdk.request_resources``), counted as nodes join, held and released.

A request is not additive: each replaces the last, whoever sends it, and once a Ray
Data job has run on a cluster, Ray Data's own coordinator sends its request every 20 s
(its current use), replacing ours.  So the request is re-sent every
:data:`RENEW_SECONDS` for as long as the workers are wanted (:mod:`scoring.jobs._scaling`
holds it), and withdrawn (an empty request) at the end.  A worker's shape is the job's
``[resources]``, else one GPU and :data:`~scoring._engines.ray_cluster.GPU_WORKER_CPUS`
CPU (device ``cuda``, or ``auto`` on a cluster that has GPUs now), else
:data:`~scoring._engines.ray_cluster.CPU_WORKER_THREADS` CPUs.
"""

from __future__ import annotations

from typing import Any

from .ray_cluster import CPU_WORKER_THREADS, GPU_WORKER_CPUS, connect
from .scaling import bundles_that_fit

__all__ = ["RENEW_SECONDS", "RayAutoscaler"]

#: Seconds between re-sending a held request: well inside Ray Data's 20 s.
RENEW_SECONDS = 5.0


class RayAutoscaler:
    """Worker bundles requested of the Ray cluster at ``options.address`` (the engine's
    :class:`~scoring._engines.ray.RayOptions`)."""

    observes = True
    renew_seconds: float | None = RENEW_SECONDS

    def __init__(self, options: Any, *, device: str):
        import ray

        connect(options.address)
        self.given = options
        gpus = device.startswith("cuda") or (
            device == "auto" and float(ray.cluster_resources().get("GPU", 0)) > 0
        )
        self.shape: dict[str, float] = (
            {"CPU": options.num_cpus or GPU_WORKER_CPUS, "GPU": options.num_gpus or 1.0}
            if gpus
            else {"CPU": options.num_cpus or float(CPU_WORKER_THREADS)}
        )

    def request(self, workers: int) -> None:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[dict(self.shape) for _ in range(workers)])

    def granted(self) -> int:
        import ray

        nodes = [
            {k: float(v) for k, v in n["Resources"].items()} for n in ray.nodes() if n["Alive"]
        ]
        return bundles_that_fit(nodes, self.shape)

    def options(self, workers: int) -> Any:
        return self.given.model_copy(update={
            "num_workers": workers, "num_cpus": self.shape["CPU"],
            "num_gpus": self.shape.get("GPU"),
        })  # fmt: skip

    def release(self) -> None:
        import ray
        from ray.autoscaler.sdk import request_resources

        if ray.is_initialized():
            request_resources(bundles=[])

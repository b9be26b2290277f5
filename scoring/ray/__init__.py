"""Ray Data: score a ``ray.data.Dataset``, or run a Parquet job across Ray workers.

``score_dataset(ds, model)`` adds the output columns to any dataset (lazy; a callable
class in ``map_batches``, so each actor loads the model once).  ``score_parquet(...,
engine="ray")`` runs a whole job (:mod:`scoring._engines.ray`): each actor reads, scores
and writes whole input files through the local engine's pipeline and commit, so the
output, manifest, ``_SUCCESS`` and resume are the local engine's.  Workers get the model
as a bundle through the object store and verify its checksum before compiling it.

Resources (see :func:`plan_workers`): one actor per GPU with a fractional CPU request,
or, without GPUs, CPU actors sized so that Ray's read tasks always find a CPU.
"""

from __future__ import annotations

from .._engines.ray_cluster import WorkerPlan, connect, plan_workers
from ._dataset import score_dataset

__all__ = ["WorkerPlan", "connect", "plan_workers", "score_dataset"]

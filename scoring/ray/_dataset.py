"""``score_dataset``: the output columns added to any Ray dataset, lazily."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._engines.base import resolve_model
from .._engines.ray_cluster import (
    DATASET_BATCH_ROWS,
    connect,
    load_bundle,
    node_cpus,
    plan_workers,
)
from .._explanations import output_spec
from .._modelset import scorer_for

if TYPE_CHECKING:
    import ray.data

__all__ = ["score_dataset"]


class _BatchScorer:
    """A Ray Data actor: compiles the model once, then scores Arrow batches."""

    def __init__(
        self,
        *,
        bundle: tuple[Any],
        keep: Sequence[str],
        outputs: str,
        device: str,
        backend: str,
        threads: int,
    ):
        model = load_bundle(bundle, device=device, backend=backend, threads=threads)
        self.scorer = scorer_for(model, keep=keep, outputs=outputs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.scorer.score(batch)


def score_dataset(
    ds: ray.data.Dataset,
    model: Any,
    *,
    keep: Sequence[str] = (),
    outputs: str | Sequence[str] = "default",
    device: str = "auto",
    backend: str = "auto",
    num_workers: int | None = None,
    batch_rows: int | None = None,
    registry: Any = None,
) -> ray.data.Dataset:
    """``ds`` scored by ``model`` (lazy): the kept columns, then the output columns.

    ``model`` is a registry reference (``name@alias``), a :class:`~scoring.Bundle`, a
    model file or a fitted model, or a list of them scored in one pass (as
    ``score_parquet`` takes it); workers get it as a bundle through the object store.
    Columns are matched as in :class:`~scoring._scorer.Scorer`; a missing feature column
    fails the first batch with an error naming it.
    """
    import ray
    import ray.data

    connect()
    bundle = resolve_model(model, registry=registry, local=False).shipped()
    plan = plan_workers(
        ray.cluster_resources(),
        device=device,
        num_workers=num_workers,
        reserve_reads=True,
        node_cpus=node_cpus(),
    )
    return ds.map_batches(
        _BatchScorer,
        fn_constructor_kwargs={
            "bundle": (ray.put(bundle.to_bytes()),),
            "keep": list(keep),
            "outputs": output_spec(outputs),  # refused here, not in the first batch
            "device": plan.device,
            "backend": backend,
            "threads": plan.threads,
        },
        batch_format="pyarrow",
        batch_size=batch_rows or DATASET_BATCH_ROWS,
        zero_copy_batch=True,
        compute=ray.data.ActorPoolStrategy(size=plan.workers),
        num_cpus=plan.num_cpus,
        num_gpus=plan.num_gpus or None,
    )

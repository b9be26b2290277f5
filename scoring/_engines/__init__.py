"""``scoring.score_parquet``: score a Parquet dataset with a model, on an engine.

Engines implement :class:`~scoring._engines.base.Engine` and register themselves in
:data:`ENGINES`; adding one is one module (``ENGINE = register(...)``) plus its name on
the import line below.  They share the model
resolved once, the checks before writing, the Scorer, the output layout, the commit and
the report (:mod:`scoring._engines.base`).  Engine options (``engine_options``):

``ray``
    ``address`` (a running cluster; default: the current session, else a new local
    one), ``num_workers`` (default: one per GPU, or CPUs / 4), and ``num_cpus`` and
    ``num_gpus`` per actor (default: see :func:`scoring._engines.ray_cluster.plan_workers`).
``spark``
    ``master`` (default: the active session, else ``local[*]``) and ``conf`` (settings
    for a session the job starts).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._changes import Incremental
from .._explanations import output_spec
from .._formats.dataset import InputDataset, filtered, open_input
from .._formats.iceberg_catalog import storage_url
from .._journal.lease import OutputLease
from .._progress import RunProgress
from .._registry import ModelStore, root_url
from .._specs import Input, Output, RunOptions, specs_of
from .._stores import configured, store_config
from ..errors import ConfigError
from . import local, ray, spark  # noqa: F401  (the registration line)
from .base import (
    ENGINES,
    Engine,
    ModelSource,
    PlanRequest,
    ScoreReport,
    check_outside_process,
    options_for,
    plan_run,
    publish,
    report,
    resolve_model,
    unused_staging_cleared,
)
from .plan import ScoreSpec
from .target import output_failures

__all__ = ["ENGINES", "Engine", "ModelSource", "ScoreReport", "engine_named",
           "options_for", "resolve_model", "score_parquet"]  # fmt: skip


def engine_named(name: str) -> Engine:
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")
    return ENGINES[name]


def score_parquet(
    input: str | os.PathLike[str] | Input | InputDataset,
    output: str | os.PathLike[str] | Output,
    model: Any,
    *,
    engine: str = "local",
    keep: Sequence[str] = (),
    outputs: str | Sequence[str] = "default",
    device: str = "auto",
    backend: str = "auto",
    strategy: str = "auto",
    registry: str | os.PathLike[str] | ModelStore | None = None,
    progress: bool = True,
    engine_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    run: RunOptions | None = None,
    **deprecated: Any,
) -> ScoreReport:
    """Score every row of ``input`` into ``output``; see docs/batch.md.

    ``input``: a location, or a :class:`~scoring.Input` pinning a Delta table's version
    (``Input("delta:s3://t", version=12)``; by default its latest is read and recorded),
    or scoring only what changed since the output's last run
    (``Input("delta:s3://t", incremental=True)``, with ``Output(..., key=["id"])`` where
    rows are updated or deleted).
    ``output``: a location (``delta:URL`` for a Delta table), or a
    :class:`~scoring.Output` naming its format, mode and partition columns
    (``Output("delta:s3://t", mode="append")``).  ``run``: a
    :class:`~scoring.RunOptions` (verify a rerun's files, a drift monitor, progress and
    before-publish callbacks).  The loose ``overwrite``, ``output_format``, ``mode``,
    ``partition_by``, ``input_version``, ``verify``, ``monitor``, ``on_progress`` and
    ``before_publish`` of earlier versions still work and warn (``DeprecationWarning``).

    ``backend`` and ``strategy`` as :func:`scoring.compile` takes them: a strategy named
    is what runs on every worker (it implies the tensor backend).

    ``model``: one model, or a list of them scored in one pass over the input, each
    item a model or ``{"model": ..., "prefix": ..., "where": ...}`` (columns
    ``<prefix>__<column>``; see :mod:`scoring._modelset`).

    ``input`` may be an already opened :class:`~scoring._formats.dataset.InputDataset` and
    ``model`` an already resolved :class:`~scoring._engines.base.ModelSource` (a job's
    planner made both), so nothing is listed, read or compiled twice.

    ``storage_options``: fsspec options for the object stores of the input, output and
    registry (endpoint, profile, credentials; see :mod:`scoring._stores`).
    """
    source_spec, target, watch = specs_of(input, output, run, deprecated)
    runner = engine_named(engine)
    options = options_for(runner, engine_options or {})
    output = target.url
    source_url = source_spec.url
    if not runner.local:
        check_outside_process(engine, source_url, str(output))
    registry_url = [] if isinstance(registry, ModelStore) else [root_url(registry)]
    located = storage_url(str(output))  # an Iceberg table's files: its location
    stores = store_config(storage_options, [storage_url(source_url), located, *registry_url])
    with configured(stores), output_failures(str(output)):
        source = resolve_model(model, registry=registry, device=device, backend=backend,
                               strategy=strategy, local=runner.local)  # fmt: skip
        data = (
            source_spec.location
            if isinstance(source_spec.location, InputDataset)
            else open_input(source_url, version=source_spec.version, empty=source_spec.incremental)
        )
        if source_spec.filter is not None:
            data = filtered(data, source_spec.filter, incremental=source_spec.incremental)
        incremental = (
            Incremental(key=tuple(target.key), on_changed=source_spec.on_changed)
            if source_spec.incremental
            else None
        )
        lease = OutputLease(str(output), location=located)
        try:
            score = ScoreSpec(
                keep=tuple(keep),
                outputs=output_spec(outputs),
                device=device,
                backend=backend,
                strategy=strategy,
                monitor=watch.monitor,
            )
            request = PlanRequest(
                data,
                target,
                source.compiled,
                score,
                runner,
                verify=watch.verify,
                incremental=incremental,
                settings={"engine_options": dict(engine_options or {})},
            )
            planned = plan_run(request, lease=lease, stores=stores)
            if planned.complete:
                return report(planned, engine=engine, timeline=[], label=source.label)
            tracker = RunProgress(sum(f.rows for f in planned.todo), enabled=progress)
            if watch.on_progress is not None:
                tracker.listeners.append(watch.on_progress)
            with tracker, unused_staging_cleared(planned.publisher):
                scored = runner.run(planned, source=source, options=options, progress=tracker)
            lease.check()
            if watch.before_publish is not None:
                watch.before_publish(report(planned, engine=engine, timeline=tracker.timeline,
                                            scored=scored, label=source.label))  # fmt: skip
            committing = time.perf_counter()
            files = publish(planned, scored, engine=runner)
            committed = time.perf_counter() - committing
        finally:
            lease.release()
    result = report(
        planned, engine=engine, timeline=tracker.timeline, scored=scored, label=source.label
    )
    result.files = files
    result.stages["commit"] = committed
    return result

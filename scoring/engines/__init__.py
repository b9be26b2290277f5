"""``scoring.score_parquet``: score a Parquet dataset with a model, on an engine.

Engines share the checks before writing, the Scorer, the output layout and the commit
(see :mod:`scoring.commit`); ``local`` is the embedded default, ``ray`` spreads the files
over Ray actors (:mod:`scoring.ray`).  Engine options (``engine_options``):

``ray``
    ``address`` (a running cluster; default: the current session, else a new local
    one), ``num_workers`` (default: one per GPU, or CPUs / 4), and ``num_cpus`` and
    ``num_gpus`` per actor (default: see :func:`scoring.ray.plan_workers`).
``spark``
    ``master`` (default: the active session, else ``local[*]``) and ``conf`` (settings
    for a session the job starts).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..commit import Entry
from ..dataset import InputDataset
from ..errors import ScoringError
from ..model import CompiledModel, compile_model
from ..progress import RunProgress
from ..registry import Bundle, Registry
from .base import Run, ScoreReport, output_metadata, plan_run, report
from .local import run_local

__all__ = ["ENGINES", "ScoreReport", "resolve_bundle", "resolve_model", "score_parquet"]

ENGINES = ("local", "ray", "spark")
ENGINE_OPTIONS: dict[str, tuple[str, ...]] = {
    "local": (),
    "ray": ("address", "num_workers", "num_cpus", "num_gpus"),
    "spark": ("master", "conf"),
}


def resolve_model(
    model: Any,
    *,
    registry: str | Registry | None = None,
    device: str = "auto",
    backend: str = "auto",
) -> CompiledModel:
    """A compiled model from a registry reference (``name@alias``), a Bundle, a model
    file, a fitted model or an already compiled model."""
    if isinstance(model, CompiledModel):
        return model
    if isinstance(model, Bundle):
        return model.compile(device=device, backend=backend)
    if isinstance(model, str) and not os.path.exists(model):
        reg = registry if isinstance(registry, Registry) else Registry(registry)
        return reg.load(model, device=device, backend=backend)
    return compile_model(model, backend=backend, device=device)


def resolve_bundle(model: Any, *, registry: str | Registry | None = None) -> Bundle:
    """What workers receive: the registry's bundle for a reference, else the model (a
    file or a fitted object) bundled as an unregistered version 0."""
    if isinstance(model, Bundle):
        return model
    if isinstance(model, CompiledModel):
        raise ScoringError(
            "a compiled model cannot be shipped to workers; pass the registry reference, "
            "a Bundle, the model file or the fitted model"
        )
    if isinstance(model, str) and not os.path.exists(model):
        reg = registry if isinstance(registry, Registry) else Registry(registry)
        return reg.bundle(model)
    return Bundle.of(model)


def score_parquet(
    input: str | os.PathLike[str] | InputDataset,
    output: str | os.PathLike[str],
    model: Any,
    *,
    engine: str = "local",
    keep: Sequence[str] = (),
    outputs: str = "default",
    device: str = "auto",
    backend: str = "auto",
    registry: str | Registry | None = None,
    overwrite: bool = False,
    progress: bool = True,
    engine_options: Mapping[str, Any] | None = None,
    on_progress: Callable[[float, int], None] | None = None,
) -> ScoreReport:
    """Score every row of ``input`` into ``output``; see README "Batch scoring".

    ``input`` may be an already opened :class:`~scoring.dataset.InputDataset` (a job's
    planner read its footers), so the files are not listed and read twice.

    ``on_progress(seconds, rows)`` is called as rows are written (job deadlines).
    """
    listeners = [on_progress] if on_progress is not None else []
    source = input if isinstance(input, InputDataset) else str(input)
    options = _engine_options(engine, engine_options or {})
    if engine == "local":
        compiled = resolve_model(model, registry=registry, device=device, backend=backend)
        run = plan_run(
            source, str(output), compiled, keep=keep, outputs=outputs, overwrite=overwrite
        )
        return _execute(run, engine, progress=progress, listeners=listeners,
                        score=lambda t: _local(run, t))  # fmt: skip
    _check_shared(engine, source.url if isinstance(source, InputDataset) else source, str(output))
    bundle = resolve_bundle(model, registry=registry)
    # The driver only checks and plans (it may have no GPU): the native predictor
    # produces the same columns the workers will, without compiling anything.
    checker = bundle.compile(backend="native")
    parts = ("part-",) if engine == "spark" else ()
    run = plan_run(source, str(output), checker, keep=keep, outputs=outputs,
                   overwrite=overwrite, engine_files=parts)  # fmt: skip
    if engine == "spark":
        return _spark(run, bundle, device=device, backend=backend, options=options,
                      progress=progress, listeners=listeners)  # fmt: skip

    def distributed(tracker: RunProgress) -> tuple[list[Entry], dict[str, int], dict[str, str]]:
        from ..ray._engine import RayOptions, run_ray

        return run_ray(
            run,
            bundle.to_bytes(),
            device=device,
            backend=backend,
            options=RayOptions(**options),
            progress=tracker,
        )

    return _execute(run, engine, progress=progress, listeners=listeners, score=distributed)


def _spark(
    run: Run,
    bundle: Bundle,
    *,
    device: str,
    backend: str,
    options: dict[str, Any],
    progress: bool,
    listeners: list[Callable[[float, int], None]],
) -> ScoreReport:
    from ..spark._engine import PART_PREFIX, SparkOptions, run_spark

    if run.complete:
        return report(run, engine="spark", timeline=[])
    tracker = RunProgress(run.data.rows, enabled=progress)
    tracker.listeners.extend(listeners)
    try:
        run_spark(run, bundle, device=device, backend=backend, options=SparkOptions(**options),
                  progress=tracker)  # fmt: skip
    finally:
        tracker.close()
    # Executors choose their own device and backend; record what was asked for.
    metadata = {**output_metadata(run.model), "scoring.backend": backend,
                "scoring.strategy": "", "scoring.device": device}  # fmt: skip
    manifest = run.committer.publish_files(
        run.data.fragments, prefix=PART_PREFIX, extra={"metadata": metadata}
    )
    result = report(run, engine="spark", timeline=tracker.timeline)
    result.backend, result.device, result.strategy = backend, device, None
    result.files = len(manifest["files"])
    return result


def _check_shared(engine: str, *urls: str) -> None:
    """Workers are other processes: they cannot see this process's memory filesystem."""
    for url in urls:
        if url.startswith("memory://"):
            raise ScoringError(
                f"engine {engine!r} needs storage every worker can reach; {url!r} exists "
                "only in this process (use a shared filesystem or object store)"
            )


def _engine_options(engine: str, options: Mapping[str, Any]) -> dict[str, Any]:
    if engine not in ENGINES:
        raise ScoringError(f"unknown engine {engine!r}: expected one of {', '.join(ENGINES)}")
    unknown = sorted(set(options) - set(ENGINE_OPTIONS[engine]))
    if unknown:
        allowed = ", ".join(ENGINE_OPTIONS[engine]) or "none"
        raise ScoringError(f"engine {engine!r} has no option {unknown[0]!r} (options: {allowed})")
    return dict(options)


_Scored = tuple[list[Entry], dict[str, int], dict[str, str]]


def _local(run: Run, tracker: RunProgress) -> _Scored:
    entries = run_local(run, progress=tracker)
    return entries, {"local": tracker.rows}, output_metadata(run.model)


def _execute(
    run: Run,
    engine: str,
    *,
    progress: bool,
    listeners: list[Callable[[float, int], None]],
    score: Callable[[RunProgress], _Scored],
) -> ScoreReport:
    if run.complete:
        return report(run, engine=engine, timeline=[])
    tracker = RunProgress(sum(f.rows for f in run.todo), enabled=progress)
    tracker.listeners.extend(listeners)
    try:
        entries, workers, metadata = score(tracker)
    finally:
        tracker.close()
    run.committer.publish([*run.done.values(), *entries], extra={"metadata": metadata})
    result = report(run, engine=engine, timeline=tracker.timeline)
    result.workers = workers
    if metadata:  # what the workers actually ran, not the driver's checking model
        result.backend = metadata["scoring.backend"]
        result.strategy = metadata["scoring.strategy"] or None
        result.device = metadata["scoring.device"]
    return result

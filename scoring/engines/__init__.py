"""``scoring.score_parquet``: score a Parquet dataset with a model, on an engine.

Engines share the Scorer, the output layout and the commit (see :mod:`scoring.commit`);
``local`` is the embedded default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..errors import ScoringError
from ..model import CompiledModel, compile_model
from ..progress import RunProgress
from ..registry import Bundle, Registry
from .base import Run, ScoreReport, output_metadata, plan_run, report
from .local import run_local

__all__ = ["ENGINES", "ScoreReport", "resolve_model", "score_parquet"]

ENGINES = ("local",)


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


def score_parquet(
    input: str | os.PathLike[str],
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
) -> ScoreReport:
    """Score every row of ``input`` into ``output``; see README "Batch scoring"."""
    if engine not in ENGINES:
        raise ScoringError(f"unknown engine {engine!r}: expected one of {', '.join(ENGINES)}")
    compiled = resolve_model(model, registry=registry, device=device, backend=backend)
    run = plan_run(
        str(input), str(output), compiled, keep=keep, outputs=outputs, overwrite=overwrite
    )
    return _execute(run, progress=progress)


def _execute(run: Run, *, progress: bool) -> ScoreReport:
    if run.complete:
        return report(run, engine="local", timeline=[])
    tracker = RunProgress(sum(f.rows for f in run.todo), enabled=progress)
    try:
        entries = run_local(run, progress=tracker)
    finally:
        tracker.close()
    run.committer.publish(
        [*run.done.values(), *entries], extra={"metadata": output_metadata(run.model)}
    )
    return report(run, engine="local", timeline=tracker.timeline)

"""``scoring deploy render``: Kubernetes manifests for a job file (:mod:`scoring._deploy`)."""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import messages, reported

__all__ = ["deploy_app"]

deploy_app = typer.Typer(no_args_is_help=True, help="Manifests that run a job on Kubernetes.")


@deploy_app.command()
def render(
    job: Path = typer.Argument(..., help="the job file (jobs/*.toml)"),
    out: Path = typer.Option(..., "--out", help="folder to write the overlay into"),
    schedule: str | None = typer.Option(
        None, help="the CronJob's schedule, e.g. '30 0 * * *' (a Ray job's RayJob has none)"
    ),
    timezone: str | None = typer.Option(
        None, help="the schedule's time zone (default: the job file's timezone, else UTC)"
    ),
    gpu: bool = typer.Option(False, help="on a GPU node pool, in the CUDA image"),
    base: Path = typer.Option(
        Path("deploy/kubernetes"), help="the repository's deploy/kubernetes (base, components)"
    ),
) -> None:
    """Write a kustomize overlay running JOB (`kubectl kustomize OUT` renders it,
    `kubectl apply -k OUT` applies it); prints the resources' name."""
    with reported("deploy render"):
        from .._deploy import render as write

        done = write(job, out=out, base=base, schedule=schedule, timezone=timezone, gpu=gpu)
    limit = done.active_deadline_seconds
    messages.print(f"wrote {out}/ (kustomization.yaml, job.toml): {done.name}"
                   + (f", activeDeadlineSeconds {limit}" if limit else ""))  # fmt: skip
    print(done.name)

"""``scoring runs [JOB]``: the history of job runs kept in the registry database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ._common import (
    STORAGE_OPTION,
    key_values,
    messages,
    reported,
    tables,
)

if TYPE_CHECKING:
    from .._registry import ModelStore

__all__ = ["runs"]

# Without their environment variables, so that a job file's own registry is not overridden
# by SCORING_HOME: the store falls back on those when neither names one.
_REGISTRY = typer.Option(
    None, "--registry", help="registry root (default: the job file's, else $SCORING_HOME, "
    "else the user's data directory, ~/.local/share/scoring on Linux)",
)  # fmt: skip
_REGISTRY_DB = typer.Option(
    None, "--registry-db", help="registry database URL (default: the job file's "
    "registry_db, else $SCORING_REGISTRY_DB, else SQLite in a local root)",
)  # fmt: skip


def runs(
    job: str | None = typer.Argument(
        None,
        help="a job's name, or its job file (whose registry holds its runs); "
        "default: every job in the registry",
    ),
    limit: int = typer.Option(30, min=1, help="the latest runs to list"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document, not a table"),
    registry: str | None = _REGISTRY,
    registry_db: str | None = _REGISTRY_DB,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Every recorded run (ok, late, failed, refused), oldest first; with JOB, the trend
    of its durations against its window.  A job file's runs are read from its own
    registry, where scoring run recorded them."""
    from .._registry import describe_trend, trend

    with reported("runs"):
        store, job = _history(job, registry, registry_db, storage_option)
        found = store.runs.list(job, limit=limit)
    if not found and not as_json:
        messages.print(_none_yet(store.uri, job))
        return
    window = found[-1].window_seconds if found else None
    projection = trend(found, window_seconds=window) if job else None
    if as_json:
        runs_json = [r.model_dump(mode="json") for r in found]
        print(json.dumps({"runs": runs_json, "trend": projection}, indent=1))
        return
    table = Table(title=f"runs in {store.uri}" + (f" of job {job!r}" if job else ""))
    for col in ("started (UTC)", "job", "outcome", "exit", "rows", "seconds", "window (s)",
                "engine", "device", "model"):  # fmt: skip
        table.add_column(
            col, justify="right" if col in ("rows", "seconds", "window (s)") else "left"
        )
    for r in found:
        table.add_row(
            r.started_at.strftime("%Y-%m-%d %H:%M:%S"), r.job, r.outcome, str(r.exit_code),
            f"{r.rows:,}", f"{r.seconds:,.1f}",
            f"{r.window_seconds:,.0f}" if r.window_seconds else "-",
            r.engine, r.device or "-", ", ".join(m.get("version", m["ref"]) for m in r.models),
        )  # fmt: skip
    console = tables()
    console.print(table)
    if projection is not None:
        console.print(describe_trend(projection), highlight=False)


def _history(job: str | None, registry: str | None, registry_db: str | None,
             storage: list[str]) -> tuple[ModelStore, str | None]:  # fmt: skip
    """The registry holding the runs, and the job's name (None: every job).  A job file
    names both (the options given override its registry, as for ``scoring run``); a
    name, or nothing, reads the registry the options name."""
    from .._registry import ModelStore

    if job is not None and job.endswith(".toml"):
        from ._jobs import load_job_options

        spec = load_job_options(Path(job), "runs", registry, registry_db, storage)
        store = ModelStore(spec.registry, db_url=spec.registry_db,
                           storage_options=spec.storage_options)  # fmt: skip
        return store, spec.name
    stores = key_values(storage, command="runs", option="--storage-option")
    return ModelStore(registry, db_url=registry_db, storage_options=stores), job


def _none_yet(uri: str, job: str | None) -> str:
    """What an empty history means, and where else to look."""
    whose = f"of job {job!r} " if job else ""
    return (
        f"no runs {whose}recorded in {uri}: `scoring run JOB_FILE` records each run in its "
        "job's registry; list them with `scoring runs JOB_FILE` (or --registry and "
        "--registry-db as the job file sets them)"
    )

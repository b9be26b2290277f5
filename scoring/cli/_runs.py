"""``scoring runs [JOB]``: the history of job runs kept in the registry database."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from ._common import (
    REGISTRY_DB_OPTION,
    REGISTRY_OPTION,
    STORAGE_OPTION,
    key_values,
    reported,
    tables,
)

__all__ = ["runs"]


def runs(
    job: str | None = typer.Argument(None, help="a job's name (default: every job)"),
    limit: int = typer.Option(30, min=1, help="the latest runs to list"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document, not a table"),
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Every recorded run (ok, late, failed, refused), oldest first; with JOB, the trend
    of its durations against its window."""
    from .._registry import ModelStore, describe_trend, trend

    stores = key_values(storage_option, command="runs", option="--storage-option")
    with reported("runs"):
        store = ModelStore(registry, db_url=registry_db, storage_options=stores)
        found = store.runs.list(job, limit=limit)
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

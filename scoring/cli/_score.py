"""``scoring score``: score a Parquet dataset with a registered model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from .._formats import DEFAULT_FORMAT, FORMATS
from ._common import (
    MLFLOW_URI_OPTION,
    REGISTRY_DB_OPTION,
    REGISTRY_OPTION,
    STORAGE_OPTION,
    VERIFY_HELP,
    RowsWritten,
    fail,
    key_values,
    messages,
    reported,
    use_mlflow,
)

__all__ = ["score"]


def _columns(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def _outputs(outputs: str, reasons: int, by: str) -> str:
    """``--outputs`` with ``--reasons K`` (ranked ``--reasons-by``) folded in."""
    return outputs if not reasons else f"{outputs}+reasons={reasons}/{by}"


_PREFIXED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)=(.+)$")


def _models(given: list[str], filters: list[str]) -> str | list[dict[str, str]]:
    """One ``--model``: its reference; several (or any ``--where``): a list of entries,
    ``PREFIX=REF`` naming a prefix and ``--where PREFIX=CONDITION`` a row filter."""
    wheres = key_values(filters, command="score", option="--where", typed=False)
    if len(wheres) < len(filters):
        raise fail("score", "--where names a prefix twice: join its conditions with AND", code=2)
    if len(given) == 1 and not _PREFIXED.match(given[0]) and not wheres:
        return given[0]
    entries = []
    for value in given:
        named = _PREFIXED.match(value)
        entry = {"model": named.group(2), "prefix": named.group(1)} if named else {"model": value}
        condition = wheres.pop(entry.get("prefix") or _default_prefix(value), None)
        entries.append({**entry, "where": condition.strip()} if condition else entry)
    if wheres:
        prefix = next(iter(wheres))
        raise fail("score", f"--where {prefix}=...: no --model has the prefix {prefix!r}; "
                   f"name one with --model {prefix}=REF", code=2)  # fmt: skip
    return entries


def _default_prefix(ref: str) -> str:
    """The prefix a model gets unless named: its registered name (``churn@production``:
    churn), an MLflow model's (``models:/churn@champion``: churn), or a model file's stem
    (``models/churn.json``: churn)."""
    from .._frameworks import is_mlflow_ref, mlflow_name
    from .._registry import parse_ref

    if is_mlflow_ref(ref):
        return mlflow_name(ref)
    return Path(ref).stem if Path(ref).exists() else parse_ref(ref)[0]


def score(
    model: list[str] = typer.Option(
        ...,
        "--model",
        help="NAME@ALIAS, NAME@VERSION, a model file or an MLflow model (models:/NAME@ALIAS); "
        "repeat it to score several models in one pass (PREFIX=REF names a model's column "
        "prefix, default its name)",
    ),
    where: list[str] = typer.Option(
        [],
        "--where",
        help="PREFIX=CONDITION: that model scores only the rows where the SQL condition on "
        "input columns holds, e.g. --where \"churn=region = 'EU'\" (repeatable)",
    ),
    input: str = typer.Option(
        ...,
        "--input",
        help="Parquet file, directory, glob or URL, a Delta table, or an Iceberg table "
        "(iceberg:CATALOG.NAMESPACE.TABLE)",
    ),
    output: str = typer.Option(
        ..., "--output", help="output directory or URL, delta:URL, or iceberg:CATALOG.NS.TABLE"
    ),
    keep: str = typer.Option("", help="input columns to copy to the output: col,col"),
    outputs: str = typer.Option(
        "default",
        help="default, raw (default + margins) or all; +contributions adds each feature's "
        "contribution (e.g. default+contributions)",
    ),
    reasons: int = typer.Option(0, min=0, help="write the K features that moved each score most"),
    reasons_by: str = typer.Option("absolute", help="rank reasons by absolute or signed value"),
    engine: str = typer.Option("local", help="local, ray or spark"),
    option: list[str] = typer.Option(
        [], "--engine-option", help="KEY=VALUE, an engine option (repeatable)"
    ),
    ray_address: str | None = typer.Option(
        None, help="engine ray: a running cluster (host:port or auto); default: start one"
    ),
    workers: int | None = typer.Option(
        None, min=1, help="engine ray: scoring actors (default: one per GPU, else CPUs/4)"
    ),
    spark_master: str | None = typer.Option(
        None, help="engine spark: master URL; default: the active session, else local[*]"
    ),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N"),
    backend: str = typer.Option("auto", help="auto, tensor, native or hummingbird"),
    strategy: str = typer.Option(
        "auto",
        help="the tensor backend's: auto (fused on CPU), fused, compiled, gemm, "
        "tree_traversal, perfect_tree_traversal or triton; a strategy named runs as named",
    ),
    overwrite: bool = typer.Option(False, help="replace a completed run of another job"),
    output_format: str = typer.Option(
        DEFAULT_FORMAT,
        "--format",
        help=f"{', '.join(FORMATS)}: the output a folder, a Delta table or an Iceberg table",
    ),
    mode: str | None = typer.Option(
        None,
        help="a Delta or Iceberg output that exists: error (default), append, overwrite, or "
        "overwrite_partitions (only the partitions this run writes)",
    ),
    partition_by: str | None = typer.Option(
        None,
        help="a Delta or Iceberg output's partition columns (comma-separated): kept columns "
        "that partition the input, e.g. date",
    ),
    input_version: str | None = typer.Option(
        None,
        help="a Delta table input: read this version (an Iceberg table's: this snapshot id), "
        "or the one current at an ISO 8601 time (default: the latest)",
    ),
    input_filter: str | None = typer.Option(
        None,
        "--filter",
        help="read, score and write only the input rows where this SQL condition holds, "
        "e.g. \"region IN ('EU', 'CH') AND signup >= DATE '2026-01-01'\" (pushed down to "
        "the Parquet reader)",
    ),
    incremental: bool = typer.Option(
        False,
        help="score only what changed since the output's last run of this job (new files; "
        "a Delta table's changes, an Iceberg table's appended snapshots, since the version "
        "it read) and add it to that output",
    ),
    on_changed: str = typer.Option(
        "refuse",
        help="--incremental: an input file changed or gone since the last run is refused "
        "(refuse) or rescored (rescore)",
    ),
    key: str | None = typer.Option(
        None,
        help="--incremental into a Delta output: kept columns that identify a row "
        "(comma-separated); updated and deleted input rows replace or remove theirs",
    ),
    verify: bool = typer.Option(False, help=VERIFY_HELP),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="print the plan (files, rows, backend and strategy, "
        "throughput measured on a sample, workers, estimate) and write nothing",
    ),
    mlflow_uri: str | None = MLFLOW_URI_OPTION,
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Score every row of INPUT into OUTPUT (staged, then published with _SUCCESS)."""
    from .._engines import score_parquet
    from .._progress import waiting
    from .._registry import ModelStore
    from .._specs import Input, Output, RunOptions

    # Shorthands for common engine options; the engine refuses one it does not take.
    named = {"address": ray_address, "num_workers": workers, "master": spark_master}
    options: dict[str, object] = {k: v for k, v in named.items() if v is not None}
    options.update(key_values(option, command="score", option="--engine-option"))
    stores = key_values(storage_option, command="score", option="--storage-option")
    use_mlflow(mlflow_uri)
    if dry_run:  # the run as a job of its own, planned as `scoring plan` plans one
        job: dict[str, Any] = {
            "name": "score", "input": input, "output": output, "format": output_format,
            "mode": mode or ("overwrite" if overwrite else None),
            "partition_by": _columns(partition_by or ""), "input_version": input_version,
            "filter": input_filter,
            "incremental": incremental, "on_changed": on_changed, "key": _columns(key or ""),
            "engine": engine, "keep": _columns(keep), "outputs": outputs, "reasons": reasons,
            "reasons_by": reasons_by, "device": device, "backend": backend,
            "strategy": strategy, "verify": verify, "registry": registry,
            "registry_db": registry_db, "mlflow_uri": mlflow_uri, "storage_options": stores,
            **({engine: options} if options else {}),
        }  # fmt: skip
        with reported("score"), waiting("planning ...", console=messages):
            print(_planned(job, _models(model, where)))
        return
    written = RowsWritten()
    loading = waiting("loading the model ...", console=messages)
    with reported("score", written=written), loading:
        entries = _models(model, where)
        store = (  # else opened only for a registry reference, not for a model file
            ModelStore(registry, db_url=registry_db, storage_options=stores)
            if registry_db
            else registry
        )
        target = Output(
            output,
            format=None if output_format == DEFAULT_FORMAT else output_format,
            mode=mode or ("overwrite" if overwrite else None),
            partition_by=_columns(partition_by or ""),
            key=_columns(key or ""),
        )
        result = score_parquet(
            Input(
                input,
                version=input_version,
                incremental=incremental,
                on_changed=on_changed,
                filter=input_filter,
            ),
            target,
            entries,
            engine=engine,
            keep=_columns(keep),
            outputs=_outputs(outputs, reasons, reasons_by),
            device=device,
            backend=backend,
            strategy=strategy,
            registry=store,
            engine_options=options,
            storage_options=stores,
            run=RunOptions(verify=verify, on_progress=written),
        )
    messages.print(f"scored {result.summary()}")
    if result.busy():
        messages.print(result.busy())


def _planned(job: dict[str, Any], entries: str | list[dict[str, str]]) -> str:
    """The plan of ``job`` (``scoring score``'s options as a job's keys) for ``entries``."""
    from pydantic import ValidationError

    from ..errors import ConfigError
    from ..jobs import JobSpec, make_plan

    models = {"model": entries} if isinstance(entries, str) else {"models": entries}
    try:
        spec = JobSpec.model_validate({**job, **models})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ConfigError(f"--{where.replace('_', '-')}: {error['msg']}") from None
    return make_plan(spec).summary()

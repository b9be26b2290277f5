"""``scoring models register|list|show|alias|export|verify|apply``: the registry from
the shell (``apply``: models as code, :mod:`scoring._declared`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ._common import (
    MLFLOW_URI_OPTION,
    REGISTRY_DB_OPTION,
    REGISTRY_OPTION,
    STORAGE_OPTION,
    fail,
    key_values,
    messages,
    reported,
    tables,
    use_mlflow,
)

if TYPE_CHECKING:  # imported where a command runs: ``--help`` loads no torch
    from .._catalog import Registry
    from .._parity import Verification
    from .._registry import ModelStore, ModelVersion

__all__ = ["models_app"]

models_app = typer.Typer(no_args_is_help=True, help="Register, list, promote and verify models.")


def _describe(mv: ModelVersion, check: Verification) -> str:
    state = "passed" if check.passed else "FAILED"
    return (
        f"{mv.ref} verification on {check.device_type}: {state} ({check.rows} rows, max error "
        f"{check.max_error:.2g}, label mismatches {check.label_mismatches}, strategies "
        f"{', '.join(check.strategies)})"
    )


def _registry(command: str, root: str | None, db_url: str | None, options: list[str]) -> Registry:
    from .._catalog import Registry

    stores = key_values(options, command=f"models {command}", option="--storage-option")
    return Registry(root, db_url=db_url, storage_options=stores)


@models_app.command()
def register(
    model: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="model file (.json/.ubj, .txt, .skops, .cbm, .onnx; or a pickle), a saved Spark ML "
        "model or PipelineModel folder (a path or an object-store URL), or an MLflow model: "
        "models:/NAME@ALIAS, models:/NAME/VERSION, runs:/RUN_ID/PATH or its directory",
    ),
    name: str | None = typer.Option(
        None,
        "--name",
        help="model name (default: the MLflow model's name, or the file's or folder's stem)",
    ),
    sample: Path | None = typer.Option(
        None, help="Parquet file of sample rows: verified on, and profiled as the drift reference"
    ),
    tag: list[str] = typer.Option([], help="KEY=VALUE, repeatable"),
    description: str = typer.Option("", help="free text kept with the version"),
    trusted: bool = typer.Option(False, help="allow a pickle file (runs its code on load)"),
    mlflow_uri: str | None = MLFLOW_URI_OPTION,
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Import, store and verify a model; prints NAME@VERSION."""
    tags = key_values(tag, command="models register", option="--tag", typed=False)
    use_mlflow(mlflow_uri)
    with reported("models register"):
        from .._frameworks import is_mlflow_ref, mlflow_name

        name = name or (mlflow_name(model) if is_mlflow_ref(model) else Path(model).stem)
        mv = _registry("register", registry, registry_db, storage_option).register(
            name, model, sample=sample, tags=tags, description=description, trusted=trusted
        )
    for check in mv.verification.values():
        messages.print(_describe(mv, check))
    print(mv.ref)


@models_app.command("list")
def list_models(
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="one JSON document, not a table"),
) -> None:
    """Every model with its latest version, aliases and verification."""
    from .._registry import ModelStore  # the records alone: no framework, no torch

    with reported("models list"):
        stores = key_values(storage_option, command="models list", option="--storage-option")
        reg = ModelStore(registry, db_url=registry_db, storage_options=stores)
        latest = reg.list()
        aliases = {mv.name: _aliases(reg, mv.name) for mv in latest}
    if as_json:
        listed = [{"name": mv.name, "latest": mv.version, "aliases": aliases[mv.name],
                   "framework": mv.schema.framework, "kind": mv.schema.model_kind,
                   "verified": mv.verified, "created_at": mv.created_at.isoformat()}
                  for mv in latest]  # fmt: skip
        print(json.dumps({"registry": reg.uri, "models": listed}, indent=1))
        return
    if not latest:
        messages.print(
            f"no models in {reg.uri}: register a model file with `scoring models register "
            "FILE --name NAME`, make the registry match a models/ folder with `scoring "
            "models apply models/`, or try `scoring demo`"
        )
        return
    table = Table(title=f"models in {reg.uri}")
    for col in ("name", "latest", "aliases", "framework", "kind", "verified", "created"):
        table.add_column(col)
    for mv in latest:
        table.add_row(
            mv.name,
            str(mv.version),
            ", ".join(f"{a}->{v}" for a, v in aliases[mv.name].items()) or "-",
            mv.schema.framework,
            mv.schema.model_kind,
            "yes" if mv.verified else "NO",
            f"{mv.created_at:%Y-%m-%d %H:%M}",
        )
    tables().print(table)


def _aliases(reg: ModelStore, name: str) -> dict[str, int]:
    return {a: mv.version for mv in reg.versions(name) for a in mv.aliases}


@models_app.command()
def show(
    ref: str = typer.Argument(..., help="NAME@ALIAS, NAME@VERSION or NAME (latest)"),
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Everything recorded about one version, as JSON."""
    with reported("models show"):
        mv = _registry("show", registry, registry_db, storage_option).get(ref)
    print(json.dumps(mv.to_dict(), indent=2))


@models_app.command()
def alias(
    name: str = typer.Argument(...),
    alias_name: str = typer.Argument(..., metavar="ALIAS"),
    version: int = typer.Argument(...),
    force: bool = typer.Option(False, help="promote even if verification failed"),
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Point NAME@ALIAS at VERSION."""
    with reported("models alias"):
        reg = _registry("alias", registry, registry_db, storage_option)
        reg.set_alias(name, alias_name, version, force=force)
    print(f"{name}@{alias_name} -> {version}")


@models_app.command()
def export(
    ref: str = typer.Argument(..., help="NAME@ALIAS, NAME@VERSION or NAME (latest)"),
    to_mlflow: bool = typer.Option(
        False, "--mlflow", help="as an MLflow pyfunc model, logged to the tracking server"
    ),
    register_as: str | None = typer.Option(
        None, help="also register it in MLflow's model registry under this name"
    ),
    mlflow_uri: str | None = MLFLOW_URI_OPTION,
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Export a version for another system to load; prints where it went."""
    if not to_mlflow:
        raise fail("models export", "name where to export: --mlflow", code=2)
    use_mlflow(mlflow_uri)
    with reported("models export"):
        from ..mlflow import export_model

        info = export_model(ref, registry=_registry("export", registry, registry_db,
                            storage_option), registered_model_name=register_as)  # fmt: skip
    print(info.model_uri)
    if register_as:
        print(f"models:/{register_as}/{info.registered_model_version}")


@models_app.command()
def verify(
    ref: str = typer.Argument(..., help="NAME@ALIAS, NAME@VERSION or NAME (latest)"),
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Re-run parity verification on this machine's devices and record it."""
    with reported("models verify"):
        mv = _registry("verify", registry, registry_db, storage_option).verify(ref)
    for check in mv.verification.values():
        print(_describe(mv, check))
    if not mv.verified:
        raise fail("models verify", f"{mv.ref} failed parity verification")


@models_app.command()
def apply(
    folder: Path = typer.Argument(
        Path("models"), help="folder of model files (*.toml), one per registered model"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the changes, make none"),
    mlflow_uri: str | None = MLFLOW_URI_OPTION,
    registry: str | None = REGISTRY_OPTION,
    registry_db: str | None = REGISTRY_DB_OPTION,
    storage_option: list[str] = STORAGE_OPTION,
) -> None:
    """Register and move aliases so that the registry matches FOLDER's model files;
    a second apply changes nothing.  Prints each change (with --dry-run: each it would
    make)."""
    use_mlflow(mlflow_uri)
    made = 0
    with reported("models apply"):
        from .._declared import changes, declared

        entries = declared(folder)
        reg = _registry("apply", registry, registry_db, storage_option)
        for change in changes(reg, entries, dry_run=dry_run):  # printed as each is made
            print(f"{'would ' if dry_run else ''}{change}", flush=True)
            made += 1
    verb = "would make" if dry_run else "made"
    messages.print(f"{made} change(s) {verb}; {len(entries)} model file(s) in {folder}"
                   + ("" if made else ": the registry matches them"))  # fmt: skip

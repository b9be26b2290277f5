"""``scoring score``: score a Parquet dataset with a registered model."""

from __future__ import annotations

import typer
from rich.console import Console

from ._common import REGISTRY_OPTION, reported

__all__ = ["score"]


def _columns(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def score(
    model: str = typer.Option(..., "--model", help="NAME@ALIAS, NAME@VERSION or a model file"),
    input: str = typer.Option(..., "--input", help="Parquet file, directory, glob or URL"),
    output: str = typer.Option(..., "--output", help="output directory or URL"),
    keep: str = typer.Option("", help="input columns to copy to the output: col,col"),
    outputs: str = typer.Option("default", help="default, raw (default + margins) or all"),
    engine: str = typer.Option("local", help="local"),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N"),
    backend: str = typer.Option("auto", help="auto, tensor, native or hummingbird"),
    overwrite: bool = typer.Option(False, help="replace a completed run of another job"),
    registry: str | None = REGISTRY_OPTION,
) -> None:
    """Score every row of INPUT into OUTPUT (staged, then published with _SUCCESS)."""
    from ..engines import score_parquet

    with reported("score"):
        result = score_parquet(
            input,
            output,
            model,
            engine=engine,
            keep=_columns(keep),
            outputs=outputs,
            device=device,
            backend=backend,
            registry=registry,
            overwrite=overwrite,
        )
    Console(stderr=True).print(f"scored {result.summary()}")

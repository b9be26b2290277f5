"""What every command shares: the registry option and one-line errors on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from ..errors import ConfigError, ScoringError

__all__ = ["REGISTRY_OPTION", "fail", "reported"]

REGISTRY_OPTION = typer.Option(
    None,
    "--registry",
    envvar="SCORING_HOME",
    help="registry root: a directory or fsspec URL (default $SCORING_HOME, else ./.scoring)",
)


def fail(command: str, message: str, *, code: int = 1) -> typer.Exit:
    print(f"scoring {command}: {message}", file=sys.stderr)
    return typer.Exit(code)


@contextmanager
def reported(command: str) -> Iterator[None]:
    """Turn a ScoringError into its one-line reason on stderr and exit status 1."""
    try:
        yield
    except ConfigError as exc:  # a usage mistake: exit 2, as for a bad option
        raise fail(command, " ".join(str(exc).split()), code=2) from None
    except ScoringError as exc:
        raise fail(command, " ".join(str(exc).split())) from None

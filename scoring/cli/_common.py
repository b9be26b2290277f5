"""What every command shares: the registry option and one-line errors on stderr."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from ..errors import ConfigError, ScoringError, debugging

__all__ = [
    "MLFLOW_URI_OPTION", "REGISTRY_DB_OPTION", "REGISTRY_OPTION", "STORAGE_OPTION",
    "VERIFY_HELP", "debugging", "RowsWritten", "Terminated", "fail", "key_values", "messages",
    "reported", "tables", "use_mlflow",
]  # fmt: skip

#: What commands say on stderr (plans, summaries, report paths).  A line stays one line
#: when stderr is a log, not a terminal: rich would wrap it at 80 columns, and a log
#: reader (grep, Airflow's task log) then finds half a summary.
messages = Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


def tables() -> Console:
    """Where a command prints its tables (stdout): a terminal's width on a terminal;
    piped or in a log, wide enough that no value is cut to fit 80 columns."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 10_000)


VERIFY_HELP = "a rerun into a complete output checks its files' sha256, not only sizes"
REGISTRY_OPTION = typer.Option(
    None,
    "--registry",
    envvar="SCORING_HOME",
    help="registry root: a directory or fsspec URL (default $SCORING_HOME, else the user's "
    "data directory, ~/.local/share/scoring on Linux)",
)
REGISTRY_DB_OPTION = typer.Option(
    None,
    "--registry-db",
    envvar="SCORING_REGISTRY_DB",
    help="registry database: a SQLAlchemy URL, e.g. postgresql+psycopg://user@host/scoring "
    "(default SQLite in a local root; a remote root needs one)",
)
MLFLOW_URI_OPTION = typer.Option(
    None,
    "--mlflow-uri",
    help="MLflow tracking server that models:/ and runs:/ references are read from "
    "(default: MLflow's own configuration, MLFLOW_TRACKING_URI)",
)


def use_mlflow(uri: str | None) -> None:
    """``--mlflow-uri`` as MLflow's own setting, for this process and what it starts."""
    if uri:
        os.environ["MLFLOW_TRACKING_URI"] = uri


STORAGE_OPTION = typer.Option(
    [],
    "--storage-option",
    help="KEY=VALUE, an fsspec option of the object stores used (repeatable), e.g. "
    "endpoint_url=http://host:9000 or profile=prod; PROTOCOL.KEY=VALUE for one protocol",
)


def key_values(
    pairs: list[str], *, command: str, option: str, typed: bool = True
) -> dict[str, Any]:
    """``KEY=VALUE`` pairs of a repeated option; with ``typed``, a value that reads as
    JSON (``false``, ``3``, ``{"region_name": "eu-west-1"}``) is taken as such."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise fail(command, f"{option} {pair!r} is not KEY=VALUE", code=2)
        found[key.strip()] = _json_or_text(text) if typed else text
    return found


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def fail(command: str, message: str, *, code: int = 1) -> typer.Exit:
    print(f"scoring {command}: {message}", file=sys.stderr)
    return typer.Exit(code)


class Terminated(BaseException):
    """SIGTERM (a scheduler stopping the job), raised where Ctrl-C raises
    KeyboardInterrupt; not an Exception, so that nothing on the way takes it for an
    error to handle."""


class RowsWritten:
    """An ``on_progress`` listener keeping the rows written so far, for the message of a
    command stopped by a signal."""

    def __init__(self) -> None:
        self.rows = 0
        self.since = time.monotonic()  # publications begun after this are the command's

    def __call__(self, seconds: float, rows: int) -> None:
        self.rows = rows


#: Exit statuses of a command stopped by a signal: 128 + its number, as shells report.
STOPPED = {KeyboardInterrupt: ("SIGINT", 130), Terminated: ("SIGTERM", 143)}


@contextmanager
def reported(command: str, *, written: RowsWritten | None = None) -> Iterator[None]:
    """Turn an error into its one-line reason on stderr and exit status 1 (2 for a usage
    mistake, 6 for an input that does not fit the model); the traceback of an unexpected
    one only with ``--debug``.  Ctrl-C and SIGTERM stop the command with 130 and 143,
    saying what was done (``written``: a run that a rerun resumes)."""
    with _terminable() as received:
        try:
            yield
            if received:  # raised where a library swallowed it: the stop still stands
                raise Terminated()
        except (KeyboardInterrupt, Terminated) as exc:
            name, code = STOPPED[type(exc)]
            raise fail(command, _stopped(name, written), code=code) from None
        except ScoringError as exc:
            if debugging() and _translated(exc):  # the library's own error, and ours
                raise
            code = 2 if isinstance(exc, ConfigError) else _status(exc)  # 2: a usage mistake
            raise fail(command, _one_line(exc), code=code) from None
        except (typer.Exit, typer.Abort, typer.TyperException):  # the command's own exits
            raise
        except OSError as exc:  # disk full, no permission, a file gone from under us
            if debugging():
                raise
            where = f" ({exc.filename})" if exc.filename else ""
            raise fail(command, f"{exc.strerror or _one_line(exc)}{where}") from None
        except Exception as exc:
            if debugging():
                raise
            hint = "rerun with --debug (or SCORING_DEBUG=1) for the traceback"
            reason = f"unexpected {type(exc).__name__}: {_one_line(exc)}; {hint}"
            raise fail(command, reason) from None


def _translated(exc: ScoringError) -> bool:
    """Whether ``exc`` stands for a library's exception (:class:`scoring.errors.translated`)."""
    return exc.__cause__ is not None and not isinstance(exc.__cause__, ScoringError)


def _status(exc: ScoringError) -> int:
    """1, or 6 when the input does not fit the model: a retry would read the same rows."""
    from ..jobs._runner import EXIT_FAILED, EXIT_INPUT, exit_code

    return EXIT_INPUT if exit_code(exc) == EXIT_INPUT else EXIT_FAILED


def _stopped(signal_name: str, written: RowsWritten | None) -> str:
    """What is true of the output when the signal landed: as far as its publication got."""
    from .._formats.publication import publications_since

    if written is None:
        return f"stopped by {signal_name}"
    began = publications_since(written.since)
    phase, url = (began[-1].phase, began[-1].url) if began else ("", "")
    if phase == "published":
        return f"stopped by {signal_name} after publishing {url}: the output is complete"
    if phase == "replacing":
        return (
            f"stopped by {signal_name} while publishing {url} over its previous run: not "
            "complete (no _SUCCESS); the previous run stays readable through "
            "_scoring_manifest.json, and the same command finishes publishing"
        )
    if phase == "committing":  # a Delta table: one commit publishes, or nothing does
        return (
            f"stopped by {signal_name} while committing to Delta table {url}: no version of "
            "this run is in the table; the files are journaled, and the same command commits"
        )
    if phase == "publishing":
        return (
            f"stopped by {signal_name} while publishing {url}: not complete (no _SUCCESS); "
            "the files are journaled, and the same command finishes publishing"
        )
    return (
        f"stopped by {signal_name} after {written.rows:,} rows: nothing was published; the "
        "files already written are journaled, and the same command resumes from them"
    )


@contextmanager
def _terminable() -> Iterator[list[int]]:
    """SIGTERM raises :class:`Terminated` in the main thread while the command runs, and
    is recorded in the list this yields: an exception raised at an arbitrary point can
    be swallowed there (a library's bare ``except:``), and the command must stop all
    the same."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def terminate(number: int, frame: Any) -> None:
        received.append(number)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

"""The ``scoring`` command line (its help, :data:`HELP`, lists the exit statuses)."""

from __future__ import annotations

import os

import typer

from ._demo import demo
from ._deploy import deploy_app
from ._examples import examples
from ._jobs import plan, run
from ._models import models_app
from ._runs import runs
from ._score import score

__all__ = ["HELP", "app"]

#: One line per paragraph: the help's renderer keeps line breaks as they are.
HELP = (
    "GPU batch scoring of tree ensembles.\n\n"
    "Exit status: 0 success; otherwise a one-line reason on stderr and 1 the command "
    "failed, 2 a usage error, 3 a job's deadline cannot be met (plan, run), 4 a job "
    "finished after its deadline, 5 a job's checks failed (nothing published), 6 the input "
    "does not fit the model (a column missing or not numeric, a value refused), 130 or 143 "
    "stopped by Ctrl-C or SIGTERM.\n\n"
    "--debug (or SCORING_DEBUG=1) shows the traceback of an unexpected error, or of the "
    "library's error behind the reason."
)

app = typer.Typer(no_args_is_help=True, add_completion=False, help=HELP)
app.command()(score)
app.command()(demo)
app.command()(examples)
app.command()(plan)
app.command()(run)
app.command()(runs)
app.add_typer(models_app, name="models")
app.add_typer(deploy_app, name="deploy")


def _version(asked: bool) -> None:
    if asked:
        from .._version import __version__

        print(f"scoring {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    debug: bool = typer.Option(
        False, "--debug", help="show the traceback of unexpected errors and of a library's errors"
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """GPU batch scoring of tree ensembles (see :data:`HELP`)."""
    if debug:
        os.environ["SCORING_DEBUG"] = "1"


if __name__ == "__main__":
    app()

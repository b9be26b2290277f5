"""The ``scoring`` command line.  Exit 0 on success; otherwise a one-line reason on stderr
(1: the command failed, 2: usage error; ``plan`` and ``run`` add 3: the deadline cannot
be met, 4: finished after the deadline).  ``--debug`` (or ``SCORING_DEBUG=1``) shows the
traceback of an unexpected error."""

from __future__ import annotations

import os

import typer

from ._demo import demo
from ._jobs import plan, run
from ._models import models_app
from ._runs import runs
from ._score import score

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.command()(score)
app.command()(demo)
app.command()(plan)
app.command()(run)
app.command()(runs)
app.add_typer(models_app, name="models")


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="show the traceback of unexpected errors"),
) -> None:
    """GPU batch scoring of tree ensembles."""
    if debug:
        os.environ["SCORING_DEBUG"] = "1"


if __name__ == "__main__":
    app()

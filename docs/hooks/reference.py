"""MkDocs hook: the reference pages' tables, generated from the code at every build.

A page asks for one with a line ``<!-- generated: NAME -->``; :data:`SECTIONS` names what
each is made from.  Nothing here is copied by hand, so a new CLI option, job-file key or
error is in the site the next time it is built (``tests/test_docs.py`` shows it).
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

ROOT = Path(__file__).parents[2]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", flags=re.M)


def _cell(text: Any) -> str:
    """One table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# The command line, from the typer application's click commands.


def cli_reference(app: typer.Typer, *, name: str = "scoring") -> str:
    """Every command of ``app``, its usage, help and options, as markdown."""
    command = typer.main.get_command(app)
    return "\n".join(_command(command, command.context_class(command, info_name=name), 2))


# Typer's commands, parameters and contexts are click's (its own copy of click, in recent
# versions), known here by what they have rather than by click's classes.


def _command(command: Any, ctx: Any, level: int) -> Iterator[str]:
    path = ctx.command_path
    yield f"{'#' * level} `{path}`\n"
    if command.help:
        yield inspect.cleandoc(command.help).split("\n\n")[0] + "\n"
    yield f"```text\n{path} {' '.join(command.collect_usage_pieces(ctx))}\n```\n"
    rows = [_param(p) for p in command.params if not getattr(p, "hidden", False)]
    if rows:
        yield "| option | default | what it does |\n|---|---|---|"
        yield from rows
        yield ""
    for sub_name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            sub_ctx = sub.context_class(sub, info_name=sub_name, parent=ctx)
            yield from _command(sub, sub_ctx, min(level + 1, 4))


def _param(param: Any) -> str:
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    if param.param_type_name == "argument":
        names = f"`{(param.name or '').upper()}` (argument)"
    default = param.default
    shown = "" if default in (None, "", [], ()) or callable(default) else f"`{default}`"
    if getattr(param, "is_flag", False):
        shown = "on" if default else "off"
    help_text = getattr(param, "help", None) or ""
    if param.envvar:
        help_text += f" (environment: `{param.envvar}`)"
    return f"| {names} | {_cell(shown)} | {_cell(help_text)} |"


# The job file, from its pydantic schema.


def job_file_reference(spec: type[BaseModel]) -> str:
    """Every key of a job file: top-level keys, then one table per ``[table]``."""
    tables: list[tuple[str, type[BaseModel]]] = []
    lines = ["| key | default | what it is |", "|---|---|---|"]
    for key, field in spec.model_fields.items():
        kind = _table(field.annotation)
        if kind is not None:
            tables.append((key, kind))
            continue
        lines.append(f"| `{key}` | {_default(field)} | {_cell(field.description or '')} |")
    for key, model in tables:
        doc = inspect.cleandoc(model.__doc__ or "").split("\n\n")[0]
        lines += ["", f"### `[{key}]`", "", _cell(doc) if doc else "", ""]
        lines += ["| key | default | what it is |", "|---|---|---|"]
        for sub, field in model.model_fields.items():
            lines.append(f"| `{sub}` | {_default(field)} | {_cell(field.description or '')} |")
    return "\n".join(lines) + "\n"


def _table(kind: Any) -> type[BaseModel] | None:
    """The model of a ``[table]`` key: a model, or an optional one (``Autoscale | None``)."""
    options = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
    found = options[0] if len(options) == 1 else None
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return "" if value in (None, [], {}) else f"`{value!r}`"


# Errors, from the exception tree.


def errors_reference() -> str:
    """Every error the product raises on purpose: its place in the tree, the exit status
    ``scoring run`` gives it, and the first paragraph of its docstring."""
    from scoring.errors import ScoringError
    from scoring.jobs._runner import exit_code

    lines = ["| error | exit | what it means |", "|---|---:|---|"]
    for depth, cls in _tree(ScoringError, 0):
        code = exit_code(cls.__new__(cls))  # what `scoring run` exits with for it
        doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
        name = "&nbsp;&nbsp;" * depth + f"`{cls.__name__}`"
        lines.append(f"| {name} | {code} | {_cell(doc)} |")
    return "\n".join(lines) + "\n"


def _tree(cls: type[BaseException], depth: int) -> Iterator[tuple[int, type[BaseException]]]:
    yield depth, cls
    subclasses: list[type[BaseException]] = cls.__subclasses__()
    for sub in sorted(subclasses, key=lambda c: c.__name__):
        yield from _tree(sub, depth + 1)


# Results files, from benchmarks/results/.


def results_reference(folder: Path = ROOT / "benchmarks" / "results") -> str:
    """One line per results file: its path and its title."""
    lines = ["| file | what it measured |", "|---|---|"]
    for path in sorted(folder.rglob("*.md")):
        title = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                      if ln.strip()), "")  # fmt: skip
        lines.append(f"| `{path.relative_to(ROOT)}` | {_cell(title)} |")
    return "\n".join(lines) + "\n"


def _cli() -> str:
    from scoring.cli import app

    return cli_reference(app)


def _job_file() -> str:
    from scoring.jobs._spec import JobSpec

    return job_file_reference(JobSpec)


SECTIONS: dict[str, Callable[[], str]] = {
    "cli": _cli,
    "job-file": _job_file,
    "errors": errors_reference,
    "results": results_reference,
}


def generated(markdown: str) -> str:
    """``markdown`` with each marker replaced by its section; an unknown one fails."""

    def section(match: re.Match[str]) -> str:
        if match.group(1) not in SECTIONS:
            raise KeyError(f"no generated section {match.group(1)!r}: one of {sorted(SECTIONS)}")
        return SECTIONS[match.group(1)]()

    return MARKER.sub(section, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return generated(markdown)

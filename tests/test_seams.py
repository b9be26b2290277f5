"""The seams stay narrow: a format is its module and its registry entry, a table format
writes only what differs, and the run plan takes records, not their fields."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import scoring
from scoring._engines import base
from scoring._formats import FORMATS

PACKAGE = Path(scoring.__file__).parent


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    }  # fmt: skip


def test_format_names_are_literals_in_at_most_four_modules_outside_the_formats() -> None:
    naming = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "_formats" not in path.parts and _code_strings(path) & set(FORMATS)
    )
    assert naming, "the scan finds nothing: it would pass whatever the code says"
    assert len(naming) <= 4, naming


def test_the_scan_sees_a_format_name_in_code() -> None:
    """The scan above would see a literal: the format registry's own module names them."""
    assert {"parquet", "delta", "iceberg"} <= _code_strings(PACKAGE / "_formats" / "registry.py")


def _lines(path: Path) -> set[str]:
    """A module's lines of code: not blank, comments, imports or lone punctuation."""
    found = set()
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith(("#", "import ", "from ")) or text == '"""':
            continue
        if re.fullmatch(r"[)\]}([{,:]+(\s*#.*)?", text):
            continue
        found.add(text)
    return found


def test_delta_and_iceberg_share_at_most_20_lines() -> None:
    """Their lifecycle is :mod:`scoring._formats.table`'s: each module holds what differs."""
    shared = _lines(PACKAGE / "_formats" / "delta.py") & _lines(PACKAGE / "_formats" / "iceberg.py")
    assert len(shared) <= 20, sorted(shared)


def test_the_run_plan_takes_records() -> None:
    """``plan_run`` takes the request the caller builds from what it holds (the input,
    the output, the model, the run's and the engine's options), not their fields."""
    parameters = inspect.signature(base.plan_run).parameters
    assert len(parameters) <= 8, list(parameters)
    request = inspect.signature(base.PlanRequest).parameters
    assert len(request) <= 8, list(request)

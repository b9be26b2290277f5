"""What ``pip install .`` installs is enough to import the package: every third-party
module imported at a module's top level belongs to a declared dependency, and an
extra's (ray, pyspark, psycopg, ...) is imported only inside the functions that use it.

A dependency's own dependencies do not count: they change under us (typer 0.29 dropped
click, which the command line imported, and the runtime install failed on it)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the tomli backport, a dependency there
    import tomli as tomllib

ROOT = Path(__file__).parents[1]
#: Files another program executes, never imported by the package: the extra that runs
#: them is installed where they run (MLflow loads an exported model's code file).
ENTRY_FILES = {"scoring/mlflow/_pyfunc.py": "mlflow"}
#: Files whose extra is imported at their top level (Triton's kernels are defined there),
#: which the package imports only inside the functions that need them.
LAZY_FILES = {"scoring/_compiler/triton_kernel.py": "triton"}


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert found, requirement
    return re.sub(r"[-_.]+", "-", found[0]).lower()


def _top_level_imports(path: Path) -> set[str]:
    """Modules a file imports when it is imported: not inside functions, classes or
    ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_module_imported_at_load_is_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"] if "python_version < " not in r}
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for path in sorted((ROOT / "scoring").rglob("*.py")):
        for module in _top_level_imports(path):
            if module in sys.stdlib_module_names or module in ("scoring", "__future__"):
                continue
            relative = str(path.relative_to(ROOT))
            if module in (ENTRY_FILES.get(relative), LAZY_FILES.get(relative)):
                continue
            owners = {_name(d) for d in distributions.get(module, [])}
            if not owners & declared:
                undeclared[f"{path.relative_to(ROOT)}: {module}"] = sorted(owners)
    assert not undeclared, undeclared


def test_entry_files_are_not_imported_by_the_package() -> None:
    for entry in ENTRY_FILES:
        importers = _importers(entry, anywhere=True)
        assert not importers, importers


def test_lazy_files_are_imported_only_inside_functions() -> None:
    for lazy in LAZY_FILES:
        importers = _importers(lazy, anywhere=False)
        assert not importers, importers


def _importers(file: str, *, anywhere: bool) -> list[str]:
    """The package's files whose imports (anywhere, or at their top level) name
    ``file``'s module."""
    stem = Path(file).stem
    return [
        str(p.relative_to(ROOT)) for p in (ROOT / "scoring").rglob("*.py")
        if any(stem in m for m in _imported_names(p, anywhere=anywhere))
    ]  # fmt: skip


def _imported_names(path: Path, *, anywhere: bool) -> set[str]:
    """Every module and name the file's imports name (relative ones included): anywhere
    (functions included), or in its top-level statements only."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree) if anywhere else tree.body:
        if isinstance(node, ast.ImportFrom):
            found |= {node.module or "", *(a.name for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_the_check_sees_a_top_level_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import click\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\n"
        "def f():\n    import pyspark\n"
    )
    assert _top_level_imports(source) == {"click", "typing"}

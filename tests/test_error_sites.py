"""Each library's own exception raised at each of the product's call sites into it: the
command says one line, naming the table or file it was reading or writing, never the
library's exception as such ("unexpected") nor a traceback.

The sites are found by running the commands (:mod:`tests.call_sites`): every call from
``scoring/`` into delta-rs, pyiceberg, pyarrow's Parquet and dataset readers and fsspec
that a run of each scenario makes.  Each scenario is a command of the data surfaces
(Delta and Iceberg in and out, every mode, an incremental run over a change feed or
appended snapshots, a filtered read, a folder's output), prepared once; each site is
tried on a fresh copy of its scenario's prepared state.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from scoring.cli import app

from .call_sites import Site, watching

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
pyiceberg = pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
runner = CliRunner()
LIBRARIES = ("deltalake", "pyiceberg", "pyarrow.parquet", "pyarrow.dataset", "fsspec")
FEED = {"delta.enableChangeDataFeed": "true"}
CITIES = ["New York", "é/ü", "plain"]


def _rows(ids: range) -> pd.DataFrame:
    rng = np.random.default_rng(len(ids))
    frame = pd.DataFrame(rng.normal(size=(len(ids), 2)), columns=["a", "b"])
    city = [CITIES[i % len(CITIES)] for i in ids]
    return frame.assign(id=np.array(ids, dtype=np.int64), city=city)


def _catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("lab", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")


def _score(model: str, source: str, output: str, *more: str) -> list[str]:
    return ["score", "--model", model, "--input", source, "--output", output,
            "--keep", "id,city", *more]  # fmt: skip


def _folder(root: Path) -> str:
    _rows(range(30)).to_parquet(root / "in", partition_cols=["city"])
    return str(root / "in")


def delta_created(root: Path, model: str) -> list[str]:
    return _score(model, _folder(root), f"delta:{root / 'out'}", "--partition-by", "city")


def delta_appended(root: Path, model: str) -> list[str]:
    command = delta_created(root, model)
    _ok(command)
    return [*command, "--mode", "append"]


def delta_partitions_replaced(root: Path, model: str) -> list[str]:
    command = delta_created(root, model)
    _ok(command)
    return [*command, "--mode", "overwrite_partitions"]


def delta_incremental(
    root: Path, model: str, *, partition_by: list[str] | None = None
) -> list[str]:
    """Partitioned by values a path escapes, the change feed is read from the table's log
    (:mod:`scoring._formats.delta_cdf`); else by delta-rs."""
    source = str(root / "in")
    deltalake.write_deltalake(source, _rows(range(30)), configuration=FEED,
                              partition_by=partition_by)  # fmt: skip
    command = _score(model, source, f"delta:{root / 'out'}", "--incremental", "--key", "id")
    _ok(command)
    table = deltalake.DeltaTable(source)
    table.update(predicate="id < 5", updates={"a": "a + 1.0"})
    table.delete("id > 25")
    deltalake.write_deltalake(source, _rows(range(30, 40)), mode="append")
    return command


def delta_incremental_escaped(root: Path, model: str) -> list[str]:
    return delta_incremental(root, model, partition_by=["city"])


def delta_filtered(root: Path, model: str) -> list[str]:
    source = str(root / "in")
    deltalake.write_deltalake(source, _rows(range(30)), partition_by=["city"])
    deltalake.write_deltalake(source, _rows(range(30, 40)), mode="append")
    return _score(model, source, str(root / "out"), "--input-version", "0",
                  "--filter", "a > 0 AND city <> 'x'")  # fmt: skip


def folder_overwritten(root: Path, model: str) -> list[str]:
    command = _score(model, _folder(root), str(root / "out"))
    _ok(command)
    return [*command, "--mode", "overwrite"]


def _iceberg_source(root: Path) -> Any:
    catalog = _catalog(root)
    catalog.create_namespace("sales")
    arrow = pa.Table.from_pandas(_rows(range(30)), preserve_index=False)
    table = catalog.create_table("sales.features", schema=arrow.schema)
    with table.update_spec() as spec:
        spec.add_identity("city")
    table.append(arrow)
    return catalog.load_table("sales.features")


def iceberg_appended(root: Path, model: str) -> list[str]:
    _iceberg_source(root)
    command = _score(model, "iceberg:lab.sales.features", "iceberg:lab.sales.scores",
                     "--partition-by", "city")  # fmt: skip
    _ok(command)
    return [*command, "--mode", "append"]


def iceberg_partitions_replaced(root: Path, model: str) -> list[str]:
    return [*iceberg_appended(root, model)[:-2], "--mode", "overwrite_partitions"]


def iceberg_incremental(root: Path, model: str) -> list[str]:
    source = _iceberg_source(root)
    command = _score(model, "iceberg:lab.sales.features", "iceberg:lab.sales.scores",
                     "--incremental")  # fmt: skip
    _ok(command)
    source.append(pa.Table.from_pandas(_rows(range(30, 40)), preserve_index=False))
    return command


SCENARIOS: dict[str, Callable[[Path, str], list[str]]] = {
    f.__name__: f
    for f in (delta_created, delta_appended, delta_partitions_replaced, delta_incremental,
              delta_incremental_escaped, delta_filtered, folder_overwritten, iceberg_appended,
              iceberg_partitions_replaced, iceberg_incremental)
}  # fmt: skip


def _ok(command: list[str]) -> None:
    said = runner.invoke(app, command)
    assert said.exit_code == 0, said.output


def _raised(site: Site) -> BaseException:
    """The library's own exception, as it reports a failure of its own."""
    package = site.library.split(".")[0]
    if package == "deltalake":
        from deltalake.exceptions import DeltaError

        return DeltaError("Generic DeltaTable error: injected by the test")
    if package == "pyiceberg":
        from pyiceberg.exceptions import ServiceUnavailableError

        return ServiceUnavailableError("ServiceUnavailableException: injected by the test")
    if site.library.startswith("pyarrow"):
        return pa.ArrowInvalid("Parquet magic bytes not found in footer (injected)")
    return PermissionError(errno.EACCES, "Permission denied (injected)", "/injected/path")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    import xgboost

    X = pd.DataFrame(np.random.default_rng(0).normal(size=(80, 2)), columns=["a", "b"])
    path = tmp_path_factory.mktemp("model") / "m.json"
    xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X.a).save_model(path)
    return str(path)


def _said(command: list[str]) -> tuple[int, list[str]]:
    said = runner.invoke(app, command)
    return said.exit_code, said.stderr.strip().splitlines()


def _fault(site: Site, code: int, lines: list[str], root: Path) -> str | None:
    """What is wrong with the command's word on the exception raised at ``site``."""
    if code not in (1, 6):
        return f"exit {code}" + (f": {lines}" if lines else " (the exception was swallowed)")
    if len(lines) != 1 or "unexpected" in lines[0] or "Traceback" in lines[0]:
        return f"said {lines}"
    names = (str(root), "lab.sales.", "catalog 'lab'", "/injected/path", "row filter")
    if not any(name in lines[0] for name in names):
        return f"names neither the table nor the file: {lines[0]}"
    return None


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_library_exception_at_each_call_site_is_one_line_naming_the_input(
    scenario: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__LAB__URI", f"sqlite:///{tmp_path}/run/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAB__WAREHOUSE", f"file://{tmp_path}/run/wh")
    run, kept = tmp_path / "run", tmp_path / "prepared"
    run.mkdir()
    command = SCENARIOS[scenario](run, model)
    shutil.move(run, kept)  # the tables name their own absolute paths: rerun at the same

    def fresh() -> None:
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(kept, run)

    fresh()
    with watching(monkeypatch, *LIBRARIES) as watch:
        _ok(command)
        sites = sorted(watch.seen)
        assert sites, "the scenario calls into the libraries"
        faults = {}
        for site in sites:
            fresh()
            watch.arm(site, _raised)
            code, lines = _said(command)
            fault = _fault(site, code, lines, tmp_path) if watch.raised else "not reached"
            if fault:
                faults[str(site)] = fault
    assert not faults, "\n".join(f"{site}: {fault}" for site, fault in faults.items())

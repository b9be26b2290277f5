"""Partition values as the table's own reader sees them: every table publisher (Delta,
Iceberg) in every mode, over partition values drawn by Hypothesis (any Unicode, the
characters paths and URIs escape, the empty string, NULL), read back by delta-rs and
pyiceberg and compared with the expected rows, id for id.

Found from outside: a Delta ``overwrite_partitions`` run named the files it replaced
escaped once more than their add actions had, so it removed nothing and every value
that needs escaping kept both runs' rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scoring

from .conftest import sql_catalog

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")

#: What hand-picked values found, always tried; Hypothesis adds its own.
ESCAPED = ["New York", "é", "a/b", "50%", "=", ",", ":", "+", "#", "'", "\\", "%2F",
           "tab\there", "日本", "plain"]  # fmt: skip
VALUES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    import xgboost

    X = pd.DataFrame(np.random.default_rng(3).normal(size=(64, 2)), columns=["a", "b"])
    path = tmp_path_factory.mktemp("model") / "m.json"
    xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X.a).save_model(path)
    return str(path)


def _features(folder: Path, values: list[str | None], *, first_id: int) -> pa.Table:
    """One row per value, partitioned by it in ``key=value`` folders as pyarrow writes them
    (a NULL under Hive's default partition)."""
    shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(len(values))
    table = pa.table({"a": rng.normal(size=len(values)), "b": rng.normal(size=len(values)),
                      "id": np.arange(first_id, first_id + len(values)),
                      "city": pa.array(values, pa.string())})  # fmt: skip
    pads.write_dataset(table, folder, format="parquet", partitioning=["city"],
                       partitioning_flavor="hive")  # fmt: skip
    return table


def _scored(
    root: Path, url: str, model: str, values: list[str | None], *, mode: str | None,
    first_id: int,
) -> pa.Table:  # fmt: skip
    """``values``' rows scored from ``root/features`` into the table ``url`` in ``mode``,
    partitioned by city; the rows written."""
    table = _features(root / "features", values, first_id=first_id)
    out = scoring.Output(url, mode=mode, partition_by=["city"])
    scoring.score_parquet(root / "features", out, model, keep=["id", "city"], progress=False)
    return table


def _read(fmt: str, url: str, catalog: Any) -> set[tuple[int, str | None]]:
    if fmt == "delta":
        frame = deltalake.DeltaTable(url.split(":", 1)[1]).to_pyarrow_table(columns=["id", "city"])
    else:
        frame = catalog.load_table(url.split(":", 1)[1].split(".", 1)[1]).scan(
            selected_fields=("id", "city")).to_arrow()  # fmt: skip
    rows = list(zip(frame.column("id").to_pylist(), frame.column("city").to_pylist(),
                    strict=True))  # fmt: skip
    assert len(rows) == len(set(rows)), "a row twice"
    return set(rows)


def _expected(fmt: str, *tables: pa.Table) -> set[tuple[int, str | None]]:
    """The rows of ``tables`` as the format holds them: Delta serialises an empty
    partition value as null (its protocol, and Spark's writer)."""
    empty = None if fmt == "delta" else ""
    return {(i, empty if c == "" else c) for t in tables
            for i, c in zip(t.column("id").to_pylist(), t.column("city").to_pylist(),
                            strict=True)}  # fmt: skip


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("mode", ["error", "append", "overwrite", "overwrite_partitions"])
@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(first=st.lists(VALUES, min_size=1, max_size=3, unique=True),
       second=st.lists(VALUES, min_size=1, max_size=3, unique=True))  # fmt: skip
def test_what_the_table_s_reader_gets_back_is_what_each_mode_means(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, model: str,
    fmt: str, mode: str, first: list[str], second: list[str],
) -> None:  # fmt: skip
    """Two runs: the first creates the table, the second writes in ``mode`` partitions
    that overlap the first's (the escaped values always among them)."""
    root = tmp_path_factory.mktemp(f"{fmt}-{mode}")
    catalog = sql_catalog("parts", root, monkeypatch) if fmt == "iceberg" else None
    url = f"delta:{root / 'scores'}" if fmt == "delta" else "iceberg:parts.sales.scores"
    # Both runs hold the escaped values and NULL; the second also a value of the first.
    one = [*dict.fromkeys([*first, *ESCAPED[:8], None])]
    two = [*dict.fromkeys([*second, one[0], *ESCAPED[5:], None])]

    def run(values: list[str | None], mode: str | None, first_id: int) -> pa.Table:
        return _scored(root, url, model, values, mode=mode, first_id=first_id)

    a = run(one, None, 0)
    assert _read(fmt, url, catalog) == _expected(fmt, a)
    if mode == "error":
        with pytest.raises(scoring.errors.ScoringError, match="already"):
            run(two, mode, 1000)
        assert _read(fmt, url, catalog) == _expected(fmt, a), "a refused run changes nothing"
        return
    b = run(two, mode, 1000)
    if mode == "append":
        expected = _expected(fmt, a, b)
    elif mode == "overwrite":
        expected = _expected(fmt, b)
    else:  # the second run's partitions replaced, the first's others kept
        touched = {c for _, c in _expected(fmt, b)}
        expected = {r for r in _expected(fmt, a) if r[1] not in touched} | _expected(fmt, b)
    assert _read(fmt, url, catalog) == expected


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("point", ["placed a new file", "committed"])
def test_a_kill_at_each_step_then_the_rerun_replaces_escaped_partitions_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, fmt: str, point: str
) -> None:
    """``overwrite_partitions`` over values that need escaping, killed after each step of
    its publication and run again: the table's reader sees each row once, the first
    run's other partitions kept."""
    from scoring._formats.publication import Publication

    catalog = sql_catalog("kills", tmp_path, monkeypatch) if fmt == "iceberg" else None
    url = f"delta:{tmp_path / 'scores'}" if fmt == "delta" else "iceberg:kills.sales.scores"

    def run(values: list[str | None], mode: str | None, first_id: int) -> pa.Table:
        return _scored(tmp_path, url, model, values, mode=mode, first_id=first_id)

    first = run([*ESCAPED, None], None, 0)
    step = Publication.step

    class Killed(BaseException):
        pass

    def killed(self: Publication, done: str) -> None:
        step(self, done)
        if done.startswith(point):  # the table's version (Delta), or snapshot (Iceberg)
            raise Killed()

    second_values = [*ESCAPED[:6], None]
    with monkeypatch.context() as patched:
        patched.setattr(Publication, "step", killed)
        with pytest.raises(Killed):
            run(second_values, "overwrite_partitions", 1000)
    second = run(second_values, "overwrite_partitions", 1000)
    touched = {c for _, c in _expected(fmt, second)}
    expected = {r for r in _expected(fmt, first) if r[1] not in touched} | _expected(fmt, second)
    assert _read(fmt, url, catalog) == expected


@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(values=st.lists(VALUES, min_size=1, max_size=4, unique=True))
def test_a_folder_output_keeps_the_input_s_partitions_as_pyarrow_reads_them(
    tmp_path_factory: pytest.TempPathFactory, model: str, values: list[str]
) -> None:
    """A Parquet folder output mirrors the input's ``key=value`` folders: read back with
    Hive partitioning, every row has its own partition value (escaped ones included)."""
    root = tmp_path_factory.mktemp("folder")
    table = _features(root / "features", [*dict.fromkeys([*values, *ESCAPED[:6], None])],
                      first_id=0)  # fmt: skip
    scoring.score_parquet(root / "features", root / "scores", model, keep=["id"],
                          progress=False)  # fmt: skip
    back = pads.dataset(root / "scores", format="parquet", partitioning="hive").to_table()
    got = set(zip(back.column("id").to_pylist(), back.column("city").to_pylist(), strict=True))
    assert got == _expected("folder", table) and back.num_rows == table.num_rows


@pytest.mark.parametrize("source", ["folder", "delta"])
def test_the_spark_engine_reads_the_partition_values_the_local_engine_reads(
    tmp_path: Path, model: str, source: str
) -> None:
    """Found from outside: Spark's own partition discovery decodes a folder's escapes one
    character at a time, so a value like ``é`` (a folder ``city=%C3%A9``) was scored as
    ``Ã©`` on the Spark engine and as ``é`` on the others.  (Ray's workers read with the
    product's own reader, the local engine's.)"""
    import shutil as sh

    pytest.importorskip("pyspark")
    if sh.which("java") is None:
        pytest.skip("Spark needs a Java runtime")
    # (A Delta input's empty value is NULL; written by delta-rs in a folder ``city=``,
    # which a folder output mirrors: not this test's point.)
    values = [*ESCAPED, "", None] if source == "folder" else [*ESCAPED, None]
    table = _features(tmp_path / "features", values, first_id=0)
    url = str(tmp_path / "features")
    if source == "delta":
        deltalake.write_deltalake(str(tmp_path / "table"), table, partition_by=["city"])
        url = str(tmp_path / "table")
    got = {}
    for engine, options in (("local", {}), ("spark", {"master": "local[1]"})):
        out = tmp_path / f"by-{engine}"
        scoring.score_parquet(url, out, model, keep=["id", "city"], engine=engine,
                              engine_options=options, progress=False)  # fmt: skip
        back = pads.dataset(out, format="parquet", partitioning="hive").to_table()
        got[engine] = sorted(zip(back.column("id").to_pylist(),
                                 back.column("city").to_pylist(), strict=True))  # fmt: skip
    if source == "delta":  # the input as its own reader reads it
        read = deltalake.DeltaTable(url).to_pyarrow_table(columns=["id", "city"])
    else:
        read = pads.dataset(url, format="parquet", partitioning="hive").to_table()
    want = sorted(zip(read.column("id").to_pylist(), read.column("city").to_pylist(),
                      strict=True))  # fmt: skip
    assert got["local"] == want
    assert got["spark"] == want

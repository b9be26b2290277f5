"""Row filters against Spark SQL itself: generated predicates over a typed table (NULL,
NaN, +-0.0, +-inf, int64 extremes, decimals, strings with ``% _ ' \\``, tabs, newlines
and non-ASCII, dates, timestamps, booleans), each answered by Spark (local, ANSI on,
session time zone UTC, Parquet pushdown off) and by the product's filter as the local
and Ray engines apply it and as the Spark engine does (Arrow batches from Spark).

Every predicate keeps exactly Spark's rows, or is refused by name before a row is read
(:class:`~scoring.errors.FilterError`), or fails on a row where Spark's fails too.
Found from outside before: 47 of 310 predicates kept other rows (NOT IN with NULL,
IF(NULL, ...), NaN ordering, round half up, decimal literals, trim, substring, upper).
"""

from __future__ import annotations

import datetime
import logging
import random
import shutil
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring._engines.spark import InsideFilter
from scoring._where import RowFilter
from scoring.errors import FilterError

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java")
NAN, INF = float("nan"), float("inf")
PREDICATES = 640


def _table() -> pa.Table:
    day, noon = datetime.date(2026, 1, 1), datetime.datetime(2026, 1, 1, 12)
    rows = [
        (0, 1, 0.0, 0.0, "19.99", "a", True, day, noon),
        (1, -1, -0.0, -0.0, "1.40", "ß", False, day, noon),
        (2147483647, 9223372036854775807, NAN, NAN, "0.70", "SS", None, None, None),
        (-2147483648, -9223372036854775808, INF, INF, "-3.25", "", True, day, noon),
        (None, None, None, None, None, None, None, None, None),
        (3, 3, -INF, -INF, "1.50", " a ", False, datetime.date(2025, 12, 31),
         datetime.datetime(2025, 12, 31, 23, 59, 59)),
        (100, 100, 1.5, 1.5, "2.50", "a\tb", True, datetime.date(2026, 2, 28),
         datetime.datetime(2026, 2, 28, 0, 0, 1)),
        (2, 2, 2.5, 2.5, "0.10", "50%", None, day, noon),
        (7, 7, 0.1, 0.1, "2.68", "it's", False, day, noon),
        (5, 5, 2.675, 2.675, "0.00", "back\\slash", True, day, noon),
        (-7, -7, -2.5, -2.5, "-0.50", "line\nbreak", True, day, noon),
        (10, 10, 1e3, 1e3, "1000.00", "é_x", False, day, noon),
        (4, 4, 0.3, 0.3, "0.30", "A", None, day, noon),
    ]  # fmt: skip
    names = ["i", "n", "x", "f", "d", "s", "b", "dt", "ts"]
    columns = list(zip(*rows, strict=True))
    types = [pa.int32(), pa.int64(), pa.float64(), pa.float32(), pa.decimal128(10, 2),
             pa.string(), pa.bool_(), pa.date32(), pa.timestamp("us", tz="UTC")]  # fmt: skip
    arrays = [pa.array([Decimal(v) if v is not None else None for v in c] if n == "d" else c, t)
              for n, c, t in zip(names, columns, types, strict=True)]  # fmt: skip
    table = pa.table(dict(zip(names, arrays, strict=True)))
    return table.append_column("id", pa.array(range(len(rows)), pa.int64()))


# -- the predicates ----------------------------------------------------------------------

NUMERIC = {"i": ["0", "1", "-1", "3", "2147483647", "-2147483648", "2.5", "1e3", "100"],
           "n": ["0", "3", "-9223372036854775808", "9223372036854775807", "1.5", "7"],
           "x": ["0.0", "-0.0", "1.5", "2.5", "0.1", "0.3", "1e3", "CAST('NaN' AS DOUBLE)",
                 "CAST('Infinity' AS DOUBLE)", "2", "-2.5", "1.5D"],
           "f": ["0.0", "1.5", "2.5F", "CAST('NaN' AS FLOAT)", "0.1"],
           "d": ["19.99", "1.4", "1.40", "0.7", "0", "-3.25", "2.5", "1000"]}  # fmt: skip
STRINGS = ["'a'", "'ß'", "'SS'", "''", "' a '", "'a\tb'", "'50%'", "'it''s'", "'it\\'s'",
           "'back\\\\slash'", "'é_x'", "'A'", "'ss'", "'line\nbreak'"]  # fmt: skip
PATTERNS = ["'a%'", "'%a%'", "'_'", "'%\\%'", "'50\\%'", "'é\\_x'", "'%s'", "'A'", "'%'",
            "'back\\\\\\\\slash'", "'a\\tb'", "'%\\_%'"]  # fmt: skip
OPS = ["=", "!=", "<>", "<", "<=", ">", ">=", "<=>", "=="]


def _number(rng: random.Random) -> tuple[str, str]:
    """A numeric expression and one of its column's literals."""
    column = rng.choice(sorted(NUMERIC))
    lit = rng.choice(NUMERIC[column])
    other = rng.choice(sorted(NUMERIC))
    forms = [
        column, f"{column} + {lit}", f"{column} - 1", f"{column} * 0.1", f"{column} / 2",
        f"-{column}", f"abs({column})", f"round({column}, 1)", f"round({column})",
        f"CAST({column} AS DOUBLE)", f"CAST({column} AS DECIMAL(6, 1))",
        f"CAST({column} AS BIGINT)", f"coalesce({column}, {lit})", f"greatest({column}, {lit})",
        f"least({column}, {lit}, NULL)", f"IF(b, {column}, {lit})",
        f"CASE WHEN {column} > {lit} THEN {column} END",
        f"CASE WHEN b THEN 1 WHEN {column} < 0 THEN 2 ELSE 3 END", f"{column} + {other}",
        f"{column} * {other}", f"CAST({column} AS INT)", f"{column} / 0",
        f"CASE WHEN {column} <> 0 THEN 10 / {column} END", f"IF({column} = 0, 0, 1 / {column})",
        f"coalesce({column}, 1 / 0)", f"CASE WHEN b THEN {column} * {other} ELSE 0 END",
    ]  # fmt: skip
    return rng.choice(forms), lit


def _string(rng: random.Random) -> str:
    s = "s"
    lit = rng.choice(STRINGS)
    forms = [
        f"{s} {rng.choice(OPS)} {lit}", f"{s} LIKE {rng.choice(PATTERNS)}",
        f"{s} NOT LIKE {rng.choice(PATTERNS)}", f"{s} ILIKE {rng.choice(PATTERNS)}",
        f"upper({s}) = {lit}", f"lower({s}) = {lit}", f"trim({s}) = {lit}",
        f"length({s}) {rng.choice(OPS[:8])} {rng.randint(0, 3)}",
        f"substring({s}, {rng.randint(-3, 3)}) = {lit}",
        f"substring({s}, {rng.randint(-3, 3)}, {rng.randint(-1, 3)}) = {lit}",
        f"{s} IN ({lit}, {rng.choice(STRINGS)})", f"{s} NOT IN ({lit}, NULL)",
        f"coalesce({s}, {lit}) = {lit}", "CAST(i AS STRING) = '1'", f"{s} = `s`",
        f"\"{s}\" = {lit}", f"CASE {s} WHEN {lit} THEN 1 ELSE 0 END = 1",
        f"{s} IN ('a', 1)", f"{s} > 1",
    ]  # fmt: skip
    return rng.choice(forms)


def _temporal(rng: random.Random) -> str:
    forms = [
        "dt >= DATE '2026-01-01'", "dt = '2026-01-01'", "dt < '2026-02-01'",
        "year(dt) = 2026", "month(dt) = 12", "day(dt) = 31", "year(ts) = 2025",
        "month(ts) = 2", "ts < TIMESTAMP '2026-01-01 12:00:00'",
        "ts >= TIMESTAMP '2025-12-31 23:59:59'", "dt BETWEEN DATE '2025-12-01' AND '2026-01-31'",
        "ts > DATE '2026-01-01'", "dt <=> NULL", "greatest(dt, DATE '2026-01-15') > dt",
        "CAST(ts AS DATE) = dt", "CAST(dt AS TIMESTAMP) < ts", "dt IN (DATE '2026-01-01', NULL)",
    ]  # fmt: skip
    return rng.choice(forms)


def _atom(rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.45:
        expression, lit = _number(rng)
        kind = rng.random()
        if kind < 0.55:
            return f"{expression} {rng.choice(OPS)} {rng.choice([lit, *NUMERIC['x'][:4]])}"
        column = rng.choice(sorted(NUMERIC))
        values = ", ".join(rng.sample(NUMERIC[column], 2) + (["NULL"] if rng.random() < 0.4
                                                              else []))  # fmt: skip
        return rng.choice([
            f"{expression} IN ({values})", f"{expression} NOT IN ({values})",
            f"NOT ({expression} IN ({values}))", f"({expression} IN ({values})) IS NULL",
            f"{expression} BETWEEN {lit} AND {rng.choice(NUMERIC[column])}",
            f"{expression} NOT BETWEEN {lit} AND {rng.choice(NUMERIC[column])}",
            f"{expression} IS NULL", f"{expression} IS NOT NULL",
        ])  # fmt: skip
    if choice < 0.7:
        return _string(rng)
    if choice < 0.82:
        return _temporal(rng)
    return rng.choice([
        "b", "NOT b", "b IS TRUE", "b IS NOT FALSE", "b = TRUE", "b <=> NULL",
        "IF(b, 1, 0) = 0", "IF(NULL, 1, 0) = 0", "NULL OR i > 1", "i > 1 AND NULL",
        "COALESCE(NULL, i) = 1", "CASE WHEN i > 1 THEN 1 END = 1", "b AND x > 0",
        "CAST(b AS INT) = 1", "CAST(i AS BOOLEAN)", "i = '1'", "TRY_CAST(i AS BIGINT) = 1",
        "TRY_CAST(s AS INT) = 1", "i % 2 = 0", "s RLIKE 'a'", "x = NaN",
    ])  # fmt: skip


def predicates(count: int, seed: int = 66) -> list[str]:
    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < count:
        atom = _atom(rng)
        shape = rng.random()
        if shape < 0.2:
            atom = f"({atom}) {rng.choice(['AND', 'OR'])} ({_atom(rng)})"
        elif shape < 0.3:
            atom = f"NOT ({atom})"
        if atom not in found:
            found.append(atom)
    return found


# -- the engines ---------------------------------------------------------------------------


def _spark_rows(spark: Any, texts: list[str]) -> dict[str, set[int] | None]:
    """Each predicate's rows as Spark SQL keeps them (None: Spark refused or failed).

    Many predicates in one query; where one fails, Spark's error names its place in the
    query (its query context), and that one is answered None and the rest asked again;
    an error that names no place splits the query in halves."""
    answers: dict[str, set[int] | None] = {}

    def run(chunk: list[str]) -> None:
        columns, spans, at = [], [], len("SELECT id, ")
        for i, text in enumerate(chunk):
            columns.append(f"({text}) AS c{i}")
            spans.append((at, at + len(columns[-1])))
            at += len(columns[-1]) + 2
        try:
            rows = spark.sql(f"SELECT id, {', '.join(columns)} FROM t").collect()
        except Exception as exc:
            starts = [c.startIndex() for c in getattr(exc, "getQueryContext", list)()]
            failed = {i for i, (a, b) in enumerate(spans) for s in starts if a <= s < b}
            if len(chunk) == 1 or len(failed) == 1:
                answers[chunk[min(failed, default=0)]] = None
                rest = [t for i, t in enumerate(chunk) if i not in failed] if failed else []
            else:
                middle = len(chunk) // 2
                run(chunk[:middle])
                rest = chunk[middle:]
            if rest:
                run(rest)
            return
        for i, text in enumerate(chunk):
            answers[text] = {r["id"] for r in rows if r[f"c{i}"] is True}

    for start in range(0, len(texts), 64):
        run(texts[start : start + 64])
    return answers


def _product_rows(table: pa.Table, text: str) -> set[int] | str | None:
    """The rows the product's filter keeps (None: refused or failed, by name; a string:
    an exception that is not the product's own, which the test reports)."""
    try:
        mask = RowFilter(text).mask(table)
    except FilterError:
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return set(table.filter(mask).column("id").to_pylist())


def _masks(texts: list[str]) -> Callable[[Any], Iterator[pa.RecordBatch]]:
    """The Spark engine's filter (:class:`scoring._engines.spark.InsideFilter` applies
    this mask to each Arrow batch a task reads), one column per predicate.  A nested
    function, which Spark ships by value: its workers need not import this module (a
    session another test started may run them where ``tests`` is not importable)."""

    def masks(batches: Any) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = {"id": batch.column("id")}
            for i, text in enumerate(texts):
                columns[f"c{i}"] = RowFilter(text).mask(batch)
            yield pa.RecordBatch.from_pydict(columns)

    return masks


def test_every_predicate_keeps_spark_s_rows_or_is_refused_by_name(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from scoring.spark import local_session

    table = _table()
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4)
    spark = local_session("local[1]", conf={"spark.sql.shuffle.partitions": "1"})
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # Spark's refusals
    settings = {"spark.sql.ansi.enabled": "true", "spark.sql.session.timeZone": "UTC",
                "spark.sql.parquet.filterPushdown": "false"}  # fmt: skip
    before = {k: spark.conf.get(k, None) for k in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        spark.read.parquet(str(tmp_path / "t.parquet")).createOrReplaceTempView("t")
        texts = predicates(PREDICATES)
        theirs = _spark_rows(spark, texts)
        local = pq.read_table(tmp_path / "t.parquet")
        ours = {t: _product_rows(local, t) for t in texts}
        accepted = [t for t in texts if ours[t] is not None]
        frame = spark.read.parquet(str(tmp_path / "t.parquet"))
        schema = "id long, " + ", ".join(f"c{i} boolean" for i in range(len(accepted)))
        on_spark = frame.mapInArrow(_masks(accepted), schema).collect()
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    raw = [(t, ours[t]) for t in texts if isinstance(ours[t], str)]
    assert not raw, f"{len(raw)} raise exceptions not the product's: {raw[:5]}"
    differ = [(t, None if theirs[t] is None else sorted(theirs[t] or []),
               sorted(ours[t] or [])) for t in texts
              if ours[t] is not None and ours[t] != theirs[t]]  # fmt: skip
    assert not differ, f"{len(differ)} of {len(texts)} keep other rows: {differ[:12]}"
    engine = {t: {r["id"] for r in on_spark if r[f"c{i}"]} for i, t in enumerate(accepted)}
    assert all(engine[t] == ours[t] for t in accepted), "the Spark engine keeps the same rows"
    inside = {t: {r for b in InsideFilter(t)(iter(local.to_batches(max_chunksize=7)))
                  for r in b.column("id").to_pylist()} for t in accepted}  # fmt: skip
    assert inside == {t: ours[t] for t in accepted}, "the engine's filter class keeps them"
    kept = [t for t in accepted if theirs[t] is not None]
    assert len(texts) >= 500 and len(kept) >= 0.7 * len(texts), (len(kept), len(texts))

"""Row filters in SQL, as a Spark or warehouse user writes a WHERE clause, with Spark
SQL's meaning.

``where = "region IN ('EU', 'CH') AND signup >= DATE '2026-01-01'"``.  sqlglot parses the
condition (Spark's dialect); :mod:`scoring._where.translate` turns it, over the input's
schema, into one pyarrow dataset expression, which Arrow evaluates on each batch and a
Parquet reader pushes down to its row groups' statistics.  Every engine applies that one
expression, so engines cannot disagree, and it keeps exactly the rows Spark SQL keeps
(ANSI mode, session time zone UTC; the suite checks it against Spark itself).  What
translates:

- comparisons ``= == != <> < <= > >=`` and ``<=>`` (null-safe), ``[NOT] IN (...)``,
  ``[NOT] BETWEEN``, ``[NOT] LIKE`` / ``ILIKE``, ``IS [NOT] NULL``, ``IS [NOT] TRUE``,
  ``AND``, ``OR``, ``NOT``, parentheses;
- ``CASE WHEN ... THEN ... ELSE ... END``, ``IF(c, a, b)``, ``COALESCE``, ``+ - * /``;
- literals: numbers (``1`` an INT, ``1.5`` a DECIMAL, ``1e3`` a DOUBLE, as Spark types
  them), 'strings', TRUE, FALSE, NULL, ``DATE 'YYYY-MM-DD'``, ``TIMESTAMP 'YYYY-MM-DD
  HH:MM:SS'`` (UTC), and ``CAST(x AS type)``;
- functions: ``lower``, ``upper``, ``length``, ``trim``, ``substring``, ``abs``,
  ``round``, ``greatest``, ``least``, ``year``, ``month``, ``day``.

Columns are bare names or quoted with backticks; a double-quoted name is a string, as in
Spark.  Text that is no SQL condition is a :class:`~scoring.errors.ConfigError`; anything
else this module cannot give Spark's meaning is refused over the input's schema, before
a row is read (:class:`~scoring.errors.FilterError`, naming the construct), as is a
comparison Spark makes only through a cast that can fail (a STRING against a number).
As in SQL, a row whose condition is NULL is outside.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import sqlglot
from sqlglot import exp

from ..errors import ConfigError, FilterError
from .translate import Translator

__all__ = ["SUPPORTED", "RowFilter"]

SUPPORTED = ("comparisons, IN, BETWEEN, LIKE, IS NULL, AND/OR/NOT, CASE, IF, COALESCE, "
             "arithmetic, CAST, DATE/TIMESTAMP literals, lower/upper/length/trim/substring/"
             "abs/round/greatest/least/year/month/day")  # fmt: skip
#: What Arrow raises for an expression it cannot bind or run on a batch's types (the
#: expression itself never fails: Spark's ANSI failures are its ``failures``).
_FAILURES = (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError)


class RowFilter:
    """A parsed ``where``: :attr:`columns` (the input columns it reads), the Arrow
    expression it is over a schema (:meth:`bind`) and :meth:`mask` per batch.  Parsing
    refuses what no input could take; binding, what this input's types cannot."""

    def __init__(self, text: str):
        self.text = text
        try:
            self.tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError as exc:
            error = exc.errors[0] if exc.errors else {}
            where = f" at character {error['col']}" if error.get("col") else ""
            said = str(error.get("description", exc)).split(" for <class")[0]
            raise self._unreadable(f"cannot be read{where}: {said}") from None
        except sqlglot.errors.SqlglotError as exc:
            raise self._unreadable(f"cannot be read: {str(exc).splitlines()[0]}") from None
        if isinstance(self.tree, exp.Alias):  # "a = 1 b": SQL reads b as a name for a = 1
            node = self.tree
            raise self._unreadable(f"unexpected {node.alias!r} after {node.this.sql()!r}")
        self.columns: list[str] = list(dict.fromkeys(
            c.name for c in self.tree.find_all(exp.Column)))  # fmt: skip
        for column in self.tree.find_all(exp.Column):
            if column.table:
                raise self._unreadable(f"{column.sql()}: name the column alone, without a table")
        self._bound: dict[pa.Schema, tuple[pc.Expression, list[tuple[pc.Expression, str]]]] = {}

    def bind(self, schema: pa.Schema) -> pc.Expression:
        """The filter over ``schema``: one Arrow expression, which never fails (refused by
        name where it cannot mean what Spark SQL means on these types)."""
        return self._binding(schema)[0]

    def _binding(
        self, schema: pa.Schema
    ) -> tuple[pc.Expression, list[tuple[pc.Expression, str]]]:  # fmt: skip
        """The expression, and where Spark's evaluation of it fails (and why)."""
        if schema not in self._bound:
            translator = Translator(schema, self._refused)
            expression = translator.condition(self.tree)  # type: ignore[arg-type]
            self._check(expression, schema)
            self._bound[schema] = (expression, translator.failures)
        return self._bound[schema]

    def _check(self, expression: pc.Expression, schema: pa.Schema) -> None:
        """Evaluated once on a row of nulls: what fails on every row (a cast of a
        constant, a type Arrow cannot compare) is refused before anything is read."""
        nulls = pa.table({f.name: pa.nulls(1, f.type) for f in schema})
        try:
            pads.dataset(nulls).to_table(columns={"inside": expression})
        except _FAILURES as exc:
            raise self._refused(f"cannot be evaluated: {str(exc).splitlines()[0]}") from None

    @property
    def expression(self) -> pc.Expression:
        """The expression over the only schema bound (for callers that bound one)."""
        if len(self._bound) != 1:
            raise RuntimeError("bind the filter to the input's schema first")
        return next(iter(self._bound.values()))[0]

    def mask(self, batch: pa.Table | pa.RecordBatch) -> pa.Array:
        """Per row of ``batch``, whether it is inside (a null condition is outside)."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        expression, failures = self._binding(table.schema)
        columns = {"inside": expression, **{f"f{i}": f for i, (f, _) in enumerate(failures)}}
        try:
            found = pads.dataset(table).to_table(columns=columns)
        except _FAILURES as exc:
            raise self._refused(f"cannot be evaluated: {str(exc).splitlines()[0]}") from None
        for i, (_, why) in enumerate(failures):
            if pc.any(found.column(f"f{i}")).as_py():
                raise FilterError(
                    f"row filter {self.text!r} fails on a row of the input as Spark SQL's ANSI "
                    f"mode does ({why}); guard it where it applies (e.g. CASE WHEN n <> 0 "
                    "THEN x / n END), or fix the rows"
                )
        return pc.fill_null(found.column("inside").combine_chunks(), False)

    def _unreadable(self, what: str) -> ConfigError:
        """Text that is no SQL condition at all: a usage mistake, whatever the input."""
        return ConfigError(f"row filter {self.text!r}: {what}; write SQL as in a WHERE clause, "
                           "e.g. region IN ('EU', 'CH') AND tenure >= 12")  # fmt: skip

    def _refused(self, what: str) -> FilterError:
        return FilterError(
            f"row filter {self.text!r}: {what}; write SQL as Spark reads it, e.g. "
            f"region IN ('EU', 'CH') AND tenure >= 12 (supported: {SUPPORTED})"
        )

"""Row filters in SQL, as a Spark or warehouse user writes a WHERE clause.

``where = "region IN ('EU', 'CH') AND signup >= DATE '2026-01-01'"``.  sqlglot parses the
condition (Spark's dialect); it is then translated into one pyarrow dataset expression,
which Arrow evaluates on each batch and which a Parquet reader can push down to its row
groups' statistics.  What translates:

- comparisons ``= == != <> < <= > >=`` and ``<=>`` (null-safe), ``[NOT] IN (...)``,
  ``[NOT] BETWEEN``, ``[NOT] LIKE`` / ``ILIKE``, ``IS [NOT] NULL``, ``IS [NOT] TRUE``,
  ``AND``, ``OR``, ``NOT``, parentheses;
- ``CASE WHEN ... THEN ... ELSE ... END``, ``IF(c, a, b)``, ``COALESCE``, ``+ - * /``;
- literals: numbers, 'strings', TRUE, FALSE, NULL, ``DATE '...'``, ``TIMESTAMP '...'``,
  and ``CAST(x AS type)``;
- functions: ``lower``, ``upper``, ``length``, ``trim``, ``substring``, ``abs``,
  ``round``, ``greatest``, ``least``, ``year``, ``month``, ``day``.

Columns are bare names or quoted with backticks or double quotes.  Anything else is
refused when the filter is read, naming the construct.  As in SQL, a comparison with a
null is not true: such a row is outside the filter.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import sqlglot
from sqlglot import exp

from .errors import ConfigError, InputError

__all__ = ["RowFilter", "SUPPORTED"]

SUPPORTED = ("comparisons, IN, BETWEEN, LIKE, IS NULL, AND/OR/NOT, CASE, IF, COALESCE, "
             "arithmetic, CAST, DATE/TIMESTAMP literals, lower/upper/length/trim/substring/"
             "abs/round/greatest/least/year/month/day")  # fmt: skip

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    # SQL's / divides as floats, where Arrow's divides integers as integers.
    exp.Div: lambda a, b: pc.divide(a.cast(pa.float64()), b),
}
_FUNCTIONS: dict[type, Callable[..., Any]] = {
    exp.Lower: pc.utf8_lower,
    exp.Upper: pc.utf8_upper,
    exp.Length: pc.utf8_length,
    exp.Trim: pc.utf8_trim_whitespace,
    exp.Abs: pc.abs,
    exp.Year: pc.year,
    exp.Month: pc.month,
    exp.Day: pc.day,
}
_TYPES = {
    "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "DECIMAL": pa.float64(),
    "INT": pa.int32(), "BIGINT": pa.int64(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
    "BOOLEAN": pa.bool_(), "TEXT": pa.string(), "VARCHAR": pa.string(), "CHAR": pa.string(),
    "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"), "TIMESTAMPTZ": pa.timestamp("us"),
    "TIMESTAMPNTZ": pa.timestamp("us"),
}  # fmt: skip


class RowFilter:
    """A parsed ``where``: :attr:`expression` (a pyarrow dataset expression),
    :attr:`columns` (the input columns it reads) and :meth:`mask` per batch."""

    def __init__(self, text: str):
        self.text = text
        self.columns: list[str] = []
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError as exc:
            error = exc.errors[0] if exc.errors else {}
            where = f" at character {error['col']}" if error.get("col") else ""
            said = str(error.get("description", exc)).split(" for <class")[0]
            raise self._refused(f"cannot be read{where}: {said}") from None
        except sqlglot.errors.SqlglotError as exc:
            raise self._refused(f"cannot be read: {str(exc).splitlines()[0]}") from None
        self.expression: pc.Expression = self._value(tree)

    def mask(self, batch: pa.Table | pa.RecordBatch) -> pa.Array:
        """Per row of ``batch``, whether it is inside (a null condition is outside)."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        try:
            inside = pads.dataset(table).to_table(columns={"inside": self.expression})
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputError(
                f"row filter {self.text!r} cannot be evaluated on the input: "
                f"{str(exc).splitlines()[0]}; compare each column with a value of its type"
            ) from None
        column = inside.column("inside").combine_chunks()
        if not pa.types.is_boolean(column.type):
            raise InputError(f"row filter {self.text!r} is not a condition (true or false)")
        return pc.fill_null(column, False)

    # -- translation -------------------------------------------------------------

    def _value(self, node: Any) -> Any:  # a node of sqlglot's tree
        if isinstance(node, exp.Alias):  # "a = 1 b": SQL reads b as a name for a = 1
            raise self._refused(f"unexpected {node.alias!r} after {node.this.sql()!r}")
        if node.args.get("negate"):  # "x NOT LIKE 'a%'" is one node, negated
            plain = node.copy()
            plain.set("negate", None)
            return self._not(plain)
        if isinstance(node, exp.Paren):
            return self._value(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, (exp.Literal, exp.Boolean, exp.Null, exp.Cast)) and _constant(node):
            return pc.scalar(self._literal(node))
        if isinstance(node, exp.And):
            return self._value(node.this) & self._value(node.expression)
        if isinstance(node, exp.Or):
            return self._value(node.this) | self._value(node.expression)
        if isinstance(node, exp.Not):
            return self._not(node.this)
        if type(node) in _COMPARE:
            return _COMPARE[type(node)](self._value(node.this), self._value(node.expression))
        if type(node) in _ARITHMETIC:
            return _ARITHMETIC[type(node)](self._value(node.this), self._value(node.expression))
        translate = getattr(self, f"_{type(node).__name__.lower()}", None)
        if translate is not None:
            return translate(node)
        if type(node) in _FUNCTIONS:
            return _FUNCTIONS[type(node)](self._value(_date_of(node.this)))
        raise self._refused(f"{_shown(node)} is not supported here (supported: {SUPPORTED})")

    def _column(self, node: exp.Column) -> Any:
        if node.table:
            raise self._refused(f"{node.sql()}: name the column alone, without a table")
        self.columns.append(node.name)
        return pc.field(node.name)

    def _literal(self, node: exp.Expression) -> Any:
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Cast):
            return self._typed(node)
        if isinstance(node, exp.Neg):
            return -self._literal(node.this)
        if node.is_string:
            return node.this
        text = node.this
        return int(text) if text.lstrip("-").isdigit() else float(text)

    def _typed(self, node: exp.Cast) -> Any:
        """``DATE '2026-11-01'``, ``TIMESTAMP '...'``, ``CAST(1 AS DOUBLE)``: the value."""
        value, kind = self._literal(node.this), node.to.this.name
        try:
            if kind == "DATE":
                return datetime.date.fromisoformat(str(value))
            if kind.startswith("TIMESTAMP"):
                return datetime.datetime.fromisoformat(str(value))
            return pa.scalar(value).cast(self._type(node)).as_py()
        except (ValueError, pa.ArrowInvalid) as exc:
            raise self._refused(f"{node.sql()}: {exc}") from None

    def _type(self, node: exp.Cast) -> pa.DataType:
        kind = node.to.this.name
        if kind not in _TYPES:
            raise self._refused(f"CAST to {kind} is not supported (one of {sorted(_TYPES)})")
        return _TYPES[kind]

    def _not(self, inner: exp.Expression) -> Any:
        if isinstance(inner, exp.In):  # SQL: a null is NOT IN nothing; Arrow says true
            value = self._value(inner.this)
            return value.is_valid() & ~self._in(inner)
        return ~self._value(inner)

    def _in(self, node: exp.In) -> Any:
        if node.args.get("query") or not all(_constant(v) for v in node.expressions):
            raise self._refused(f"{node.sql()}: IN takes a list of values")
        values = [self._literal(v) for v in node.expressions]
        return self._value(node.this).isin([v for v in values if v is not None])

    def _between(self, node: exp.Between) -> Any:
        value = self._value(node.this)
        return (value >= self._value(node.args["low"])) & (value <= self._value(node.args["high"]))

    def _like(self, node: exp.Like, *, ignore_case: bool = False) -> Any:
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise self._refused(f"{node.sql()}: LIKE takes a 'pattern'")
        return pc.match_like(self._value(node.this), pattern.this, ignore_case=ignore_case)

    def _ilike(self, node: exp.ILike) -> Any:
        return self._like(node, ignore_case=True)  # type: ignore[arg-type]

    def _is(self, node: exp.Is) -> Any:
        value, what = self._value(node.this), node.expression
        if isinstance(what, exp.Null):
            return value.is_null()
        if isinstance(what, exp.Boolean):  # IS TRUE / IS FALSE: never null
            return pc.coalesce(value == pc.scalar(bool(what.this)), pc.scalar(False))
        raise self._refused(f"{node.sql()}: IS takes NULL, TRUE or FALSE")

    def _nullsafeeq(self, node: exp.NullSafeEQ) -> Any:
        a, b = self._value(node.this), self._value(node.expression)
        return (a.is_null() & b.is_null()) | pc.coalesce(a == b, pc.scalar(False))

    def _case(self, node: exp.Case) -> Any:
        if node.this is not None:  # CASE x WHEN 1 THEN ...: each WHEN compared with x
            subject = node.this
            ifs = [
                (exp.EQ(this=subject, expression=i.this), i.args["true"]) for i in node.args["ifs"]
            ]
        else:
            ifs = [(i.this, i.args["true"]) for i in node.args["ifs"]]
        conditions = [self._value(c) for c, _ in ifs]
        values = [self._value(v) for _, v in ifs]
        default = node.args.get("default")
        names = [f"c{i}" for i in range(len(conditions))]
        otherwise = self._value(default) if default is not None else pc.scalar(None)
        return pc.case_when(pc.make_struct(*conditions, field_names=names), *values, otherwise)

    def _if(self, node: exp.If) -> Any:
        false = node.args.get("false")
        otherwise = self._value(false) if false is not None else pc.scalar(None)
        return pc.if_else(self._value(node.this), self._value(node.args["true"]), otherwise)

    def _coalesce(self, node: exp.Coalesce) -> Any:
        return pc.coalesce(self._value(node.this), *[self._value(e) for e in node.expressions])

    def _greatest(self, node: exp.Greatest) -> Any:
        return pc.max_element_wise(
            self._value(node.this), *[self._value(e) for e in node.expressions]
        )

    def _least(self, node: exp.Least) -> Any:
        return pc.min_element_wise(
            self._value(node.this), *[self._value(e) for e in node.expressions]
        )

    def _round(self, node: exp.Round) -> Any:
        digits = node.args.get("decimals")
        return pc.round(self._value(node.this), self._literal(digits) if digits is not None else 0)

    def _substring(self, node: exp.Substring) -> Any:
        start, length = node.args.get("start"), node.args.get("length")
        if not (start is not None and _constant(start)) or (
            length is not None and not _constant(length)
        ):
            raise self._refused(f"{node.sql()}: substring takes numbers for start and length")
        first = max(int(self._literal(start)) - 1, 0)  # SQL counts from 1
        stop = None if length is None else first + int(self._literal(length))
        return pc.utf8_slice_codeunits(self._value(node.this), first, stop)

    def _cast(self, node: exp.Cast) -> Any:
        return self._value(node.this).cast(self._type(node))

    _trycast = _cast

    def _neg(self, node: exp.Neg) -> Any:
        return pc.negate(self._value(node.this))

    def _refused(self, what: str) -> ConfigError:
        return ConfigError(
            f"row filter {self.text!r}: {what}; write SQL as in a WHERE clause, e.g. "
            "region IN ('EU', 'CH') AND tenure >= 12"
        )


def _constant(node: exp.Expression) -> bool:
    """A literal, or a literal cast to a type (``DATE '...'``)."""
    if isinstance(node, exp.Cast):
        return _constant(node.this)
    if isinstance(node, exp.Neg):
        return _constant(node.this)
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null))


def _date_of(node: exp.Expression) -> exp.Expression:
    """``year(d)``: Spark's reading wraps ``d`` in a date conversion Arrow does not need."""
    return node.this if isinstance(node, (exp.TsOrDsToDate, exp.TsOrDsToTimestamp)) else node


def _shown(node: exp.Expression) -> str:
    return f"{type(node).__name__.upper()} ({node.sql(dialect='spark')[:40]})"

"""A row filter's SQL (sqlglot's tree, Spark's dialect) translated into one Arrow
expression over an input's schema, with Spark SQL's meaning (ANSI mode, session time
zone UTC):

- three-valued logic: ``x IN (1, NULL)`` is NULL where x is not 1, so ``NOT IN`` keeps
  nothing there; ``IF(NULL, a, b)`` is b; a CASE without ELSE is NULL;
- NaN is equal to NaN and larger than every number, -0.0 equals 0.0;
- literals typed as Spark types them (``1.5`` a DECIMAL, compared exactly);
- functions as Spark computes them: ``trim`` strips spaces only, ``round`` rounds half
  up, ``substring`` counts negative positions from the end, ``upper('ß')`` is 'SS';
- arithmetic that overflows, a division by zero or a cast that cannot hold its value
  fails, as ANSI Spark's does, and only on the rows Spark evaluates it on (``CASE WHEN
  n <> 0 THEN 1 / n END`` guards the division): the expression itself never fails, and
  :attr:`Translator.failures` says where it would.

What cannot be given exactly Spark's meaning is refused by name (``refuse``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .functions import Functions, constant, shown
from .types import (
    Typed,
    cast_to,
    kind,
    literal_number,
    null,
    parse_date,
    parse_timestamp,
    plain,
    sql_name,
    wider,
)  # fmt: skip

__all__ = ["Translator"]

_TRUE, _FALSE = Typed(pc.scalar(True), pa.bool_(), True), Typed(pc.scalar(False), pa.bool_(), False)
_ORDER: dict[type, str] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
}  # fmt: skip
_PLAIN: dict[str, Callable[[Any, Any], Any]] = {
    "=": pc.equal, "!=": pc.not_equal, ">": pc.greater, ">=": pc.greater_equal,
    "<": pc.less, "<=": pc.less_equal,
}  # fmt: skip


class Translator(Functions):
    """Translates nodes of one filter over ``schema``; ``refuse(what)`` makes the error.
    The functions, casts, arithmetic and CASE are :class:`~scoring._where.functions.Functions`'."""

    def __init__(self, schema: pa.Schema, refuse: Callable[[str], Exception]):
        self.schema, self._refuse = schema, refuse
        #: The rows Spark evaluates the node being translated on (None: every row):
        #: AND, OR, CASE, IF and COALESCE evaluate an operand only where the ones
        #: before it leave the result open.
        self.guard: pc.Expression | None = None
        #: Where Spark's ANSI evaluation fails (each condition within its guard), and why.
        self.failures: list[tuple[pc.Expression, str]] = []

    def refuse(self, what: str) -> Exception:
        return self._refuse(what)

    def condition(self, node: exp.Expression) -> pc.Expression:
        value = self.value(node)
        if kind(value.type) not in ("bool", "null"):
            raise self.refuse(f"is a {sql_name(value.type)}, not a condition (true or false)")
        return cast_to(value, pa.bool_()).expr

    def value(self, node: exp.Expression) -> Typed:
        if node.args.get("negate"):  # "x NOT LIKE 'a%'" is one node, negated
            plain_node = node.copy()
            plain_node.set("negate", None)
            return self._not(self.value(plain_node))
        order = _ORDER.get(type(node))
        if order is not None:
            return self.compare(order, self.value(node.this), self.value(node.expression), node)
        translate = getattr(self, f"_{type(node).__name__.lower()}", None)
        if translate is None:
            raise self.refuse(f"{shown(node)} is not supported here")
        return translate(node)

    # -- leaves ---------------------------------------------------------------------

    def _column(self, node: exp.Column) -> Typed:
        name = node.name
        if node.table or name not in self.schema.names:
            raise self.refuse(f"{node.sql()}: the input has no column {name!r}")
        source = self.schema.field(name).type
        t = plain(source)
        if t is None:
            raise self.refuse(f"column {name!r} is {source}, which Spark SQL has no type for")
        field = pc.field(name)
        return Typed(field if t == source else field.cast(t, safe=False), t)

    def _literal(self, node: exp.Literal) -> Typed:
        if node.is_string:
            return Typed(pc.scalar(node.this), pa.string(), node.this)
        try:
            return literal_number(node.this)
        except ValueError as exc:
            raise self.refuse(f"{node.sql()}: {exc}") from None

    def _boolean(self, node: exp.Boolean) -> Typed:
        return _TRUE if node.this else _FALSE

    def _null(self, node: exp.Null) -> Typed:
        return null()

    def _paren(self, node: exp.Paren) -> Typed:
        return self.value(node.this)

    def _concat(self, node: exp.Concat) -> Typed:
        """'it''s': Spark reads a doubled quote, the parser two strings joined."""
        raise self.refuse(f"{node.sql(dialect='spark')[:40]}: write a quote inside a string "
                          "as \\' ('it\\'s')")  # fmt: skip

    # -- logic ----------------------------------------------------------------------

    def fails(self, condition: pc.Expression, why: str) -> None:
        """Spark's evaluation fails where ``condition`` holds (on rows it evaluates)."""
        met = pc.coalesce(condition, pc.scalar(False))
        self.failures.append((met if self.guard is None else pc.and_kleene(self.guard, met), why))

    @contextmanager
    def only_where(self, condition: pc.Expression) -> Iterator[None]:
        """Translate what Spark evaluates only where ``condition`` is true."""
        before = self.guard
        met = pc.coalesce(condition, pc.scalar(False))
        self.guard = met if before is None else pc.and_kleene(before, met)
        try:
            yield
        finally:
            self.guard = before

    def _and(self, node: exp.And) -> Typed:
        a = self._bool(node.this)
        with self.only_where(pc.coalesce(a.expr, pc.scalar(True))):  # a false: b unread
            b = self._bool(node.expression)
        return Typed(pc.and_kleene(a.expr, b.expr), pa.bool_())

    def _or(self, node: exp.Or) -> Typed:
        a = self._bool(node.this)
        with self.only_where(pc.invert(pc.coalesce(a.expr, pc.scalar(False)))):
            b = self._bool(node.expression)
        return Typed(pc.or_kleene(a.expr, b.expr), pa.bool_())

    def _not(self, value: Typed | exp.Not) -> Typed:
        if isinstance(value, exp.Not):
            value = self._bool(value.this)
        value = self._as_bool(value, "NOT")
        return Typed(pc.invert(value.expr), pa.bool_())

    def _bool(self, node: exp.Expression) -> Typed:
        return self._as_bool(self.value(node), node.sql(dialect="spark"))

    def _as_bool(self, value: Typed, where: str) -> Typed:
        if kind(value.type) not in ("bool", "null"):
            raise self.refuse(f"{where[:40]}: a {sql_name(value.type)} is not true or false")
        return cast_to(value, pa.bool_())

    # -- comparisons ----------------------------------------------------------------

    def common(self, values: list[Typed], node: exp.Expression) -> pa.DataType:
        """The type Spark brings ``values`` to (string literals read as dates or
        timestamps beside one), or a refusal naming the types."""
        types = [v.type for v in values]
        target: pa.DataType | None = pa.null()
        for t in types:
            target = wider(target, t) if target is not None else None
        if target is None:
            temporal = [t for t in types if kind(t) in ("date", "timestamp")]
            only_literals = all(v.constant for v in values if kind(v.type) == "string")
            if (
                temporal
                and only_literals
                and {kind(t) for t in types} <= {"string", "date", "timestamp", "null"}
            ):
                return functools.reduce(lambda a, b: wider(a, b) or a, temporal)
            names = " and ".join(dict.fromkeys(sql_name(t) for t in types))
            raise self.refuse(
                f"{node.sql(dialect='spark')[:60]}: compares {names}, which Spark compares only "
                "through a cast that can fail on a row; CAST one side to the other's type"
            )
        return target

    def coerce(self, value: Typed, t: pa.DataType) -> Typed:
        if kind(value.type) == "string" and value.constant and kind(t) in ("date", "timestamp"):
            parse = parse_date if kind(t) == "date" else parse_timestamp
            try:
                parsed = parse(value.value)
            except ValueError as exc:
                raise self.refuse(f"'{value.value}': {exc}") from None
            return cast_to(Typed(pc.scalar(parsed), pa.date32() if kind(t) == "date"
                                 else pa.timestamp("us"), parsed), t)  # fmt: skip
        return cast_to(value, t)

    def compare(self, op: str, a: Typed, b: Typed, node: exp.Expression) -> Typed:
        named = [v.value for v in (a, b) if v.constant and v.value in self.schema.names]
        if a.constant and b.constant and kind(a.type) == kind(b.type) == "string" and named:
            raise self.refuse(  # Spark compares two strings here: surely not what was meant
                f"{node.sql(dialect='spark')[:40]} compares two strings; {named[0]!r} is a "
                f"string in Spark SQL, not the column: quote a column with backticks "
                f"(`{named[0]}`)"
            )  # fmt: skip
        t = self.common([a, b], node)
        if kind(t) == "null":
            return null(pa.bool_())
        a, b = self.coerce(a, t), self.coerce(b, t)
        if kind(t) != "float":
            return Typed(_PLAIN[op](a.expr, b.expr), pa.bool_())
        return Typed(_nan_compare(op, a, b), pa.bool_())

    def _nullsafeeq(self, node: exp.NullSafeEQ) -> Typed:
        a, b = self.value(node.this), self.value(node.expression)
        same = self.compare("=", a, b, node)
        both = pc.and_kleene(a.expr.is_null(), b.expr.is_null())
        return Typed(pc.or_kleene(both, pc.coalesce(same.expr, pc.scalar(False))), pa.bool_())

    def _in(self, node: exp.In) -> Typed:
        if node.args.get("query") or not all(constant(v) for v in node.expressions):
            raise self.refuse(f"{node.sql(dialect='spark')[:60]}: IN takes a list of values")
        x = self.value(node.this)
        values = [self.value(v) for v in node.expressions]
        t = self.common([x, *values], node)
        if kind(t) == "null":
            return null(pa.bool_())
        x = self.coerce(x, t)
        known = [self.coerce(v, t) for v in values if kind(v.type) != "null"]
        if kind(t) == "float" or not known:  # NaN and -0.0: Spark's equality, one by one
            terms = [self.compare("=", x, v, node).expr for v in known]
            found = functools.reduce(pc.or_kleene, terms) if terms else pc.scalar(False)
        else:
            listed = pa.array([v.value for v in known], t)
            found = pc.if_else(x.expr.is_null(), pc.scalar(pa.scalar(None, pa.bool_())),
                               x.expr.isin(listed))  # fmt: skip
        if len(known) < len(values):  # a NULL in the list: not found is unknown
            found = pc.or_kleene(found, pc.scalar(pa.scalar(None, pa.bool_())))
        return Typed(found, pa.bool_())

    def _between(self, node: exp.Between) -> Typed:
        guard, self.guard = self.guard, None  # Spark 4 reads x once, for every row
        try:
            x = self.value(node.this)
        finally:
            self.guard = guard
        low = self.compare(">=", x, self.value(node.args["low"]), node)
        high = self.compare("<=", x, self.value(node.args["high"]), node)
        return Typed(pc.and_kleene(low.expr, high.expr), pa.bool_())

    def _is(self, node: exp.Is) -> Typed:
        value, what = self.value(node.this), node.expression
        if isinstance(what, exp.Null):
            return Typed(value.expr.is_null(), pa.bool_())
        if isinstance(what, exp.Boolean):  # IS TRUE / IS FALSE: never null
            value = self._as_bool(value, node.sql())
            same = pc.equal(value.expr, pc.scalar(bool(what.this)))
            return Typed(pc.coalesce(same, pc.scalar(False)), pa.bool_())
        raise self.refuse(f"{node.sql()}: IS takes NULL, TRUE or FALSE")


def _nan_compare(op: str, a: Typed, b: Typed) -> pc.Expression:
    """Spark's order of floating point values: NaN equals NaN and is above every other."""
    na, nb = _is_nan(a), _is_nan(b)
    if op in ("=", "!="):
        equal = pc.or_kleene(pc.equal(a.expr, b.expr), _and(na, nb))
        return equal if op == "=" else pc.invert(equal)
    if op in ("<", ">"):
        low, high, nlow, nhigh = (a, b, na, nb) if op == "<" else (b, a, nb, na)
        return pc.or_kleene(pc.less(low.expr, high.expr), _and(nhigh, _negated(nlow)))
    strict = _nan_compare(op[0], a, b)
    return pc.or_kleene(strict, _nan_compare("=", a, b))


def _is_nan(value: Typed) -> pc.Expression | bool:
    if value.constant:
        return value.value is not None and value.value != value.value
    return pc.is_nan(value.expr)


def _negated(value: pc.Expression | bool) -> pc.Expression | bool:
    return (not value) if isinstance(value, bool) else pc.invert(value)


def _and(a: pc.Expression | bool, b: pc.Expression | bool) -> pc.Expression:
    if isinstance(a, bool) or isinstance(b, bool):
        other = b if isinstance(a, bool) else a
        flag = a if isinstance(a, bool) else b
        if not flag:
            return pc.scalar(False)
        return other if not isinstance(other, bool) else pc.scalar(other)
    return pc.and_kleene(a, b)

"""A row filter's functions, casts, arithmetic and conditionals, with Spark SQL's
meaning (see :mod:`scoring._where.translate`, whose translator this is a part of)."""

from __future__ import annotations

import decimal
import functools
import re
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from . import udfs
from .types import (
    MAX_PRECISION,
    NUMBERS,
    Typed,
    as_decimal,
    as_type,
    cast_to,
    kind,
    literal_number,
    null,
    parse_date,
    parse_timestamp,
    sql_name,
)  # fmt: skip

__all__ = ["Functions", "constant", "shown"]

_CASTS = {"DOUBLE": pa.float64(), "FLOAT": pa.float32(), "INT": pa.int32(),
          "BIGINT": pa.int64(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
          "BOOLEAN": pa.bool_(), "TEXT": pa.string(), "VARCHAR": pa.string(),
          "CHAR": pa.string(), "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"),
          "TIMESTAMPTZ": pa.timestamp("us"), "TIMESTAMPNTZ": pa.timestamp("us")}  # fmt: skip
_TRUE_TEXT, _FALSE_TEXT = {"t", "true", "y", "yes", "1"}, {"f", "false", "n", "no", "0"}
_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?Infinity|NaN")


class Functions:
    """The translator's functions; :class:`~scoring._where.translate.Translator` gives
    ``value``, ``common``, ``coerce``, ``compare`` and ``refuse``."""

    def value(self, node: exp.Expression) -> Typed:
        raise NotImplementedError

    def common(self, values: list[Typed], node: exp.Expression) -> pa.DataType:
        raise NotImplementedError

    def coerce(self, value: Typed, t: pa.DataType) -> Typed:
        raise NotImplementedError

    def compare(self, op: str, a: Typed, b: Typed, node: exp.Expression) -> Typed:
        raise NotImplementedError

    def refuse(self, what: str) -> Exception:
        raise NotImplementedError

    def fails(self, condition: pc.Expression, why: str) -> None:
        raise NotImplementedError

    def only_where(self, condition: pc.Expression) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _of(self, node: exp.Expression, kinds: tuple[str, ...], what: str) -> Typed:
        value = self.value(node)
        if kind(value.type) not in (*kinds, "null"):
            raise self.refuse(f"{what} takes {' or '.join(kinds)}, not {sql_name(value.type)} "
                              f"({node.sql(dialect='spark')[:40]})")  # fmt: skip
        return value

    # -- arithmetic -----------------------------------------------------------------

    def _neg(self, node: exp.Neg) -> Typed:
        if isinstance(node.this, exp.Literal) and not node.this.is_string:
            return self._signed(node)  # -5: one literal in Spark's grammar, typed signed
        value = self._of(node.this, NUMBERS, "-")
        if value.constant and value.value is not None:
            negated = -value.value
            if kind(value.type) == "int" and negated >= 2 ** (value.type.bit_width - 1):
                raise self.refuse(f"{node.sql()} overflows {sql_name(value.type)}")
            return Typed(pc.scalar(pa.scalar(negated, value.type)), value.type, negated)
        if kind(value.type) == "int":
            self._overflows(value.expr, value.type, "-")
        return Typed(pc.negate(value.expr), value.type)

    def _overflows(self, expr: pc.Expression, t: pa.DataType, what: str) -> None:
        """``-x`` or ``abs(x)`` of an integer type's least value leaves the type."""
        least = pa.scalar(-(2 ** (t.bit_width - 1)), t)
        self.fails(pc.equal(expr, pc.scalar(least)), f"{what} overflows {sql_name(t)}")

    def _signed(self, node: exp.Neg) -> Typed:
        try:
            return literal_number(f"-{node.this.this}")
        except ValueError as exc:
            raise self.refuse(f"{node.sql()}: {exc}") from None

    def _arithmetic(self, node: exp.Expression, op: str) -> Typed:
        a = self._of(node.this, NUMBERS, op)
        b = self._of(node.expression, NUMBERS, op)
        t = self.common([a, b], node)
        if kind(t) == "null":
            return null(pa.float64() if op == "/" else pa.int32())
        if op == "/":
            if kind(t) == "decimal":
                raise self.refuse(
                    f"{node.sql(dialect='spark')[:40]}: a DECIMAL divided rounds to Spark's "
                    "own scale; CAST a side to DOUBLE to divide"
                )  # fmt: skip
            a, b = cast_to(a, pa.float64()), cast_to(b, pa.float64())
            zero = pc.equal(b.expr, pc.scalar(0.0))  # -0.0 too
            self.fails(pc.and_kleene(a.expr.is_valid(), zero), "division by zero")
            divisor = pc.if_else(zero, pc.scalar(pa.scalar(None, pa.float64())), b.expr)
            return Typed(pc.divide(a.expr, divisor), pa.float64())
        result = _decimal_result(op, a.type, b.type) if kind(t) == "decimal" else t
        if result is None:
            raise self.refuse(f"{node.sql(dialect='spark')[:40]}: the result needs more than "
                              f"{MAX_PRECISION} digits, which Spark rounds")  # fmt: skip
        if kind(t) == "decimal":  # each in its own DECIMAL, as Spark sizes the result
            a, b = cast_to(a, as_decimal(a.type)), cast_to(b, as_decimal(b.type))
        else:
            a, b = self.coerce(a, t), self.coerce(b, t)
        if kind(t) == "int":
            return Typed(self._integer(op, a.expr, b.expr, t), t)
        function = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
        return Typed(function(a.expr, b.expr).cast(result), result)

    def _integer(self, op: str, a: pc.Expression, b: pc.Expression, t: pa.DataType) -> Any:
        """``a op b`` in integer type ``t``, failing (as Spark's) where it leaves ``t``."""
        function = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
        why = f"{op} overflows {sql_name(t)}"
        if t.bit_width < 64:  # exact in BIGINT, then checked against t's bounds
            wide = function(a.cast(pa.int64()), b.cast(pa.int64()))
            low, high = -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
            below, above = pc.less(wide, pc.scalar(low)), pc.greater(wide, pc.scalar(high))
            self.fails(pc.or_kleene(below, above), why)
            return wide.cast(t, safe=False)
        result = function(a, b)  # wraps where it overflows; the failure says so
        if op == "*":
            self.fails(udfs.call("multiply_overflows", [a, b]), why)
        else:  # a sign the operands cannot give: two's complement overflow
            sides = (a, result, b, result) if op == "+" else (a, b, a, result)
            left = pc.bit_wise_xor(sides[0], sides[1])
            right = pc.bit_wise_xor(sides[2], sides[3])
            self.fails(pc.less(pc.bit_wise_and(left, right), pc.scalar(0)), why)
        return result

    def _add(self, node: exp.Add) -> Typed:
        return self._arithmetic(node, "+")

    def _sub(self, node: exp.Sub) -> Typed:
        return self._arithmetic(node, "-")

    def _mul(self, node: exp.Mul) -> Typed:
        return self._arithmetic(node, "*")

    def _div(self, node: exp.Div) -> Typed:
        return self._arithmetic(node, "/")

    # -- conditionals ---------------------------------------------------------------

    def _branches(self, values: list[Typed], node: exp.Expression) -> tuple[list[Typed], Any]:
        t = self.common(values, node)
        return [self.coerce(v, t) for v in values], t

    def _case(self, node: exp.Case) -> Typed:
        ifs, default = node.args["ifs"], node.args.get("default")
        subject = self.value(node.this) if node.this is not None else None
        conditions: list[Typed] = []
        results: list[Typed] = []
        open_ = pc.scalar(True)  # no WHEN before has held: Spark reads on
        for branch in ifs:
            with self.only_where(open_):
                condition = (self._condition(branch.this) if subject is None else
                             self.compare("=", subject, self.value(branch.this), node))  # fmt: skip
            held = pc.coalesce(condition.expr, pc.scalar(False))
            with self.only_where(pc.and_kleene(open_, held)):
                results.append(self.value(branch.args["true"]))
            conditions.append(condition)
            open_ = pc.and_kleene(open_, pc.invert(held))
        with self.only_where(open_):
            results.append(self.value(default) if default is not None else null())
        results, t = self._branches(results, node)
        if kind(t) == "null":
            return null()
        names = [f"c{i}" for i in range(len(conditions))]
        cases = pc.make_struct(*[c.expr for c in conditions], field_names=names)
        return Typed(pc.case_when(cases, *[r.expr for r in results]), t)

    def _condition(self, node: exp.Expression) -> Typed:
        value = self.value(node)
        if kind(value.type) not in ("bool", "null"):
            raise self.refuse(f"WHEN {node.sql()[:40]}: a {sql_name(value.type)} is no condition")
        return cast_to(value, pa.bool_())

    def _if(self, node: exp.If) -> Typed:
        condition = self._condition(node.this)
        false = node.args.get("false")
        held = pc.coalesce(condition.expr, pc.scalar(False))
        with self.only_where(held):
            true_value = self.value(node.args["true"])
        with self.only_where(pc.invert(held)):
            false_value = self.value(false) if false is not None else null()
        results, t = self._branches([true_value, false_value], node)
        if kind(t) == "null":
            return null()
        chosen = pc.coalesce(condition.expr, pc.scalar(False))  # NULL: not true, so the ELSE
        return Typed(pc.if_else(chosen, results[0].expr, results[1].expr), t)

    def _coalesce(self, node: exp.Coalesce) -> Typed:
        values, unset = [], pc.scalar(True)  # Spark reads an argument where all before are NULL
        for argument in [node.this, *node.expressions]:
            with self.only_where(unset):
                values.append(self.value(argument))
            unset = pc.and_kleene(unset, values[-1].expr.is_null())
        values, t = self._branches(values, node)
        known = [v for v in values if not (v.constant and v.value is None)]
        if kind(t) == "null" or not known:
            return null(t)
        return Typed(pc.coalesce(*[v.expr for v in known]), t)

    def _extreme(self, node: exp.Expression, *, greatest: bool) -> Typed:
        allowed = (*NUMBERS, "date", "timestamp")
        what = "greatest" if greatest else "least"
        values = [self._of(e, allowed, what) for e in [node.this, *node.expressions]]
        values, t = self._branches(values, node)
        known = [v.expr for v in values if not (v.constant and v.value is None)]
        if kind(t) == "null" or not known:
            return null(t)
        function = pc.max_element_wise if greatest else pc.min_element_wise
        result = function(*known)  # nulls skipped, as Spark's
        if kind(t) == "float" and greatest:  # NaN is above every number in Spark
            nan = functools.reduce(pc.or_kleene, [pc.coalesce(pc.is_nan(e), pc.scalar(False))
                                                  for e in known])  # fmt: skip
            result = pc.if_else(nan, pc.scalar(pa.scalar(float("nan"), t)), result)
        return Typed(result, t)

    def _greatest(self, node: exp.Greatest) -> Typed:
        return self._extreme(node, greatest=True)

    def _least(self, node: exp.Least) -> Typed:
        return self._extreme(node, greatest=False)

    # -- strings --------------------------------------------------------------------

    def _lower(self, node: exp.Lower) -> Typed:
        return Typed(udfs.call("lower", [self._of(node.this, ("string",), "lower").expr]),
                     pa.string())  # fmt: skip

    def _upper(self, node: exp.Upper) -> Typed:
        return Typed(udfs.call("upper", [self._of(node.this, ("string",), "upper").expr]),
                     pa.string())  # fmt: skip

    def _length(self, node: exp.Length) -> Typed:
        text = self._of(node.this, ("string",), "length")
        return Typed(pc.utf8_length(text.expr).cast(pa.int32()), pa.int32())

    def _trim(self, node: exp.Trim) -> Typed:
        if node.args.get("expression") is not None or node.args.get("position"):
            raise self.refuse(f"{node.sql()[:40]}: trim takes one string (its spaces go)")
        text = self._of(node.this, ("string",), "trim")
        return Typed(pc.utf8_trim(text.expr, characters=" "), pa.string())  # spaces only

    def _substring(self, node: exp.Substring) -> Typed:
        start, length = node.args.get("start"), node.args.get("length")
        if not (start is not None and constant(start)) or (
            length is not None and not constant(length)
        ):
            raise self.refuse(f"{node.sql()[:40]}: substring takes numbers for start and length")
        text = self._of(node.this, ("string",), "substring")
        pos = int(self.value(start).value)
        count = None if length is None else int(self.value(length).value)
        if pos >= 0 and (count is None or count >= 0):  # Arrow's slice is Spark's here
            first = max(pos - 1, 0)
            stop = 2**62 if count is None else first + count
            return Typed(pc.utf8_slice_codeunits(text.expr, first, stop), pa.string())
        args = [text.expr, pa.scalar(pos, pa.int64()), pa.scalar(count, pa.int64())]
        return Typed(udfs.call("substring", args), pa.string())

    def _like(self, node: exp.Like, *, ignore_case: bool = False) -> Typed:
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string) or node.args.get("escape"):
            raise self.refuse(f"{node.sql()[:40]}: LIKE takes a 'pattern'")
        text = self._of(node.this, ("string",), "LIKE")
        _check_escapes(pattern.this, self.refuse)
        value = udfs.call("lower", [text.expr]) if ignore_case else text.expr
        said = pattern.this.lower() if ignore_case else pattern.this
        return Typed(pc.match_like(value, said), pa.bool_())

    def _ilike(self, node: exp.ILike) -> Typed:
        return self._like(node, ignore_case=True)  # type: ignore[arg-type]

    # -- numbers and dates ----------------------------------------------------------

    def _abs(self, node: exp.Abs) -> Typed:
        value = self._of(node.this, NUMBERS, "abs")
        if kind(value.type) == "int":
            self._overflows(value.expr, value.type, "abs")
        return Typed(pc.abs(value.expr), value.type)

    def _round(self, node: exp.Round) -> Typed:
        value = self._of(node.this, NUMBERS, "round")
        digits = node.args.get("decimals")
        places = 0 if digits is None else self.value(digits).value
        if not isinstance(places, int):
            raise self.refuse(f"{node.sql()[:40]}: round takes a whole number of places")
        family = kind(value.type)
        if family == "int" and places >= 0:
            return value
        if family == "decimal":
            rounded = pc.round(value.expr, places, round_mode="half_towards_infinity")
            return Typed(rounded, value.type)  # half away from zero: Spark's HALF_UP
        if value.type == pa.float64():
            return Typed(udfs.call("round", [value.expr, pa.scalar(places, pa.int32())]),
                         pa.float64())  # fmt: skip
        raise self.refuse(f"{node.sql()[:40]}: round of a {sql_name(value.type)} to "
                          f"{places} places is not supported (CAST it to DOUBLE)")  # fmt: skip

    def _part(self, node: exp.Expression, function: Any) -> Typed:
        inner = node.this
        if isinstance(inner, (exp.TsOrDsToDate, exp.TsOrDsToTimestamp)):
            inner = inner.this  # Spark's reading wraps the argument in a conversion
        value = self._of(inner, ("date", "timestamp"), type(node).__name__.lower())
        return Typed(function(value.expr).cast(pa.int32()), pa.int32())

    def _year(self, node: exp.Year) -> Typed:
        return self._part(node, pc.year)

    def _month(self, node: exp.Month) -> Typed:
        return self._part(node, pc.month)

    def _day(self, node: exp.Day) -> Typed:
        return self._part(node, pc.day)

    # -- casts ----------------------------------------------------------------------

    def _trycast(self, node: exp.Cast) -> Typed:
        target = self._target(node)
        value = self.value(node.this)
        if node.args.get("safe") and not _widening(value.type, target):
            raise self.refuse(f"{node.sql()[:40]}: TRY_CAST gives NULL where its cast fails, "
                              "which is not supported; use CAST")  # fmt: skip
        if value.type == target:
            return value
        if kind(value.type) == "null":
            return null(target)
        if value.constant and kind(value.type) == "string":
            return self._parsed(value.value, target, node)
        return self._converted(value, target, node)

    _cast = _trycast

    def _target(self, node: exp.Cast) -> pa.DataType:
        to = node.to
        name = to.this.name
        if name == "DECIMAL":
            params = [int(p.this.this) for p in to.expressions] or [10, 0]
            precision, scale = [*params, 0][:2]
            return pa.decimal128(precision, scale)
        if name not in _CASTS:
            raise self.refuse(f"CAST to {name} is not supported (one of {sorted(_CASTS)})")
        return _CASTS[name]

    def _to_integer(self, expr: pc.Expression, source: pa.DataType, t: pa.DataType) -> Any:
        """A number cast to integer type ``t`` toward zero; Spark fails on NaN and on
        what ``t`` cannot hold."""
        family, half = kind(source), 2 ** (t.bit_width - 1)
        if family == "int" and source.bit_width <= t.bit_width:
            return expr.cast(t)  # wider: every value fits
        if family == "float":
            expr, within = pc.trunc(expr), pa.float64()
            low, high = pa.scalar(float(-half)), pa.scalar(float(half))  # high: just past
        else:
            within = pa.decimal128(38, source.scale) if family == "decimal" else pa.int64()
            low = pa.scalar(decimal.Decimal(-half)).cast(within)
            high = pa.scalar(decimal.Decimal(half)).cast(within)
            expr = expr.cast(within) if family == "int" else expr
            if family == "decimal":  # rounded with room for its digits (Arrow needs it)
                expr = pc.round(expr.cast(within), 0, round_mode="towards_zero")
        outside = pc.or_kleene(pc.less(expr, pc.scalar(low)),
                               pc.greater_equal(expr, pc.scalar(high)))  # fmt: skip
        if family == "float":
            outside = pc.or_kleene(outside, pc.is_nan(expr))
        self.fails(outside, f"a value does not fit {sql_name(t)}")
        zero = pc.scalar(pa.scalar(0).cast(within))
        return pc.if_else(outside, zero, expr).cast(t, safe=False)

    def _parsed(self, text: str, target: pa.DataType, node: exp.Expression) -> Typed:
        """A string literal cast as Spark's ANSI cast reads it, or refused."""
        family, stripped = kind(target), text.strip()
        try:
            if family == "date":
                parsed: Any = parse_date(stripped)
            elif family == "timestamp":
                parsed = parse_timestamp(stripped)
            elif family == "bool" and stripped.lower() in _TRUE_TEXT | _FALSE_TEXT:
                parsed = stripped.lower() in _TRUE_TEXT
            elif family == "int" and re.fullmatch(r"[+-]?\d+", stripped):
                parsed = pa.scalar(int(stripped), target).as_py()
            elif family == "float" and _FLOAT_TEXT.fullmatch(stripped):
                parsed = pa.scalar(float(stripped), target).as_py()
            elif family == "decimal" and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", stripped):
                parsed = _to_decimal(decimal.Decimal(stripped), target)
            elif family == "string":
                parsed = text
            else:
                raise ValueError(f"Spark's ANSI cast of '{text}' to {sql_name(target)} fails")
        except (ValueError, OverflowError, pa.ArrowInvalid) as exc:
            raise self.refuse(f"{node.sql()[:50]}: {exc}") from None
        return Typed(pc.scalar(pa.scalar(parsed, target)), target, parsed)

    def _converted(self, value: Typed, target: pa.DataType, node: exp.Expression) -> Typed:
        source, to = kind(value.type), kind(target)
        expr = value.expr
        if source in NUMBERS and to == "float":
            return Typed(as_type(expr, value.type, target), target)
        if source in NUMBERS and to == "int":
            return Typed(self._to_integer(expr, value.type, target), target)
        if source in ("int", "decimal") and to == "decimal":
            if source == "decimal" and value.type.scale > target.scale:
                expr = pc.round(expr.cast(pa.decimal128(38, value.type.scale)), target.scale,
                                round_mode="half_towards_infinity")  # fmt: skip
            digits = decimal.Decimal(10) ** (target.precision - target.scale)
            scale = value.type.scale if source == "decimal" else 0
            wide = pc.greater_equal(pc.abs(expr.cast(pa.decimal128(38, scale))),
                                    pc.scalar(pa.scalar(digits)))  # fmt: skip
            self.fails(wide, f"a value does not fit {sql_name(target)}")
            zero = pc.scalar(pa.scalar(0).cast(pa.decimal128(38, scale)))
            kept = pc.if_else(wide, zero, expr.cast(pa.decimal128(38, scale)))
            return Typed(kept.cast(target, safe=False), target)
        if value.type == pa.float64() and to == "decimal":
            self.fails(udfs.call("decimal_fails", [expr], decimal=target),
                       f"a value does not fit {sql_name(target)}")  # fmt: skip
            return Typed(udfs.call("decimal", [expr], decimal=target), target)
        if source in ("int", "bool", "date", "string") and to == "string":
            return Typed(expr.cast(pa.string()), pa.string())
        if source == "bool" and to in NUMBERS:  # true is 1, false 0
            one, zero = pa.scalar(1).cast(target), pa.scalar(0).cast(target)
            return Typed(pc.if_else(expr, pc.scalar(one), pc.scalar(zero)), target)
        if source in NUMBERS and to == "bool":
            return Typed(pc.not_equal(expr, pc.scalar(0).cast(value.type)), pa.bool_())
        if source in ("date", "timestamp") and to in ("date", "timestamp"):
            return Typed(expr.cast(target), target)
        raise self.refuse(f"{node.sql()[:40]}: CAST from {sql_name(value.type)} to "
                          f"{sql_name(target)} is not supported")  # fmt: skip


def _decimal_result(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """Spark's type of a DECIMAL sum, difference or product (None past 38 digits)."""
    da, db = as_decimal(a), as_decimal(b)
    if op == "*":
        precision, scale = da.precision + db.precision + 1, da.scale + db.scale
    else:
        scale = max(da.scale, db.scale)
        precision = max(da.precision - da.scale, db.precision - db.scale) + scale + 1
    return pa.decimal128(precision, scale) if precision <= MAX_PRECISION else None


def _to_decimal(value: decimal.Decimal, target: pa.DataType) -> decimal.Decimal:
    rounded = value.quantize(decimal.Decimal(1).scaleb(-target.scale),
                             rounding=decimal.ROUND_HALF_UP)  # fmt: skip
    if rounded and len(rounded.as_tuple().digits) > target.precision:
        raise ValueError(f"{value} does not fit {sql_name(target)}")
    return rounded


def _widening(source: pa.DataType, target: pa.DataType) -> bool:
    """A cast that cannot fail (TRY_CAST then never gives its NULL)."""
    if source == target or kind(source) == "null":
        return True
    if kind(source) == "int" and kind(target) in ("int", "float"):
        return kind(target) == "float" or target.bit_width >= source.bit_width
    return kind(source) == "float" and target == pa.float64()


def _check_escapes(pattern: str, refuse: Any) -> None:
    """Spark's LIKE takes ``\\`` before ``_``, ``%`` or ``\\`` only."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1] not in "_%\\":
                raise refuse(f"LIKE '{pattern}': \\ escapes only _, % or \\ (as in Spark)")
            i += 1
        i += 1


def constant(node: exp.Expression) -> bool:
    """A literal, or a literal cast to a type (``DATE '...'``), or negated."""
    if isinstance(node, (exp.Cast, exp.Neg, exp.Paren)):
        return constant(node.this)
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null))


def shown(node: exp.Expression) -> str:
    return f"{type(node).__name__.upper()} ({node.sql(dialect='spark')[:40]})"

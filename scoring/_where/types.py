"""Spark SQL's types for a row filter: what a literal is, which type two values are
compared or added in, and how a value is cast there (ANSI mode, as Spark 4 runs).

Every rule here is Spark's: ``1`` is an INT, ``1.5`` a DECIMAL(2, 1), ``1e3`` a DOUBLE;
an INT beside a DECIMAL widens to a DECIMAL, a DECIMAL beside a DOUBLE to a DOUBLE; a
BIGINT beside a FLOAT to a FLOAT.  What Spark would compare only through a cast that
can fail on a row (a STRING against a number) is refused, naming both types.
"""

from __future__ import annotations

import datetime
import decimal
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MAX_PRECISION", "NUMBERS", "Typed", "as_decimal", "as_type", "cast_to", "kind",
           "literal_number", "null", "parse_date", "parse_timestamp", "plain", "sql_name",
           "wider"]  # fmt: skip

_NONE = object()
#: The numeric families of :func:`kind`.
NUMBERS = ("int", "float", "decimal")
#: An integer type's digits, as Spark widens it to a DECIMAL.
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
#: A DECIMAL's most digits (Spark's and Arrow's decimal128).
MAX_PRECISION = 38


@dataclass(frozen=True)
class Typed:
    """A translated value: its expression, its type (``pa.null()`` for an untyped
    NULL) and, for a constant, its Python value."""

    expr: pc.Expression
    type: pa.DataType
    value: Any = _NONE

    @property
    def constant(self) -> bool:
        return self.value is not _NONE


def null(kind: pa.DataType | None = None) -> Typed:
    """A NULL of ``kind`` (untyped: ``pa.null()``)."""
    kind = pa.null() if kind is None else kind
    return Typed(pc.scalar(pa.scalar(None, kind)), kind, None)


def kind(t: pa.DataType) -> str:
    """The family of ``t``: null, bool, int, float, decimal, string, date, timestamp."""
    checks = (("null", pa.types.is_null), ("bool", pa.types.is_boolean),
              ("int", pa.types.is_integer), ("float", pa.types.is_floating),
              ("decimal", pa.types.is_decimal), ("string", pa.types.is_string),
              ("date", pa.types.is_date32), ("timestamp", pa.types.is_timestamp))  # fmt: skip
    return next((name for name, check in checks if check(t)), "other")


def sql_name(t: pa.DataType) -> str:
    """``t`` as Spark names it."""
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
             pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
             pa.string(): "STRING", pa.bool_(): "BOOLEAN", pa.date32(): "DATE",
             pa.null(): "NULL"}  # fmt: skip
    if t in names:
        return names[t]
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    return "TIMESTAMP" if pa.types.is_timestamp(t) else str(t).upper()


def plain(t: pa.DataType) -> pa.DataType | None:
    """The type a column of ``t`` is read as (dictionaries decoded, large and view
    strings plain, timestamps as UTC microseconds), or None where Spark has none."""
    if pa.types.is_dictionary(t):
        return plain(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us")
    if pa.types.is_unsigned_integer(t):
        return None  # Spark reads no unsigned integers as such
    return t if kind(t) not in ("other", "null") else None


def literal_number(text: str) -> Typed:
    """A numeric literal as Spark types it: INT, then BIGINT, then DECIMAL(n, 0) for
    digits alone; DECIMAL(p, s) with a point; DOUBLE with an exponent."""
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
        for t, bits in ((pa.int32(), 31), (pa.int64(), 63)):
            if -(2**bits) <= value < 2**bits:
                return Typed(pc.scalar(pa.scalar(value, t)), t, value)
        return _decimal_literal(decimal.Decimal(text), text)
    if re.search(r"[eE]", text):
        number = float(text)
        return Typed(pc.scalar(number), pa.float64(), number)
    return _decimal_literal(decimal.Decimal(text), text)


def _decimal_literal(value: decimal.Decimal, text: str) -> Typed:
    _, digits, exponent = value.as_tuple()
    scale = max(-int(exponent), 0)
    precision = max(len(digits), scale, 1)
    if precision > MAX_PRECISION:
        raise ValueError(f"{text} has more than {MAX_PRECISION} digits")
    t = pa.decimal128(precision, scale)
    return Typed(pc.scalar(pa.scalar(value, t)), t, value)


def wider(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type Spark compares, adds or chooses between ``a`` and ``b`` in; None where it
    has none without a cast that can fail (the caller refuses)."""
    if a == b:
        return a
    ka, kb = kind(a), kind(b)
    if ka == "null":
        return b
    if kb == "null":
        return a
    if ka in NUMBERS and kb in NUMBERS:
        return _wider_number(a, b)
    if {ka, kb} == {"date", "timestamp"} or ka == kb == "timestamp":
        return pa.timestamp("us")
    return None


def _wider_number(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    ka, kb = kind(a), kind(b)
    if "float" in (ka, kb):
        if pa.float64() in (a, b) or "decimal" in (ka, kb):
            return pa.float64()
        return pa.float32()  # a FLOAT beside an integer: Spark's FLOAT
    if ka == kb == "int":
        return a if a.bit_width >= b.bit_width else b
    da, db = as_decimal(a), as_decimal(b)
    scale = max(da.scale, db.scale)
    digits = max(da.precision - da.scale, db.precision - db.scale)
    return pa.decimal128(digits + scale, scale) if digits + scale <= MAX_PRECISION else None


def as_decimal(t: pa.DataType) -> pa.DataType:
    """An integer type as the DECIMAL Spark widens it to (any other type as it is)."""
    return pa.decimal128(_INT_DIGITS[t.bit_width], 0) if pa.types.is_integer(t) else t


def cast_to(value: Typed, t: pa.DataType) -> Typed:
    """``value`` in type ``t`` (one :func:`wider` chose: the cast cannot fail)."""
    if value.type == t:
        return value
    if kind(value.type) == "null":
        return null(t)
    if value.constant:
        converted = _constant_as(value.value, value.type, t)
        return Typed(pc.scalar(pa.scalar(converted, t)), t, converted)
    return Typed(as_type(value.expr, value.type, t), t)


def as_type(expr: pc.Expression, source: pa.DataType, t: pa.DataType) -> pc.Expression:
    """``expr`` cast to ``t``; a DECIMAL to a float through its digits, so that it is the
    nearest float as Spark's is (Arrow's own cast is off by an ulp: 19.99 ->
    19.990000000000002); an integer to the nearest float, where Arrow's refuses one it
    cannot hold exactly."""
    if pa.types.is_decimal(source) and pa.types.is_floating(t):
        return expr.cast(pa.string()).cast(t)
    if pa.types.is_integer(source) and pa.types.is_floating(t):
        return expr.cast(t, safe=False)  # rounded to the nearest float, as Spark's
    return expr.cast(t)


def _constant_as(value: Any, source: pa.DataType, t: pa.DataType) -> Any:
    if pa.types.is_floating(t) and isinstance(value, (decimal.Decimal, int)):
        number = float(value)
        return pa.scalar(number, pa.float64()).cast(t).as_py() if t == pa.float32() else number
    if pa.types.is_decimal(t):
        return decimal.Decimal(value)
    if (
        pa.types.is_timestamp(t)
        and isinstance(value, datetime.date)
        and not isinstance(value, datetime.datetime)
    ):
        return datetime.datetime(value.year, value.month, value.day)
    return pa.scalar(value, source).cast(t).as_py()


def parse_date(text: str) -> datetime.date:
    """A DATE literal, in the one form every engine reads alike: ``YYYY-MM-DD``."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        raise ValueError("write a date as YYYY-MM-DD")
    return datetime.date.fromisoformat(text.strip())


def parse_timestamp(text: str) -> datetime.datetime:
    """A TIMESTAMP literal (UTC, the session time zone the product reads in):
    ``YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]``."""
    form = r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?"
    if not re.fullmatch(form, text.strip()):
        raise ValueError("write a timestamp as YYYY-MM-DD HH:MM:SS (UTC)")
    return datetime.datetime.fromisoformat(text.strip())

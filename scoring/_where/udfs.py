"""Spark SQL's scalar functions where Arrow's own differ, as Arrow functions that a
filter's expression calls (registered once per process, by name).

- ``upper``/``lower``: full Unicode case mapping, as Java's (``upper('ß')`` is
  ``'SS'``; Arrow maps one character to one);
- ``substring`` from a position counted from the end (``substring(s, -2)``), or of a
  negative length: Spark's arithmetic on positions (``UTF8String.substringSQL``);
- ``round`` of a DOUBLE: half up on the value's shortest decimal form (Spark rounds a
  ``BigDecimal`` made from ``Double.toString``: ``round(2.675, 2)`` is 2.68), where
  Arrow rounds the binary value;
- ``CAST(double AS DECIMAL(p, s))``: the same rounding; NULL for NaN and infinities (as
  Spark's) and past the precision, where ``decimal_fails`` says Spark's ANSI cast fails;
- ``multiply_overflows``: where a BIGINT product leaves BIGINT (Spark fails).

Rows of ASCII text take Arrow's own kernels; the rest are computed per value.
"""

from __future__ import annotations

import contextlib
import decimal
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["call"]

_PREFIX = "scoring_spark_"
_REGISTERED: set[str] = set()


def call(name: str, args: list[Any], *, decimal: pa.DataType | None = None) -> pc.Expression:
    """The expression calling Spark's ``name`` (``upper``, ``lower``, ``substring``,
    ``round``, ``decimal``, ``decimal_fails``, ``multiply_overflows``) on ``args``
    (expressions or scalars); ``decimal``: a cast's DECIMAL type."""
    key = f"{_PREFIX}{name}" + (
        f"_{decimal.precision}_{decimal.scale}" if decimal is not None else ""
    )
    if key not in _REGISTERED:
        _register(key, name, decimal)
    return pc.Expression._call(key, [a if isinstance(a, pc.Expression) else pc.scalar(a)
                                     for a in args])  # fmt: skip


def _register(key: str, name: str, decimal: pa.DataType | None) -> None:
    function, inputs, result = _FUNCTIONS[name]
    result = decimal if name == "decimal" and decimal is not None else result
    doc = {"summary": f"Spark SQL's {name}", "description": __doc__ or ""}
    with contextlib.suppress(pa.ArrowKeyError):  # registered by another thread already
        pc.register_scalar_function(_udf(function, decimal or result), key, doc, inputs, result)
    _REGISTERED.add(key)


def _udf(function: Callable[..., Any], param: pa.DataType) -> Callable[..., Any]:
    def udf(context: Any, *arrays: Any) -> Any:
        return function(param, *arrays)

    return udf


def _per_value(values: Any, one: Callable[[Any], Any], result: pa.DataType) -> Any:
    """``one`` of each non-null value (a scalar's, or an array's)."""
    if isinstance(values, pa.Scalar):
        return pa.scalar(None if values.as_py() is None else one(values.as_py()), result)
    return pa.array([None if v is None else one(v) for v in values.to_pylist()], result)


def _case(values: Any, ascii_kernel: Callable[[Any], Any], text: Callable[[str], str]) -> Any:
    if isinstance(values, pa.Scalar):
        return pa.scalar(None if values.as_py() is None else text(values.as_py()), pa.string())
    if pc.all(pc.string_is_ascii(values)).as_py() in (True, None):
        return ascii_kernel(values)
    return pa.array([None if v is None else text(v) for v in values.to_pylist()], pa.string())


def _upper(result: pa.DataType, values: Any) -> Any:
    return _case(values, pc.utf8_upper, str.upper)


def _lower(result: pa.DataType, values: Any) -> Any:
    return _case(values, pc.utf8_lower, str.lower)


def _substring(result: pa.DataType, values: Any, start: Any, length: Any) -> Any:
    pos, count = start.as_py(), length.as_py()

    def one(text: str) -> str:
        size = len(text)
        first = pos - 1 if pos > 0 else (size + pos if pos < 0 else 0)
        end = size if count is None else first + count
        first = max(first, 0)
        return "" if first >= end else text[first:end]

    if isinstance(values, pa.Scalar):
        return pa.scalar(None if values.as_py() is None else one(values.as_py()), pa.string())
    return pa.array([None if v is None else one(v) for v in values.to_pylist()], pa.string())


def _half_up(value: float, digits: int) -> decimal.Decimal:
    """``value``'s shortest decimal form rounded half up to ``digits`` places."""
    with decimal.localcontext() as context:
        context.prec = 80
        return decimal.Decimal(repr(value)).quantize(
            decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP
        )


def _round(result: pa.DataType, values: Any, digits: Any) -> Any:
    places = digits.as_py()

    def one(value: float) -> float:
        return value if not math.isfinite(value) else float(_half_up(value, places))

    if isinstance(values, pa.Scalar):
        return pa.scalar(None if values.as_py() is None else one(values.as_py()), pa.float64())
    return pa.array([None if v is None else one(v) for v in values.to_pylist()], pa.float64())


def _fitted(value: float, kind: pa.DataType) -> decimal.Decimal | None:
    """``value`` as a DECIMAL of ``kind``, or None where it does not fit (Spark fails)."""
    if not math.isfinite(value):
        return None
    rounded = _half_up(value, kind.scale)
    return None if rounded and rounded.adjusted() >= kind.precision - kind.scale else rounded


def _decimal(kind: pa.DataType, values: Any) -> Any:
    return _per_value(values, lambda v: _fitted(v, kind), kind)


def _decimal_fails(kind: pa.DataType, values: Any) -> Any:
    """Where Spark's cast fails: a finite value too large (NaN and infinities are NULL)."""
    return _per_value(values, lambda v: math.isfinite(v) and _fitted(v, kind) is None,
                      pa.bool_())  # fmt: skip


def _multiply_overflows(kind: pa.DataType, a: Any, b: Any) -> Any:
    """Whether BIGINT ``a * b`` leaves BIGINT (exactly, in Python's integers)."""
    pairs = zip(a.to_pylist(), b.to_pylist(), strict=True) if not isinstance(a, pa.Scalar) else [
        (a.as_py(), b.as_py())
    ]  # fmt: skip
    said = [None if x is None or y is None else not -(2**63) <= x * y < 2**63 for x, y in pairs]
    return pa.scalar(said[0], pa.bool_()) if isinstance(a, pa.Scalar) else pa.array(said)


#: name -> (function, argument types, result type)
_FUNCTIONS: dict[str, tuple[Callable[..., Any], dict[str, pa.DataType], pa.DataType]] = {
    "upper": (_upper, {"s": pa.string()}, pa.string()),
    "lower": (_lower, {"s": pa.string()}, pa.string()),
    "substring": (
        _substring,
        {"s": pa.string(), "start": pa.int64(), "length": pa.int64()},
        pa.string(),
    ),
    "round": (_round, {"x": pa.float64(), "digits": pa.int32()}, pa.float64()),
    "decimal": (_decimal, {"x": pa.float64()}, pa.decimal128(38, 0)),
    "decimal_fails": (_decimal_fails, {"x": pa.float64()}, pa.bool_()),
    "multiply_overflows": (_multiply_overflows, {"a": pa.int64(), "b": pa.int64()}, pa.bool_()),
}

"""Row filters of a set's models: ``where = "region = 'EU' AND tenure >= 12"``.

A small SQL subset, as a Spark or warehouse user writes a WHERE clause: comparisons
(``= == != <> < <= > >=``), ``[NOT] IN (...)``, ``IS [NOT] NULL``, ``AND``, ``OR``,
``NOT`` and parentheses, over column names (bare, or quoted with backticks or double
quotes) and literals (numbers, 'strings', TRUE, FALSE).  A filter is parsed once, when
the set is built (a syntax error names the filter and the position), and evaluated per
batch with pyarrow compute.  As in SQL, a comparison with a null is not true: such a
row is outside the filter.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .errors import ConfigError, InputError

__all__ = ["RowFilter"]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|'(?P<str>(?:[^']|'')*)'"
    r"|`(?P<bq>[^`]+)`|\"(?P<dq>[^\"]+)\"|(?P<op><=|>=|<>|!=|==|[=<>(),])"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)
_COMPARE = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal,
            "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}  # fmt: skip
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"}

_Eval = Callable[[pa.Table], Any]


@dataclass(frozen=True)
class _Token:
    kind: str  # num | str | name | op | kw
    text: str
    at: int


class RowFilter:
    """A parsed ``where``: :meth:`mask` gives, per row of a batch, whether it is inside."""

    def __init__(self, text: str):
        self.text = text
        self.columns: list[str] = []
        self._tokens = _tokens(text)
        self._pos = 0
        self._eval = self._or()
        if self._pos != len(self._tokens):
            self._fail("unexpected", self._tokens[self._pos])

    def mask(self, batch: pa.Table | pa.RecordBatch) -> pa.Array:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        try:
            inside = self._eval(table)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
            raise InputError(
                f"row filter {self.text!r} cannot be evaluated on the input: {exc}; compare "
                "each column with a value of its type"
            ) from None
        if isinstance(inside, pa.ChunkedArray):
            inside = inside.combine_chunks()
        if not isinstance(inside, pa.Array) or not pa.types.is_boolean(inside.type):
            raise InputError(f"row filter {self.text!r} is not a condition (true or false)")
        return pc.fill_null(inside, False)

    # -- recursive descent: or > and > not > predicate --------------------------------

    def _or(self) -> _Eval:
        left = self._and()
        while self._keyword("OR"):
            left = _both(pc.or_kleene, left, self._and())
        return left

    def _and(self) -> _Eval:
        left = self._not()
        while self._keyword("AND"):
            left = _both(pc.and_kleene, left, self._not())
        return left

    def _not(self) -> _Eval:
        if self._keyword("NOT"):
            inner = self._not()
            return lambda t: pc.invert(inner(t))
        return self._predicate()

    def _predicate(self) -> _Eval:
        if self._op("("):
            inner = self._or()
            self._expect(")")
            return inner
        left = self._operand()
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            self._expect_keyword("NULL")
            return (lambda t: pc.is_valid(left(t))) if negated else (lambda t: pc.is_null(left(t)))
        negated = self._keyword("NOT")
        if self._keyword("IN"):
            values = self._list()
            found: _Eval = lambda t: pc.is_in(left(t), value_set=values)  # noqa: E731
            if not negated:
                return found
            # SQL: a null is NOT IN nothing (pyarrow's is_in says false, so invert: true).
            return lambda t: pc.and_(pc.is_valid(left(t)), pc.invert(found(t)))
        if negated:
            self._fail("expected IN after NOT", self._peek())
        token = self._peek()
        if token.kind != "op" or token.text not in _COMPARE:
            return left  # a boolean column on its own (mask() checks that it is one)
        self._pos += 1
        return _both(_COMPARE[token.text], left, self._operand())

    def _operand(self) -> _Eval:
        token = self._next()
        if token.kind == "name":
            self.columns.append(token.text)
            return lambda t: t.column(token.text)
        value = self._literal(token)
        return lambda t: value

    def _list(self) -> pa.Array:
        self._expect("(")
        values = [self._literal(self._next())]
        while self._op(","):
            values.append(self._literal(self._next()))
        self._expect(")")
        return pa.array(values)

    def _literal(self, token: _Token) -> Any:
        if token.kind == "num":
            return float(token.text) if re.search(r"[.eE]", token.text) else int(token.text)
        if token.kind == "str":
            return token.text
        if token.kind == "kw" and token.text in ("TRUE", "FALSE"):
            return token.text == "TRUE"
        self._fail("expected a column or a value", token)
        raise AssertionError  # _fail raised

    # -- tokens ---------------------------------------------------------------------

    def _peek(self) -> _Token:
        if self._pos < len(self._tokens):
            return self._tokens[self._pos]
        return _Token("end", "end of filter", len(self.text))

    def _next(self) -> _Token:
        token = self._peek()
        self._pos += 1
        return token

    def _keyword(self, word: str) -> bool:
        return self._accept("kw", word)

    def _op(self, op: str) -> bool:
        return self._accept("op", op)

    def _accept(self, kind: str, text: str) -> bool:
        """Step over the next token if it is ``text`` of ``kind``."""
        token = self._peek()
        if token.kind == kind and token.text == text:
            self._pos += 1
            return True
        return False

    def _expect(self, op: str) -> None:
        if not self._op(op):
            self._fail(f"expected {op!r}", self._peek())

    def _expect_keyword(self, word: str) -> None:
        if not self._keyword(word):
            self._fail(f"expected {word}", self._peek())

    def _fail(self, what: str, token: _Token) -> None:
        raise ConfigError(
            f"row filter {self.text!r}: {what} at {token.text!r} (character {token.at + 1}); "
            "write e.g. region = 'EU' AND tenure >= 12"
        )


def _both(op: Callable[[Any, Any], Any], left: _Eval, right: _Eval) -> _Eval:
    return lambda t: op(left(t), right(t))


def _tokens(text: str) -> list[_Token]:
    out, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise ConfigError(
                f"row filter {text!r}: cannot read {text[at:].strip()[:20]!r} (character {at + 1})"
            )
        kind = match.lastgroup or ""
        value = match.group(kind)
        start = match.start(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            out.append(_Token("kw", value.upper(), start))
        elif kind in ("word", "bq", "dq"):
            out.append(_Token("name", value, start))
        elif kind == "str":
            out.append(_Token("str", value.replace("''", "'"), start))
        else:
            out.append(_Token(kind, value, start))
        at = match.end()
    return out

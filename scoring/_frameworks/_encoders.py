"""What a Pipeline's ``OrdinalEncoder`` or ``OneHotEncoder`` makes of its input columns,
asked of the fitted encoder itself.

Each output column of an encoder is a function of one input column's value.  The
encoder is asked once for all its categories and once per kind of value it may treat
apart (a label it never saw, NaN, None, +-inf), so that infrequent categories, dropped
categories, ``handle_unknown`` and ``encoded_missing_value`` are followed as the
installed scikit-learn follows them, not re-derived.  The answer per output column is an
:class:`Encoding`: a value for each label, one for any other value, and what the encoder
refuses with its reason.  A tree split on such a column is then a categorical split on
the input column (:mod:`._pipeline`).
"""

from __future__ import annotations

import itertools
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from .._labels import value_kind
from ..errors import UnsupportedModelError

__all__ = ["ENCODERS", "Column", "Encoding", "encoded_columns"]

ENCODERS = ("OrdinalEncoder", "OneHotEncoder")

#: Values an encoder may treat apart from an unseen label: kind -> the value asked.
_SPECIALS: dict[str, Any] = {"nan": np.nan, "none": None, "inf": np.inf, "-inf": -np.inf}


@dataclass(frozen=True)
class Encoding:
    """One output column of an encoder, as a function of its input column's value."""

    reads: str  # the encoder and its input column: output columns of one input share it
    labels: tuple[Any, ...]  # in code order: its categories, then NaN/None/+-inf it answers
    values: np.ndarray  # float64 [labels]: this column's value for each label
    unknown: float  # for any other value (unused where "unknown" is refused)
    refused: dict[str, str]  # kind ("unknown", "nan", "none", "inf", "-inf") -> reason

    def filled(self, fill: float) -> Encoding:
        """The column after a SimpleImputer: NaN values become ``fill``."""
        values = np.where(np.isnan(self.values), fill, self.values)
        unknown = fill if np.isnan(self.unknown) else self.unknown
        return replace(self, values=values, unknown=unknown)


@dataclass(frozen=True)
class Column:
    """A column a Pipeline step gives: computed from one input column."""

    source: int
    fill: Any = None  # what a missing (NaN) input reads as (a SimpleImputer); None: itself
    encoding: Encoding | None = field(default=None)


def encoded_columns(name: str, encoder: Any, columns: list[Column]) -> list[Column]:
    """The encoder's output columns, in its output order."""
    kind = type(encoder).__name__
    widths = _widths(encoder)
    asker = _Asker(encoder, columns)
    out: list[Column] = []
    for i, column in enumerate(columns):
        if column.encoding is not None:
            raise UnsupportedModelError(
                f"Pipeline step {name!r} ({kind}) encodes the output of another encoder: "
                "not supported"
            )
        answers = asker.answers(i)
        out += [
            Column(column.source, encoding=_encoding(f"{name}[{i}]", answers, k, name, kind))
            for k in range(widths[i])
        ]
    return out


def _widths(encoder: Any) -> list[int]:
    """Output columns per input column."""
    if type(encoder).__name__ == "OrdinalEncoder":
        return [1] * len(encoder.categories_)
    return [int(n) for n in encoder._n_features_outs]  # OneHotEncoder, after drop/infrequent


#: Per kind of value: the encoder's output columns for the input column, or its reason.
_Answers = dict[str, np.ndarray | str]


class _Asker:
    """Asks the fitted encoder: one input column varied, the others at a known category."""

    def __init__(self, encoder: Any, columns: list[Column]):
        self.encoder = encoder
        self.columns = columns
        self.categories = [list(np.asarray(c).tolist()) for c in encoder.categories_]
        offsets = np.cumsum([0, *_widths(encoder)]).tolist()
        self.slices = [slice(a, b) for a, b in itertools.pairwise(offsets)]

    def answers(self, i: int) -> tuple[list[Any], _Answers]:
        """Column ``i``'s labels and, per label index (as a string) and per kind of
        special value, what the encoder outputs for it."""
        labels = list(self.categories[i])
        known = self._ask(i, labels)
        if isinstance(known, str):
            raise UnsupportedModelError(f"the encoder refused its own categories: {known}")
        found: _Answers = {str(k): row for k, row in enumerate(known)}
        asked = {"unknown": _unseen(labels), **_SPECIALS}
        for kind, value in asked.items():
            if kind == "nan" and self.columns[i].fill is not None:
                value = self.columns[i].fill  # a SimpleImputer before it fills NaN
            answer = self._ask(i, [value])
            found[kind] = answer if isinstance(answer, str) else answer[0]
        return labels, found

    def _ask(self, i: int, values: list[Any]) -> np.ndarray | str:
        """The encoder's output columns for input column ``i`` holding ``values``, or the
        first line of its refusal."""
        data = {}
        for k, labels in enumerate(self.categories):
            column = values if k == i else [labels[0]] * len(values)
            numeric = np.asarray(labels).dtype.kind in "fiub" and not (k == i and None in values)
            data[k] = np.array(column, dtype=np.float64 if numeric else object)
        names = getattr(self.encoder, "feature_names_in_", None)
        if names is not None:  # fitted on a frame: asked with one, column types kept
            X: Any = pd.DataFrame({name: data[k] for k, name in enumerate(names)})
        else:
            X = np.column_stack(list(data.values()))
        try:
            with warnings.catch_warnings():  # handle_unknown="warn" warns for unseen labels
                warnings.simplefilter("ignore")
                out = self.encoder.transform(X)
        except (ValueError, TypeError) as exc:
            return str(exc).strip().splitlines()[0]
        out = out.toarray() if hasattr(out, "toarray") else np.asarray(out)
        return np.asarray(out[:, self.slices[i]], dtype=np.float64)


def _unseen(labels: list[Any]) -> Any:
    """A value the encoder never saw, of the kind it was fitted on."""
    if any(isinstance(v, str) for v in labels):
        return "\x00unseen"
    numbers = [float(v) for v in labels if value_kind(v) == "label"]
    return max(numbers, default=0.0) + 1.0


def _encoding(
    reads: str, answers: tuple[list[Any], _Answers], k: int, step: str, kind: str
) -> Encoding:
    """Output column ``k`` of an input column, from the encoder's answers."""
    labels, found = answers
    values = [found[str(c)][k] for c in range(len(labels))]
    refused: dict[str, str] = {}
    for special in ("unknown", *_SPECIALS):
        answer = found[special]
        if isinstance(answer, str):
            refused[special] = _reason(answer, step, kind)
            continue
        if special == "unknown":
            continue
        at = next((c for c, v in enumerate(labels) if value_kind(v) == special), None)
        if at is None:
            labels = [*labels, _SPECIALS[special]]
            values.append(answer[k])
        else:
            values[at] = answer[k]  # NaN filled by an imputer before the encoder
    unknown = found["unknown"]
    return Encoding(
        reads=reads,
        labels=tuple(labels),
        values=np.asarray(values, dtype=np.float64),
        unknown=float("nan") if isinstance(unknown, str) else float(unknown[k]),
        refused=refused,
    )


def _reason(message: str, step: str, kind: str) -> str:
    """The encoder's refusal, naming the step, without the value we asked with (the
    error that quotes it names the values found)."""
    said = re.sub(r"^(Found unknown categories) \[.*?\]", r"\1", message)
    return f"step {step!r} ({kind}): {said}"

"""Labels -> codes for the input columns a Pipeline's encoder reads
(:attr:`~scoring._ir.Forest.encoded`).

A value is matched exactly, as scikit-learn's encoders match it: ``1`` and ``1.0`` are
one label, a float32 ``0.1`` is not the label ``0.1``, and NaN and None are two labels
(pandas would call both missing), and +-inf is refused only in a float column, as the
encoder's input check does (elsewhere it is a label like any other).  A value that is
no label reads as code -1, which takes every split's unknown branch, unless the encoder
refuses its kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._ir import Forest
from .errors import InvalidValueError

__all__ = ["encode_labels", "value_kind"]

UNKNOWN = -1.0


def encode_labels(values: np.ndarray, j: int, forest: Forest, label: str) -> np.ndarray:
    """float64 codes of one encoded column's ``values`` (any dtype); ``label`` names the
    column in errors."""
    labels = forest.categories[j]
    kinds_of = [value_kind(v) for v in labels]
    plain = [code for code, kind in enumerate(kinds_of) if kind == "label"]
    found = _index([labels[code] for code in plain], values)
    codes = np.where(found >= 0, np.array([*plain, 0])[found], UNKNOWN)
    special = {kind: code for code, kind in enumerate(kinds_of) if kind != "label"}
    odd = np.flatnonzero(found < 0)
    kinds = _kinds(np.asarray(values)[odd])
    for k, kind in enumerate(_KINDS):
        at = odd[kinds == k]
        if not len(at):
            continue
        if kind in special:
            codes[at] = special[kind]
            continue
        reason = forest.encoded[j].get(kind if kind != "label" else "unknown")
        if reason is not None:
            shown = list(pd.unique(np.asarray(values, dtype=object)[at]))[:5]
            raise InvalidValueError(
                f"feature column {label!r} has {len(at)} value(s) {shown!r} that "
                f"{forest.model_kind} refuses ({reason}): map them to known categories "
                "before scoring"
            )
    return codes.astype(np.float64)


def _index(labels: list[Any], values: np.ndarray) -> np.ndarray:
    """Each value's position in ``labels``, or -1: by float hashing where both are
    numbers, else by Python equality (``1 == 1.0``, text to text)."""
    numbers = all(isinstance(v, (int, float)) for v in labels)
    if numbers and values.dtype.kind in "fiub":
        return pd.Index(np.array(labels, dtype=np.float64)).get_indexer(values.astype(np.float64))
    return pd.Index(labels, dtype=object).get_indexer(np.asarray(values, dtype=object))


_KINDS = ("label", "nan", "none", "inf", "-inf")


def _kinds(values: np.ndarray) -> np.ndarray:
    """Each value's kind as its index in :data:`_KINDS`, without a Python call per value
    but for missing values in object columns (None and NaN told apart)."""
    kinds = np.zeros(len(values), dtype=np.int8)
    if values.dtype.kind == "f":  # the encoder checks only float columns for +-inf
        kinds[np.isnan(values)] = 1
        kinds[values == np.inf] = 3
        kinds[values == -np.inf] = 4
    elif values.dtype == object:
        missing = np.flatnonzero(pd.isna(values))
        found = [value_kind(v) for v in values[missing]]
        kinds[missing] = [_KINDS.index(k) if k in ("nan", "none") else 0 for k in found]
    return kinds


def value_kind(value: Any) -> str:
    """What an encoder may treat apart: "nan", "none", "inf", "-inf"; else "label"."""
    if value is None:
        return "none"
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "nan"
        if np.isinf(value):
            return "inf" if value > 0 else "-inf"
    return "label"

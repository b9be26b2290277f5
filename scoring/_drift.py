"""Score and input drift: a reference profile of each column, counts per run, PSI.

At registration the sample's feature columns and its scores are profiled
(:func:`profile`): a numeric column by the deciles of its values (bin edges) and its
nulls, a text or dictionary column by its most frequent labels, one bin for labels the
sample never had ("unseen") and one for nulls.  A run counts each batch into the same
bins (:func:`count`), a few ``searchsorted`` calls per column; counts are plain lists, so
they travel in journal entries and manifests and add up across files, workers and
resumed runs (:func:`merge`) without a second pass.  :func:`compare` turns reference and
counts into the population stability index per column,
``sum((a - e) * ln(a / e))`` over the bins' shares, with empty bins floored at
:data:`FLOOR` as is usual, so that a bin that empties or fills reads as drift rather than
as infinity.  Nothing here knows of models: columns are Arrow arrays by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

__all__ = ["FLOOR", "ColumnDrift", "Counts", "Profile", "compare", "count", "merge", "profile"]

#: Share given to an empty bin in PSI.
FLOOR = 1e-4
#: Quantile bins of a numeric column; most frequent labels kept of a text column.
BINS = 10
LABELS = 50

#: Per column, rows per bin; the last two bins of a labelled column are unseen and
#: null, the last of a numeric one null.
Counts = dict[str, list[int]]


class ColumnProfile(BaseModel):
    kind: Literal["numeric", "labels"]
    edges: list[float] = []  # numeric: inner bin edges, ascending
    labels: list[str] = []  # labels: the sample's most frequent
    counts: list[int]


class Profile(BaseModel):
    """The reference: per column of ``features`` and of ``outputs``, its bins."""

    rows: int
    features: dict[str, ColumnProfile]
    outputs: dict[str, ColumnProfile]

    def columns(self) -> dict[str, ColumnProfile]:
        """Every profiled column, outputs under ``output:<name>`` (a feature may share
        an output's name)."""
        return {**self.features, **{f"output:{k}": v for k, v in self.outputs.items()}}


class ColumnDrift(BaseModel):
    column: str
    role: Literal["feature", "output"]
    rows: int
    psi: float
    null_rate: float
    reference_null_rate: float
    unseen_rate: float | None  # labelled columns only


def profile(features: pa.Table, outputs: pa.Table) -> Profile:
    """The reference profile of a sample's ``features`` and its scored ``outputs``."""
    return Profile(
        rows=features.num_rows,
        features={n: _profile(features.column(n)) for n in features.column_names},
        outputs={n: _profile(outputs.column(n)) for n in outputs.column_names},
    )


def count(reference: Profile, features: pa.Table, outputs: pa.Table) -> Counts:
    """One batch's rows per bin of every reference column it has.  A null output is a
    row its model did not score (outside the model's row filter), not a score: outputs
    count the rows that have one."""
    found: Counts = {}
    for name, ref in reference.features.items():
        if name in features.column_names:
            found[name] = _count(ref, features.column(name))
    for name, ref in reference.outputs.items():
        if name in outputs.column_names:
            found[f"output:{name}"] = _count(ref, pc.drop_null(outputs.column(name)))
    return found


def merge(total: Counts | None, more: Mapping[str, list[int]] | None) -> Counts | None:
    """``total`` plus ``more``, bin by bin (either may be None: nothing counted); a
    ValueError when they were counted against different references."""
    if more is None:
        return total
    if total is None:
        return {k: list(v) for k, v in more.items()}
    for name, bins in more.items():
        have = total.setdefault(name, [0] * len(bins))
        total[name] = [a + b for a, b in zip(have, bins, strict=True)]
    return total


def compare(reference: Profile, counts: Counts) -> list[ColumnDrift]:
    """PSI, null and unseen rates of every counted column against the reference."""
    result = []
    for name, ref in reference.columns().items():
        if name not in counts or not sum(counts[name]):
            continue
        actual = np.asarray(counts[name], dtype=np.float64)
        expected = np.asarray(ref.counts, dtype=np.float64)
        a = np.maximum(actual / actual.sum(), FLOOR)
        e = np.maximum(expected / max(expected.sum(), 1.0), FLOOR)
        rows = int(actual.sum())
        output = name.startswith("output:")
        result.append(ColumnDrift(
            column=name.removeprefix("output:"), role="output" if output else "feature",
            rows=rows, psi=float(np.sum((a - e) * np.log(a / e))),
            null_rate=float(actual[-1] / rows),
            reference_null_rate=float(expected[-1] / max(expected.sum(), 1.0)),
            unseen_rate=float(actual[-2] / rows) if ref.kind == "labels" else None,
        ))  # fmt: skip
    return result


def _is_numeric(array: pa.ChunkedArray | pa.Array) -> bool:
    t = array.type
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _floats(array: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Values as float64, nulls as NaN."""
    values = pc.cast(array, pa.float64())
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)


def _strings(array: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    if pa.types.is_dictionary(array.type):
        array = pc.cast(array, array.type.value_type)
    return array if pa.types.is_string(array.type) else pc.cast(array, pa.string())


def _profile(array: pa.ChunkedArray) -> ColumnProfile:
    if _is_numeric(array):
        values = _floats(array)
        present = values[~np.isnan(values)]
        finite = present[np.isfinite(present)]
        quantiles = np.quantile(finite, np.linspace(0, 1, BINS + 1)[1:-1]) if finite.size else []
        edges = sorted({float(q) for q in quantiles})
        ref = ColumnProfile(kind="numeric", edges=edges, counts=[])
    else:
        found = pc.value_counts(pc.drop_null(_strings(array)))
        pairs = zip(found.field("counts").to_pylist(), found.field("values").to_pylist(),
                    strict=True)  # fmt: skip
        ranked = sorted(pairs, key=lambda c: (-c[0], c[1]))
        ref = ColumnProfile(kind="labels", labels=[v for _, v in ranked[:LABELS]], counts=[])
    ref.counts = _count(ref, array)
    return ref


def _count(ref: ColumnProfile, array: pa.ChunkedArray | pa.Array) -> list[int]:
    if ref.kind == "numeric":
        values = _floats(array)
        missing = np.isnan(values)
        bins = np.searchsorted(ref.edges, values[~missing], side="right")
        found = np.bincount(bins, minlength=len(ref.edges) + 1)
        return [int(n) for n in found] + [int(missing.sum())]
    strings = _strings(array)
    index = pc.index_in(strings, value_set=pa.array(ref.labels, pa.string()))
    codes = np.asarray(pc.fill_null(index, len(ref.labels)).to_numpy(zero_copy_only=False))
    found = np.bincount(codes, minlength=len(ref.labels) + 1)  # the last: unseen or null
    nulls = strings.null_count
    return [int(n) for n in found[:-1]] + [int(found[-1]) - nulls, nulls]

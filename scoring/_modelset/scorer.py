"""The scorer of a set of models: every member's output columns under its prefix, from
one read of each batch; the same interface as :class:`~scoring._scorer.Scorer`, and
:func:`scorer_for` gives the one a model or a set needs (the only place that asks which).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .._backends.staged import Ready
from .._backends.tensor import finish
from .._inputs import Matrix, prepare_key
from .._progress import StageClock
from .._scorer import Scorer, check_no_clash
from .._where import RowFilter
from ..errors import InputError, MissingColumnError, ScoringError
from .grouping import ModelSet, Scoring, _Group
from .payload import prefixed

__all__ = ["SetScorer", "scorer_for"]


class SetScorer:
    """Scores Arrow batches with every model of a set: kept columns, then each model's
    output columns under its prefix.  The same interface as :class:`Scorer`."""

    def __init__(
        self,
        models: ModelSet,
        *,
        keep: Sequence[str] = (),
        outputs: str | Sequence[str] = "default",
    ):
        self.model = models
        self.keep = list(keep)
        self.scorers = [Scorer(m, keep=(), outputs=outputs) for m in models.models]
        self.output_names = [
            prefixed(prefix, name)
            for prefix, scorer in zip(models.prefixes, self.scorers, strict=True)
            for name in scorer.output_names
        ]
        check_no_clash(self.keep, self.output_names)
        self.alone = models.alone
        self.filters = [RowFilter(w) if w else None for w in models.bundles.filters]
        # Members that read and check their input alike share one matrix per batch.
        self.reads = [(prepare_key(s.forest), w) for s, w in zip(self.scorers,
                      models.bundles.filters, strict=True)]  # fmt: skip
        self.seconds = [0.0] * len(self.scorers)  # scoring time per model (groups: shared)
        self._lock = threading.Lock()

    @property
    def output_schema(self) -> pa.Schema:
        """Every model's output columns under its prefix (kept ones not included)."""
        fields = [f for s in self.scorers for f in s.output_schema]
        return pa.schema([f.with_name(n) for f, n in zip(fields, self.output_names, strict=True)])

    @property
    def batch_rows(self) -> int:
        sizes = [self.scorers[i].batch_rows for i in self.alone]
        return min([*sizes, *(g.backend.batch_rows for g in self.model.groups)])

    def allow_parallel_calls(self, cpus: int) -> int:
        """Side by side only when every model runs on a native predictor that can."""
        alone = [self.scorers[i] for i in self.alone]
        if self.model.groups or any(s.backend.for_parallel_calls() is None for s in alone):
            return 1
        return min(s.allow_parallel_calls(cpus) for s in alone)

    def check_schema(self, schema: pa.Schema) -> None:
        missing = [k for k in self.keep if k not in schema.names]
        if missing:
            raise InputError(f"kept column(s) {missing} are not in the input")
        for i, scorer in enumerate(self.scorers):
            with self._naming(i):
                scorer.check_schema(schema)
                where = self.filters[i]
                absent = [c for c in where.columns if c not in schema.names] if where else []
                if absent:
                    raise MissingColumnError(
                        f"its row filter reads column(s) {absent} that the input lacks"
                    )
                if where is not None:  # what these types cannot mean as in Spark: now
                    where.bind(schema)

    def feature_columns(self, columns: Sequence[str]) -> list[str]:
        """Every input column some model reads, each once."""
        found: list[str] = []
        for i, (scorer, where) in enumerate(zip(self.scorers, self.filters, strict=True)):
            with self._naming(i):
                found += scorer.feature_columns(columns)
            found += where.columns if where else []
        return list(dict.fromkeys(found))

    #: Members' margins come from one combined pass on the host side of the set: a batch
    #: is scored where it is submitted (:meth:`Scorer.submit`).
    in_flight = False

    def allow_in_flight(self, batches: int) -> None:
        return None

    def submit(self, batch: pa.RecordBatch | pa.Table, *, clock: StageClock | None = None,
               stop: threading.Event | None = None) -> Ready:  # fmt: skip
        """:meth:`score` now, as a result ready to read."""
        return Ready(self.score(batch, clock=clock))

    def score(
        self, batch: pa.RecordBatch | pa.Table, *, clock: StageClock | None = None
    ) -> pa.Table:
        """Every member's outputs for ``batch`` (its time is the run's ``score`` stage,
        not split into prepare, kernel and outputs: the members share those steps)."""
        masks = [f.mask(batch) if f else None for f in self.filters]
        read: dict[tuple[str, str | None], tuple[pa.Table, Matrix]] = {}
        outputs: list[list[pa.Array]] = [[] for _ in self.scorers]
        for group in self.model.groups:
            self._score_group(group, batch, masks, read, outputs)
        for i in self.alone:
            began = time.perf_counter()
            with self._naming(i):
                features, mat = self._matrix(i, batch, masks[i], read)
                columns = self.scorers[i].outputs_of(features, mat)
            outputs[i] = [_spread(c, masks[i]) for c in columns]
            self._spent([i], time.perf_counter() - began)
        columns = [batch.column(k) for k in self.keep] + [c for cols in outputs for c in cols]
        return pa.Table.from_arrays(columns, names=self.keep + self.output_names)

    def _score_group(
        self,
        group: _Group,
        batch: pa.RecordBatch | pa.Table,
        masks: list[pa.Array | None],
        read: dict[tuple[str, str | None], tuple[pa.Table, Matrix]],
        outputs: list[list[pa.Array]],
    ) -> None:
        began = time.perf_counter()
        mats = []
        for i in group.members:
            inside = masks[i]
            with self._naming(i):
                mat = self._matrix(i, batch, inside, read)[1]
            # Rows outside a filter walk the trees as missing values; their columns are
            # nulls below.
            mats.append(mat if inside is None else _rows_at(mat, inside))
        margins = group.margins(group.union(mats))
        for i, part in zip(group.members, group.slices, strict=True):
            scorer = self.scorers[i]
            values, raw = finish(scorer.forest, torch.from_numpy(margins[:, part]),
                                 raw=scorer.layout.raw)  # fmt: skip
            explained = scorer.contributions(mats[group.members.index(i)])
            arrays = scorer.layout.arrays(values, raw, scorer.forest, explained)
            inside = masks[i]
            outputs[i] = arrays if inside is None else [_outside_null(a, inside) for a in arrays]
        self._spent(group.members, time.perf_counter() - began)

    def _matrix(
        self,
        i: int,
        batch: pa.RecordBatch | pa.Table,
        inside: pa.Array | None,
        read: dict[tuple[str, str | None], tuple[pa.Table, Matrix]],
    ) -> tuple[pa.Table, Matrix]:
        """Member ``i``'s features and matrix of the rows inside its filter, read once per
        batch for every member that reads alike."""
        if self.reads[i] not in read:
            rows = batch if inside is None else batch.filter(inside)
            read[self.reads[i]] = self.scorers[i].matrix(rows)
        return read[self.reads[i]]

    def restart_clock(self) -> None:
        """Forget the seconds spent so far (a trial's, and the compile it paid for)."""
        with self._lock:
            self.seconds = [0.0] * len(self.scorers)

    def member_report(self, *, timed: bool) -> list[dict[str, Any]]:
        """Each model with the seconds this process spent scoring it (None where workers
        scored: ``timed`` false) and its output columns."""
        out = []
        for i, member in enumerate(self.model.members):
            seconds = self.seconds[i] if timed else None
            columns = [prefixed(member["prefix"], c) for c in self.scorers[i].output_names]
            out.append({**member, "seconds": seconds, "columns": columns})
        return out

    def _spent(self, members: list[int], seconds: float) -> None:
        with self._lock:
            for i in members:
                self.seconds[i] += seconds

    @contextmanager
    def _naming(self, i: int) -> Iterator[None]:
        """A member's error names the member (same error type, so exit codes hold)."""
        try:
            yield
        except ScoringError as exc:
            prefix, ref = self.model.prefixes[i], self.model.bundles.bundles[i].ref
            exc.args = (f"model {prefix!r} ({ref}): {exc}", *exc.args[1:])
            raise


def scorer_for(
    model: Scoring, *, keep: Sequence[str] = (), outputs: str | Sequence[str] = "default"
) -> Scorer | SetScorer:
    """The Scorer of one model or of a set."""
    if isinstance(model, ModelSet):
        return SetScorer(model, keep=keep, outputs=outputs)
    return Scorer(model, keep=keep, outputs=outputs)


def _spread(column: pa.Array | pa.ChunkedArray, inside: pa.Array | None) -> pa.Array:
    """A column of the rows inside a filter, spread back over every row (nulls outside)."""
    if inside is None:
        return column
    positions = pc.subtract(pc.cumulative_sum(pc.cast(inside, pa.int64())), 1)
    taken = pc.if_else(inside, positions, pa.scalar(None, pa.int64()))
    return pc.take(column, taken)


def _outside_null(column: pa.Array | pa.ChunkedArray, inside: pa.Array) -> pa.Array:
    return pc.if_else(inside, column, pa.scalar(None, column.type))


def _rows_at(mat: Matrix, inside: pa.Array) -> np.ndarray:
    """The matrix of the rows inside a filter, at their places among every row (NaN
    elsewhere)."""
    rows = mat.cpu().numpy() if isinstance(mat, torch.Tensor) else mat
    full = np.full((len(inside), rows.shape[1]), np.nan, dtype=rows.dtype)
    full[inside.to_numpy(zero_copy_only=False)] = rows
    return full

"""The Scorer: Arrow record batches in, output columns out, one model pass per batch.

Columns are matched to the model's features by name (models trained on unnamed data
read ``f0``, ``f1``, ... or ``Column_0``, ... by name, never columns by position);
ints, bools, decimals become floats, nulls become NaN (missing), and categorical
features (dictionary, string or category columns) are mapped with the model's own
categories.  The rows are validated once here, then handed to the model's backend
through :class:`scoring._backends.Backend` (device transfers and out-of-memory retries
are the backend's); the output columns follow the model's
:class:`~scoring._outputs.OutputLayout`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ._backends import Backend
from ._compiler.contributions import Contributions
from ._inputs import Columns, Matrix, feature_names, named_columns, prepare
from ._model import CompiledModel
from ._outputs import OutputLayout
from ._progress import StageClock
from .errors import InputError, MissingColumnError, NonNumericColumnError

__all__ = ["PendingTable", "Scorer", "check_no_clash"]


def check_no_clash(keep: Sequence[str], outputs: Sequence[str]) -> None:
    """Kept columns and output columns never share a name (one scorer's or a set's)."""
    clash = sorted(set(keep) & set(outputs))
    if clash:
        raise InputError(
            f"kept column(s) {clash} would collide with the output columns; rename them"
        )


class Scorer:
    """Scores Arrow batches with a compiled model; see the module docstring."""

    def __init__(
        self,
        model: CompiledModel,
        *,
        keep: Sequence[str] = (),
        outputs: str | Sequence[str] = "default",
    ):
        self.model = model
        self.forest = model.forest
        self.keep = list(keep)
        self.layout = OutputLayout.of(self.forest, outputs)
        self.names = feature_names(self.forest)
        self.output_names = list(self.layout.names)
        check_no_clash(self.keep, self.output_names)
        self.backend: Backend = model.implementation
        self._selected: dict[tuple[str, ...], list[str]] = {}

    @property
    def batch_rows(self) -> int:
        return self.backend.batch_rows

    @property
    def output_schema(self) -> pa.Schema:
        """The output columns (kept ones not included)."""
        return self.layout.schema

    def allow_parallel_calls(self, cpus: int) -> int:
        """How many ``score`` calls may run side by side on ``cpus`` CPUs (the caller's
        promise).  Past one, the backend runs on one thread per call: one call spread
        over every core waits at each batch for its slowest thread, and on a busy
        machine that is the one sharing a core with the reader or writer."""
        parallel = self.backend.for_parallel_calls() if cpus >= 2 else None
        if parallel is None:
            return 1
        self.backend = parallel
        return cpus

    def restart_clock(self) -> None:
        """Forget the seconds spent so far (one model keeps no count of its own)."""

    def member_report(self, *, timed: bool) -> list[dict[str, Any]]:
        """Each model of a set with its seconds and columns (one model: none)."""
        return []

    # -- schema --------------------------------------------------------------------

    @property
    def label_columns(self) -> list[str]:
        """Named features that were pandas categories in training: a Parquet column holds
        their labels (pandas writes non-string categories as plain values)."""
        if self.forest.recode_categories or not self.names:
            return []  # raw values are recoded by prepare() already
        return [self.names[j] for j in self.forest.categories if j not in self.forest.encoded]

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse, before anything is written, a schema the model cannot read."""
        missing = [k for k in self.keep if k not in schema.names]
        if missing:
            raise InputError(f"kept column(s) {missing} are not in the input")
        for j, name in enumerate(self.feature_columns(schema.names)):
            typ = schema.field(name).type
            if pa.types.is_dictionary(typ):
                typ = typ.value_type
            numeric = (
                pa.types.is_integer(typ) or pa.types.is_floating(typ)
                or pa.types.is_boolean(typ) or pa.types.is_decimal(typ) or pa.types.is_null(typ)
            )  # fmt: skip
            textual = pa.types.is_string(typ) or pa.types.is_large_string(typ)
            if not numeric and not (textual and j in self.forest.categories):
                raise NonNumericColumnError(
                    f"feature column {name!r} has non-numeric type {typ}; "
                    f"{self.forest.described} needs numbers (or categories it was trained with)"
                )

    def feature_columns(self, columns: Sequence[str]) -> list[str]:
        """The input columns the model reads, in feature order."""
        key = tuple(columns)
        if key not in self._selected:
            self._selected[key] = self._select(columns)
        return self._selected[key]

    def _select(self, columns: Sequence[str]) -> list[str]:
        named = named_columns(columns, self.forest)
        if named is not None:
            return named
        # Reading by position would silently score the wrong features the day a file's
        # columns come in another order, so an unnamed model takes its generic names.
        n = self.forest.n_features
        extra = [c for c in columns if c not in set(self.keep)]
        raise MissingColumnError(
            f"{self.forest.described} was trained without feature names, and the input "
            f"has none of f0..f{n - 1} (found {', '.join(extra[:8])}); give the model its "
            "names when training (a DataFrame, or booster.feature_names = [...]) and "
            f"register it again, or name the {n} input columns f0..f{n - 1} in the model's "
            "feature order"
        )

    # -- scoring -------------------------------------------------------------------

    def score(
        self, batch: pa.RecordBatch | pa.Table, *, clock: StageClock | None = None
    ) -> pa.Table:
        """Kept columns, then the output columns, for every row of ``batch`` (``clock``:
        the busy seconds of its prepare, kernel and outputs steps are added to it)."""
        clock = clock or StageClock()
        with clock.timing("prepare"):
            features, mat = self.matrix(batch, columns=self.backend.takes_columns)
        columns = [batch.column(k) for k in self.keep] + self.outputs_of(features, mat, clock=clock)
        return pa.Table.from_arrays(columns, names=self.keep + self.output_names)

    def allow_in_flight(self, batches: int) -> None:
        """Batches the device may hold at once (the engine's: two per file lane)."""
        allow = getattr(self.backend, "allow_in_flight", None)
        if allow is not None:
            allow(batches)

    @property
    def in_flight(self) -> bool:
        """Whether batches are submitted and read later (:meth:`submit`): a CUDA device
        holds several at once; on the host a batch is scored where it is submitted."""
        return self.backend.device.type == "cuda"

    def submit(
        self, batch: pa.RecordBatch | pa.Table, *, clock: StageClock | None = None,
        stop: threading.Event | None = None,
    ) -> PendingTable:  # fmt: skip
        """:meth:`score` with the model pass in flight: the matrix is built here, the
        backend's steps queued, and the returned table pending until they are done."""
        clock = clock or StageClock()
        with clock.timing("prepare"):
            features, mat = self.matrix(batch, columns=self.backend.takes_columns)
        with clock.timing("kernel"):  # queueing the steps; the wait is the writer's
            pending = self.backend.submit(features, mat, raw=self.layout.raw, stop=stop)
        return PendingTable(self, batch, mat, pending, clock)

    def outputs_of(
        self, features: pa.Table, mat: Matrix | Columns, *, clock: StageClock | None = None
    ) -> list[pa.Array]:
        """The output columns of rows already read by :meth:`matrix`."""
        clock = clock or StageClock()
        with clock.timing("kernel"):
            values, raw = self.backend.score(features, mat, raw=self.layout.raw)
        return self._arrays(values, raw, mat, clock)

    def _arrays(self, values: np.ndarray, raw: np.ndarray | None, mat: Matrix | Columns,
                clock: StageClock) -> list[pa.Array]:  # fmt: skip
        with clock.timing("kernel"):
            contributions = self.contributions(mat)
        with clock.timing("outputs"):
            return self.layout.arrays(values, raw, self.forest, contributions)

    def contributions(self, mat: Matrix | Columns) -> np.ndarray | None:
        """``[rows, outputs, features + 1]`` when the layout explains, else None: the
        backend's, or where it has none (a framework without TreeSHAP of its own behind
        ``native``, hummingbird) ours from the model's trees, so that ``auto`` picking a
        predictor for speed never refuses a run its explanations."""
        if not self.layout.explain.any:
            return None
        if isinstance(mat, Columns):  # explaining reads rows
            mat = mat.rows()
        if self.backend.explains:
            return self.backend.predict_contributions(mat)
        return self._tree_shap(torch.as_tensor(mat)).cpu().numpy()

    @cached_property
    def _tree_shap(self) -> Contributions:
        return Contributions(self.forest, device=self.backend.device)

    @overload
    def matrix(self, batch: pa.RecordBatch | pa.Table, *,
               columns: Literal[False] = False) -> tuple[pa.Table, Matrix]: ...  # fmt: skip
    @overload
    def matrix(self, batch: pa.RecordBatch | pa.Table, *,
               columns: bool) -> tuple[pa.Table, Matrix | Columns]: ...  # fmt: skip
    def matrix(self, batch: pa.RecordBatch | pa.Table, *, columns: bool = False
               ) -> tuple[pa.Table, Matrix | Columns]:  # fmt: skip
        """The model's feature columns of ``batch`` and their validated matrix (with
        ``columns``, feature-major as read: :class:`Columns`)."""
        features = _as_labels(batch.select(self.feature_columns(batch.schema.names)), self)
        # typed errors for what native refuses
        return features, prepare(features, self.forest, columns=columns)


class PendingTable:
    """A submitted batch's table (:meth:`Scorer.submit`): :meth:`result` waits for its
    device steps, then builds the output columns."""

    def __init__(self, scorer: Scorer, batch: pa.RecordBatch | pa.Table, mat: Matrix | Columns,
                 pending: Any, clock: StageClock):  # fmt: skip
        self.scorer, self.batch, self.mat, self.pending, self.clock = (
            scorer, batch, mat, pending, clock)  # fmt: skip

    def result(self) -> pa.Table:
        scorer = self.scorer
        with self.clock.timing("kernel"):  # the wait for the device
            values, raw = self.pending.result()
        columns = [self.batch.column(k) for k in scorer.keep]
        columns += scorer._arrays(values, raw, self.mat, self.clock)
        return pa.Table.from_arrays(columns, names=scorer.keep + scorer.output_names)

    def cancel(self) -> None:
        self.pending.cancel()


def _as_labels(features: pa.RecordBatch | pa.Table, scorer: Scorer) -> pa.Table:
    """Numeric columns of label-carrying categorical features, as dictionaries."""
    table = pa.Table.from_batches([features]) if isinstance(features, pa.RecordBatch) else features
    for name in scorer.label_columns:
        i = table.schema.get_field_index(name)
        col = table.column(i)
        if not (pa.types.is_dictionary(col.type) or pa.types.is_string(col.type)):
            table = table.set_column(i, name, pc.dictionary_encode(col))
    return table

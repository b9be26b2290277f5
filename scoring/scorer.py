"""The Scorer: Arrow record batches in, output columns out, one model pass per batch.

Columns are matched to the model's features by name (models trained on unnamed data
read the columns that are not kept, in order, or else ``f0``, ``f1``, ... when the input
has them all); ints, bools, decimals become floats,
nulls become NaN (missing), and categorical features (dictionary, string or category
columns) are mapped with the model's own categories.  On CUDA each batch goes through a
pinned host buffer with a non-blocking copy, the batch size comes from free device
memory, and an out-of-memory batch is split and retried instead of failing the job.

Output columns (after the kept ones): binary classifiers ``probability`` (of the
positive class) and ``label``; multiclass ``probability_<class>`` per class and
``label``; regression, ranking and anomaly models ``prediction``; ``raw`` (or
``raw_<class>``) margins when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .backends._outputs import predictions, probabilities
from .errors import FeatureCountError, InputError, NonNumericColumnError, ResourceLimitError
from .inputs import feature_names, prepare, select_columns
from .ir import Forest
from .model import CompiledModel

__all__ = ["OUTPUT_SETS", "Scorer", "cuda_batch_rows"]

OUTPUT_SETS = ("default", "raw", "all")
#: Rows per batch on CPU (and the most on CUDA): big enough to amortise per-call costs.
CPU_BATCH_ROWS = 131_072
CUDA_MAX_BATCH_ROWS = 1 << 21


def cuda_batch_rows(forest: Forest, device: torch.device, *, fraction: float = 0.5) -> int:
    """Rows whose input, margins and intermediates fit in ``fraction`` of free memory."""
    free, _ = torch.cuda.mem_get_info(device)
    # inputs (float64 worst case), margins and values, and the strategy's per-row tables.
    per_row = 8 * forest.n_features + 16 * forest.n_outputs + 8 * max(forest.n_trees, 1) * 4
    return int(max(1024, min(CUDA_MAX_BATCH_ROWS, free * fraction // per_row)))


@dataclass
class _Pass:
    values: np.ndarray  # transformed outputs [B, K] or class probabilities
    raw: np.ndarray | None


class Scorer:
    """Scores Arrow batches with a compiled model; see the module docstring."""

    def __init__(
        self,
        model: CompiledModel,
        *,
        keep: Sequence[str] = (),
        outputs: str = "default",
        ignore: Sequence[str] = (),
    ):
        if outputs not in OUTPUT_SETS:
            raise InputError(f"outputs={outputs!r}: expected one of {', '.join(OUTPUT_SETS)}")
        self.model = model
        self.forest = model.forest
        self.keep = list(keep)
        self.ignore = set(ignore)  # never features of an unnamed model (partition keys)
        self.raw = outputs in ("raw", "all")
        self.names = feature_names(self.forest)
        self.output_names = self._output_names()
        clash = sorted(set(self.keep) & set(self.output_names))
        if clash:
            raise InputError(
                f"kept column(s) {clash} would collide with the output columns; rename them"
            )
        on_cuda = model.device.type == "cuda"
        self.batch_rows = cuda_batch_rows(self.forest, model.device) if on_cuda else CPU_BATCH_ROWS
        self._pinned: torch.Tensor | None = None
        self._selected: dict[tuple[str, ...], list[str]] = {}
        self._native = model._impl  # the checks were CompiledModel's: not twice

    def allow_parallel_calls(self, cpus: int) -> int:
        """How many ``score`` calls may run side by side on ``cpus`` CPUs (the caller's
        promise).  Past one, the native predictor runs on one thread per call: one call
        spread over every core waits at each batch for its slowest thread, and on a busy
        machine that is the one sharing a core with the reader or writer (scikit-learn
        forests use one thread unless told otherwise, so they gain the most)."""
        if cpus < 2 or self._one_thread is None:
            return 1  # torch spreads one call itself; a GPU takes one call at a time
        self._native = self._one_thread
        return cpus

    @cached_property
    def _one_thread(self) -> Any:
        """The native predictor on one thread per call, copied once per Scorer (an actor
        runs the engine once per file)."""
        return self.model._impl.one_thread() if self.model.backend == "native" else None

    # -- schema --------------------------------------------------------------------

    def _classes(self) -> list[Any]:
        if self.forest.classes is not None:
            return list(np.asarray(self.forest.classes).tolist())
        return list(range(max(self.forest.n_outputs, 2)))

    def _output_names(self) -> list[str]:
        task = self.forest.task
        if task == "binary":
            names = ["probability", "label"]
            raw = ["raw"]
        elif task == "multiclass":
            names = [f"probability_{c}" for c in self._classes()] + ["label"]
            raw = [f"raw_{c}" for c in self._classes()]
        else:
            names = ["prediction"]
            raw = ["raw"] if self.forest.n_outputs == 1 else []
        return names + (raw if self.raw else [])

    @property
    def label_columns(self) -> list[str]:
        """Named features that were pandas categories in training: a Parquet column holds
        their labels (pandas writes non-string categories as plain values)."""
        if self.forest.recode_categories or not self.names:
            return []  # raw values are recoded by prepare() already
        return [self.names[j] for j in self.forest.categories]

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
                    f"{self.forest.model_kind} needs numbers (or categories it was trained with)"
                )

    def feature_columns(self, columns: Sequence[str]) -> list[str]:
        """The input columns the model reads, in feature order."""
        key = tuple(columns)
        if key not in self._selected:
            self._selected[key] = self._select(columns)
        return self._selected[key]

    def _select(self, columns: Sequence[str]) -> list[str]:
        if self.names is not None:
            return [str(c) for c in select_columns(columns, self.forest)]
        features = [c for c in columns if c not in set(self.keep) | self.ignore]
        generic = [f"f{i}" for i in range(self.forest.n_features)]
        if len(features) != self.forest.n_features and set(generic) <= set(columns):
            return generic  # the names XGBoost gives unnamed features, all present
        if len(features) != self.forest.n_features:
            raise FeatureCountError(
                f"{self.forest.model_kind} has no feature names, so it reads every input "
                f"column that is not kept or a partition key: found {len(features)} "
                f"({', '.join(features[:8])}), it needs {self.forest.n_features}; "
                "keep the extra columns or drop them"
            )
        return features

    # -- scoring -------------------------------------------------------------------

    def score(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """Kept columns, then the output columns, for every row of ``batch``."""
        features = _as_labels(batch.select(self.feature_columns(batch.schema.names)), self)
        passes = self._run(features)
        columns = [batch.column(k) for k in self.keep] + self._columns(passes)
        return pa.Table.from_arrays(columns, names=self.keep + self.output_names)

    def _run(self, features: pa.RecordBatch | pa.Table) -> _Pass:
        if self.model.backend != "tensor":
            return self._native_pass(features)
        mat = prepare(features, self.forest)
        return self._tensor_pass(mat)

    def _native_pass(self, features: pa.RecordBatch | pa.Table) -> _Pass:
        mat = prepare(features, self.forest)  # the same typed errors as the tensor path
        X: Any = mat
        if self.forest.categorical_features:
            X = _native_frame(features)  # categories go to the framework as labels
        elif self.names:  # numbers only: the validated matrix, named without copies
            X = pd.DataFrame(mat, columns=self.names, copy=False)
        impl = self._native
        values = (
            impl.predict_proba(X)
            if self.forest.task in ("binary", "multiclass")
            else impl.predict(X)
        )
        raw = impl.predict_raw(X) if self.raw else None
        return _Pass(np.asarray(values), raw)

    def _tensor_pass(self, mat: np.ndarray | torch.Tensor) -> _Pass:
        try:
            return self._tensor_once(mat)
        except torch.cuda.OutOfMemoryError:
            if len(mat) <= 1:
                raise ResourceLimitError(
                    f"a single row does not fit on {self.model.device}; use device='cpu'"
                ) from None
            torch.cuda.empty_cache()
            half = len(mat) // 2
            self.batch_rows = max(1024, half)  # later batches start smaller
            first, second = self._tensor_pass(mat[:half]), self._tensor_pass(mat[half:])
            raw = None
            if first.raw is not None and second.raw is not None:
                raw = np.concatenate([first.raw, second.raw])
            return _Pass(np.concatenate([first.values, second.values]), raw)

    @torch.inference_mode()
    def _tensor_once(self, mat: np.ndarray | torch.Tensor) -> _Pass:
        impl = self.model._impl
        margins = impl.margins(self._to_device(mat))
        values = impl.transform(margins).cpu().numpy()
        if self.forest.task in ("binary", "multiclass"):
            values = probabilities(self.forest, values)
        elif self.forest.task != "anomaly":
            values = values[:, 0] if values.shape[1] == 1 else values
        raw = None
        if self.raw:  # an anomaly model's raw score is its decision_function
            raw = values if self.forest.task == "anomaly" else margins.cpu().numpy()
        return _Pass(values, raw)

    def _to_device(self, mat: np.ndarray | torch.Tensor) -> torch.Tensor:
        host = torch.as_tensor(mat)
        if self.model.device.type != "cuda" or host.device.type != "cpu":
            return host
        n = host.shape[0]
        if self._pinned is None or self._pinned.shape[0] < n or self._pinned.dtype != host.dtype:
            self._pinned = torch.empty(
                (max(n, self.batch_rows), host.shape[1]), dtype=host.dtype, pin_memory=True
            )
        staged = self._pinned[:n]
        staged.copy_(host)
        return staged.to(self.model.device, non_blocking=True)

    def _columns(self, p: _Pass) -> list[pa.Array]:
        task = self.forest.task
        if task in ("binary", "multiclass"):
            proba = p.values
            labels = np.asarray(self._classes())[np.argmax(proba, axis=1)]
            cols = (
                [proba[:, 1]] if task == "binary" else [proba[:, i] for i in range(proba.shape[1])]
            )
            out = [pa.array(c) for c in cols] + [pa.array(labels)]
        elif task == "anomaly":
            out = [pa.array(predictions(self.forest, p.values.reshape(len(p.values), -1)))]
        else:
            out = [pa.array(p.values)]
        if p.raw is not None:
            raw = p.raw.reshape(len(p.raw), -1)
            out += [pa.array(raw[:, i]) for i in range(raw.shape[1])]
        return out


def _native_frame(features: pa.RecordBatch | pa.Table) -> pd.DataFrame:
    """What the frameworks read: floats (ints, bools, decimals cast; nulls as NaN) and
    pandas categories for dictionary columns."""
    columns = {}
    for name, col in zip(features.schema.names, features.columns, strict=True):
        typ = col.type
        if not (pa.types.is_dictionary(typ) or pa.types.is_floating(typ)):
            col = pc.cast(col, pa.float64())
        columns[name] = col
    return pa.table(columns).to_pandas()


def _as_labels(features: pa.RecordBatch | pa.Table, scorer: Scorer) -> pa.Table:
    """Numeric columns of label-carrying categorical features, as dictionaries."""
    table = pa.Table.from_batches([features]) if isinstance(features, pa.RecordBatch) else features
    for name in scorer.label_columns:
        i = table.schema.get_field_index(name)
        col = table.column(i)
        if not (pa.types.is_dictionary(col.type) or pa.types.is_string(col.type)):
            table = table.set_column(i, name, pc.dictionary_encode(col))
    return table

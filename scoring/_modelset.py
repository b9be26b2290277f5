"""Several models in one pass over the data: read once, score every model, one kernel.

A job, ``score_parquet`` or the Ray/Spark helpers may name a list of models where they
name one.  The input is read once per batch; every model takes its own feature columns
by name (with its own categories and validation) and writes its outputs under its
prefix: ``<prefix>__<column>``, the prefix defaulting to the model's registered name.
A model may carry a row filter (``where``, :mod:`scoring._where`): it scores only the
rows inside it (the others are never validated by it) and writes nulls for the rest.

* :class:`BundleSet`: what identifies the set and travels to workers: each member's
  bundle and prefix, one payload (:func:`load_payload` reads either kind).
* :class:`ModelSet`: the set compiled.  Models whose margins are a plain sum share one
  compiled forest per kind of node semantics (:mod:`scoring._compiler.group`): with the
  tensor backend, N models cost one traversal per block of rows, not N.  Any other model
  (a native predictor, an averaging forest, a chain) is scored alone from the same batch.
  ``backend="auto"`` on CPU times the combined forest against the native predictors on
  probe rows and keeps the faster, as a single model's ``auto`` does.
* :class:`SetScorer`: the :class:`~scoring._scorer.Scorer` of a set, which the engines
  use as they use a model's.

The set's sha256 covers every member's sha256, prefix and filter, so a job key, a resume or a
kept output is never mistaken for another set's.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import zipfile
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ._backends import module_bytes
from ._backends.native import NativeBackend
from ._backends.staged import Ready
from ._backends.tensor import TensorBackend, finish
from ._bundle import Bundle
from ._compiler import fused_pays
from ._compiler.group import combinable, combine, semantics, shared_key
from ._inputs import Matrix, prepare_key
from ._model import (
    CompiledModel,
    bundle_origin,
    compile_imported,
    compile_model,
    medians_in_alternation,
    resolve_device,
)
from ._parity import probe_rows
from ._progress import StageClock
from ._scorer import Scorer
from ._version import __version__
from ._where import RowFilter
from .errors import ConfigError, InputError, MissingColumnError, ModelFileError, ScoringError

__all__ = [
    "SEPARATOR", "BundleSet", "ModelSet", "Scoring", "SetScorer", "compile_payload",
    "compile_set", "load_payload", "prefixed", "scorer_for",
]  # fmt: skip

#: Between a model's prefix and its column name: ``churn__probability``.
SEPARATOR = "__"
_MANIFEST = "modelset.json"


def prefixed(prefix: str, column: str) -> str:
    """A member's output column as the set writes it: ``churn__probability``."""
    return f"{prefix}{SEPARATOR}{column}"


@dataclass(frozen=True)
class BundleSet:
    """Models scored together: each one's bundle, output prefix and row filter."""

    bundles: tuple[Bundle, ...]
    prefixes: tuple[str, ...]
    filters: tuple[str | None, ...] = ()  # per model (empty: none has one)

    def __post_init__(self) -> None:
        if not self.bundles:
            raise ConfigError("an empty list of models: name at least one")
        if not self.filters:
            object.__setattr__(self, "filters", (None,) * len(self.bundles))
        for where in self.filters:
            if where is not None:
                RowFilter(where)  # a syntax error now, naming the filter
        seen: dict[str, str] = {}
        for bundle, prefix in zip(self.bundles, self.prefixes, strict=True):
            if not prefix or SEPARATOR in prefix:
                raise ConfigError(
                    f"model {bundle.ref}: prefix {prefix!r} must be non-empty and hold no "
                    f"{SEPARATOR!r}"
                )
            if prefix in seen:
                raise ConfigError(
                    f"models {seen[prefix]} and {bundle.ref} would both write columns "
                    f"{prefix}{SEPARATOR}...; give each its own prefix"
                )
            seen[prefix] = bundle.ref

    @property
    def sha256(self) -> str:
        members = [
            [p, b.sha256, *([w] if w else [])]
            for p, b, w in zip(self.prefixes, self.bundles, self.filters, strict=True)
        ]
        return hashlib.sha256(json.dumps(members).encode()).hexdigest()

    @property
    def ref(self) -> str:
        return " + ".join(b.ref for b in self.bundles)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
            manifest = {"format": "scoring-modelset", "prefixes": list(self.prefixes),
                        "filters": list(self.filters)}  # fmt: skip
            zf.writestr(_MANIFEST, json.dumps(manifest))
            for i, bundle in enumerate(self.bundles):
                zf.writestr(f"member_{i}.bundle", bundle.to_bytes())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleSet:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            manifest = json.loads(archive.read(_MANIFEST))
            prefixes = manifest["prefixes"]
            bundles = [Bundle.from_bytes(archive.read(f"member_{i}.bundle"))
                       for i in range(len(prefixes))]  # fmt: skip
        return cls(tuple(bundles), tuple(prefixes), tuple(manifest.get("filters") or ()))


def load_payload(data: bytes) -> Bundle | BundleSet:
    """A worker's payload: one model's bundle or a set's (each checksum verified)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            is_set = _MANIFEST in archive.namelist()
    except zipfile.BadZipFile as exc:
        raise ModelFileError(f"not a scoring bundle: {exc}") from exc
    return BundleSet.from_bytes(data) if is_set else Bundle.from_bytes(data)


# -- compiled ----------------------------------------------------------------------


@dataclass
class _Group:
    """Models sharing one combined forest: member indices, where each member's features
    sit among the combined columns, and each member's slice of the margins."""

    members: list[int]
    columns: list[list[int]]
    width: int
    slices: list[slice]
    backend: TensorBackend

    def __post_init__(self) -> None:
        # Each combined column is copied from the first member that reads it: a shared
        # column holds the same value in every member's matrix.
        seen: set[int] = set()
        self.fills: list[tuple[list[int], list[int]]] = []
        for cols in self.columns:
            new = [(j, c) for j, c in enumerate(cols) if c not in seen]
            seen.update(c for _, c in new)
            self.fills.append(([j for j, _ in new], [c for _, c in new]))

    def union(self, mats: Sequence[Matrix]) -> np.ndarray:
        """The combined columns from each member's validated matrix (float64 if any
        member reads float64)."""
        arrays = [m.cpu().numpy() if isinstance(m, torch.Tensor) else m for m in mats]
        dtype = np.result_type(*(a.dtype for a in arrays))
        out = np.empty((arrays[0].shape[0], self.width), dtype=dtype)
        for array, (own, combined) in zip(arrays, self.fills, strict=True):
            if not own:
                continue
            if own == list(range(array.shape[1])) and combined == list(
                range(combined[0], combined[0] + len(combined))
            ):  # the member's whole matrix as one block of columns
                out[:, combined[0] : combined[0] + len(combined)] = array
            else:
                out[:, combined] = array[:, own]
        return out

    def margins(self, mat: np.ndarray) -> np.ndarray:
        values, _ = self.backend.score(pa.table({}), mat, raw=False)
        return values.reshape(mat.shape[0], -1)


@dataclass
class ModelSet:
    """A compiled set of models; see the module docstring.  ``models[i]`` is member
    ``i``'s compiled model: what scores it, unless a group does (then a native stand-in
    that names its columns)."""

    bundles: BundleSet
    models: list[CompiledModel]
    groups: list[_Group]
    device: torch.device
    selection: dict[str, float] = field(default_factory=dict)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return self.bundles.prefixes

    @property
    def sha256(self) -> str:
        return self.bundles.sha256

    @property
    def ref(self) -> str:
        return self.bundles.ref

    @property
    def alone(self) -> list[int]:
        """The members no group scores."""
        grouped = {i for g in self.groups for i in g.members}
        return [i for i in range(len(self.models)) if i not in grouped]

    def _group_of(self, i: int) -> _Group | None:
        return next((g for g in self.groups if i in g.members), None)

    def backend_of(self, i: int) -> str:
        return "tensor" if self._group_of(i) else self.models[i].backend

    def strategy_of(self, i: int) -> str | None:
        group = self._group_of(i)
        return group.backend.strategy if group else self.models[i].strategy

    @property
    def backend(self) -> str:
        return "+".join(dict.fromkeys(self.backend_of(i) for i in range(len(self.models))))

    @property
    def strategy(self) -> str | None:
        found = {self.strategy_of(i) or "" for i in range(len(self.models))} - {""}
        return "+".join(sorted(found)) or None

    def output_metadata(self) -> dict[str, str]:
        """What a scored output's schema records of the models that scored it."""
        return {
            "scoring.version": __version__,
            "scoring._model": self.ref,
            "scoring._model.sha256": self.sha256,
            "scoring.models": json.dumps(self.members),
            "scoring.backend": self.backend,
            "scoring.strategy": self.strategy or "",
            "scoring.device": str(self.device),
        }

    def device_bytes(self) -> int:
        """Bytes its groups' and its other members' compiled tensors take on the device."""
        groups = sum(module_bytes(g.backend) for g in self.groups)
        return groups + sum(self.models[i].device_bytes() for i in self.alone)

    @property
    def members(self) -> list[dict[str, Any]]:
        """Each model's prefix, name, version, sha256 and how it is scored."""
        out = []
        for i, (bundle, prefix) in enumerate(zip(self.bundles.bundles, self.prefixes, strict=True)):
            group = self._group_of(i)
            out.append({
                "prefix": prefix, "ref": bundle.ref, "name": bundle.manifest["name"],
                "where": self.bundles.filters[i],
                "version": bundle.manifest["version"], "sha256": bundle.sha256,
                "backend": self.backend_of(i), "strategy": self.strategy_of(i),
                "combined_with": len(group.members) if group else 1,
            })  # fmt: skip
        return out


def compile_set(
    bundles: BundleSet, *, backend: str = "auto", device: str | torch.device = "auto",
    strategy: str = "auto", verify: bool = True,
) -> ModelSet:  # fmt: skip
    """Compile every member; combine those that can share a forest (see module docs)."""
    dev = resolve_device(device)
    restored = [b.restore() for b in bundles.bundles]
    forests = [forest for _, forest in restored]
    combined = backend == "tensor" or (backend == "auto" and dev.type == "cuda")
    groups = (
        _groups(forests, bundles.filters, dev, strategy) if combined or backend == "auto" else []
    )
    selection: dict[str, float] = {}
    if backend == "auto" and dev.type == "cpu" and groups:
        groups, selection = _faster_on_cpu(groups, restored)
    grouped = {i for g in groups for i in g.members}
    alone = "native" if backend == "auto" and dev.type == "cpu" and not combined else backend
    models = []
    for i, (model, forest) in enumerate(restored):
        if i in grouped:  # its group scores it: a stand-in that compiles nothing
            cm = CompiledModel(forest=forest, implementation=NativeBackend(model, forest))
        else:
            cm = compile_imported(model, forest, backend=alone, device=dev, strategy=strategy,
                                  verify=verify)  # fmt: skip
        cm.origin = bundle_origin(bundles.bundles[i])
        models.append(cm)
    return ModelSet(bundles, models, groups, dev, selection)


def _groups(
    forests: list[Any], filters: Sequence[str | None], device: torch.device, strategy: str
) -> list[_Group]:
    """Combinable forests, one group per kind of node semantics."""
    by_kind: dict[Hashable, list[int]] = {}
    for i, forest in enumerate(forests):
        if combinable(forest):
            by_kind.setdefault(semantics(forest), []).append(i)
    return [_group(members, forests, filters, device, strategy) for members in by_kind.values()]


def _group(
    members: list[int],
    forests: list[Any],
    filters: Sequence[str | None],
    device: torch.device,
    strategy: str,
) -> _Group:
    keys: dict[Hashable, int] = {}
    columns: list[list[int]] = []
    for i in members:
        forest = forests[i]
        names = forest.feature_names or [f"f{j}" for j in range(forest.n_features)]
        cols = []
        for j, name in enumerate(names):
            # A filtered member's rows outside its filter read as missing: its own columns.
            key = None if filters[i] else shared_key(forest, j, name)
            key = (i, j) if key is None else key
            cols.append(keys.setdefault(key, len(keys)))
        columns.append(cols)
    merged = combine([forests[i] for i in members], columns, len(keys))
    if strategy == "auto" and fused_pays(merged):
        strategy = "fused"  # one kernel per block of rows: the point of combining
    slices, start = [], 0
    for i in members:
        slices.append(slice(start, start + forests[i].n_outputs))
        start += forests[i].n_outputs
    backend = TensorBackend(merged, device=device, strategy=strategy)
    return _Group(members, columns, len(keys), slices, backend)


def _faster_on_cpu(
    groups: list[_Group], restored: list[tuple[Any, Any]]
) -> tuple[list[_Group], dict[str, float]]:
    """Each group kept where its combined forest scores probe rows faster than its
    members' native predictors one after the other, timed in alternation over rounds
    (:func:`medians_in_alternation`); both medians kept."""
    kept, timings = [], {}
    for n, group in enumerate(groups):
        rows = [_probe(restored[i][1]) for i in group.members]
        union = group.union(rows)
        natives = [NativeBackend(*restored[i]) for i in group.members]
        (combined, apart), _ = medians_in_alternation(
            [partial(group.margins, union), partial(_in_turn, natives, rows)]
        )
        timings[f"group{n}:tensor"], timings[f"group{n}:native"] = combined, apart
        if combined <= apart:
            kept.append(group)
    return kept, timings


def _in_turn(natives: list[NativeBackend], rows: list[np.ndarray]) -> None:
    for native, x in zip(natives, rows, strict=True):
        native.predict_raw(x)


def _probe(forest: Any) -> np.ndarray:
    rows = probe_rows(forest, n_rows=4096, special=False)
    return rows.astype(np.float32 if forest.input_dtype == "float32" else np.float64)


# -- scoring -----------------------------------------------------------------------


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
        clash = sorted(set(self.keep) & set(self.output_names))
        if clash:
            raise InputError(
                f"kept column(s) {clash} would collide with the output columns; rename them"
            )
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


Scoring = CompiledModel | ModelSet


def compile_payload(
    payload: Bundle | BundleSet, *, device: str = "auto", backend: str = "auto",
    strategy: str = "auto",
) -> Scoring:  # fmt: skip
    """One model's bundle or a set's, compiled."""
    if isinstance(payload, BundleSet):
        return compile_set(payload, device=device, backend=backend, strategy=strategy)
    return compile_model(payload, device=device, backend=backend, strategy=strategy)


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

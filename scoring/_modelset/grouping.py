"""A set of models compiled: models whose margins are a plain sum share one compiled
forest per kind of node semantics (:mod:`scoring._compiler.group`), so that with the
tensor backend N models cost one traversal per block of rows, not N.  Any other model (a
native predictor, an averaging forest, a chain) is scored alone from the same batch.
``backend="auto"`` on CPU times the combined forest against the native predictors on
probe rows and keeps the faster, as a single model's ``auto`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from .._backends import module_bytes
from .._backends.native import NativeBackend
from .._backends.tensor import TensorBackend
from .._bundle import Bundle
from .._compiler import fused_pays
from .._compiler.group import combinable, combine, semantics, shared_key
from .._frameworks import framework_named
from .._inputs import Matrix
from .._model import (
    CompiledModel,
    bundle_origin,
    compile_imported,
    compile_model,
    medians_in_alternation,
    resolve_device,
)
from .._parity import probe_rows
from .._version import __version__
from .payload import BundleSet

__all__ = ["ModelSet", "Scoring", "compile_payload", "compile_set", "is_compiled", "shipped"]


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
        return self.backend.batch_margins(mat).cpu().numpy().reshape(mat.shape[0], -1)


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
            # A predictor outside this process (Spark's JVM) never scores: the kernel does.
            own = alone if alone != "native" or _in_process(forest) else "auto"
            cm = compile_imported(model, forest, backend=own, device=dev, strategy=strategy,
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
        if not all(_in_process(restored[i][1]) for i in group.members):
            kept.append(group)  # a member's predictor is not in this process: not a choice
            continue
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


def _in_process(forest: Any) -> bool:
    return framework_named(forest.framework).in_process


def _in_turn(natives: list[NativeBackend], rows: list[np.ndarray]) -> None:
    for native, x in zip(natives, rows, strict=True):
        native.predict_raw(x)


def _probe(forest: Any) -> np.ndarray:
    rows = probe_rows(forest, n_rows=4096, special=False)
    return rows.astype(np.float32 if forest.input_dtype == "float32" else np.float64)


Scoring = CompiledModel | ModelSet


def compile_payload(
    payload: Bundle | BundleSet, *, device: str = "auto", backend: str = "auto",
    strategy: str = "auto", check: Callable[[Bundle, CompiledModel], None] | None = None,
) -> Scoring:  # fmt: skip
    """One model's bundle or a set's, compiled; ``check``: called with one model's bundle
    and compiled model (a worker holds a stored version's choice to its record)."""
    if isinstance(payload, BundleSet):
        return compile_set(payload, device=device, backend=backend, strategy=strategy)
    compiled = compile_model(payload, device=device, backend=backend, strategy=strategy)
    if check is not None:
        check(payload, compiled)
    return compiled


def is_compiled(model: Any) -> bool:
    """Whether ``model`` is compiled already: one model's, or a set's."""
    return isinstance(model, (CompiledModel, ModelSet))


def shipped(model: Scoring) -> BundleSet | None:
    """What workers get of a compiled model: a set's bundles; none for one model
    compiled here (its bundle, if it had one, is the caller's)."""
    return model.bundles if isinstance(model, ModelSet) else None

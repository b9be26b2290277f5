"""``scoring.Registry``: the model store plus what needs the compiler.

Registering imports the model, stores its canonical bytes and holds the tensor backend
to the native predictor (:func:`scoring._parity.verify`) on every strategy ``auto`` may
pick on each available device type (``fused`` included where ``auto`` times it), and
profiles the sample's features and scores as the reference that runs measure drift
against (:mod:`scoring._drift`); loading compiles a stored version.  A run of a stored
version scores with a choice (device type, backend, strategy) that its record covers:
one that it does not is verified first and recorded (:func:`ensure_verified`), and a
choice that fails is refused.  Storage, names, versions and records are
:class:`~scoring._registry.ModelStore`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from ._bundle import Bundle, schema_of
from ._compiler import choose_strategy
from ._drift import Profile, profile
from ._frameworks import (
    dump_model,
    import_model,
    is_mlflow_ref,
    load_mlflow_model,
    model_object,
    restore_model,
)
from ._ir import Forest
from ._model import CompiledModel, compile_imported, compile_model, held_to_native
from ._parity import Verification
from ._registry import ModelStore, ModelVersion, read_sample
from ._scorer import Scorer
from .errors import VerificationError

__all__ = [
    "Registry", "available_device_types", "ensure_verified", "reference_profile",
    "verify_model",
]  # fmt: skip


def available_device_types() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _strategies(forest: Forest, device_type: str) -> list[str]:
    """Every strategy ``auto`` may pick on this device type (batch size decides on CUDA)."""
    device = torch.device(device_type)
    picks = {choose_strategy(forest, device=device, batch_size=b).name for b in (None, 4096)}
    return sorted(picks)


def verify_model(
    model: Any,
    forest: Forest,
    *,
    sample: Any = None,
    candidate: Forest | None = None,
    devices: Sequence[str] | None = None,
) -> dict[str, Verification]:
    """The tensor backend compiled from ``candidate`` (default ``forest``: the registry
    compiles what it restores from the stored bytes) against ``model``'s own predictor,
    one :class:`Verification` per device type (default: every one available)."""
    compiled = candidate or forest
    plan = {d: _strategies(compiled, d) for d in devices or available_device_types()}
    return held_to_native(model, forest, plan, sample=sample, candidate=candidate)


def ensure_verified(store: ModelStore, bundle: Bundle, compiled: CompiledModel) -> str:
    """What the stored version's record says of the choice ``compiled`` scores with;
    a choice it does not cover is verified now (the version's own sample and probes)
    and recorded, and one that fails raises :class:`VerificationError`.  The native
    predictor is the reference itself; Hummingbird is not held to it here."""
    device_type = compiled.device.type
    if compiled.backend == "native":
        return f"native on {device_type}: the framework's own predictor"
    if compiled.backend != "tensor":
        return ""
    mv = store.get(bundle.manifest["name"], version=int(bundle.manifest["version"]))
    strategy = str(compiled.strategy)
    record = mv.verification.get(device_type)
    if record is None or strategy not in record.strategies:
        record = _verify_choice(store, mv, bundle, device_type, strategy, record)
    if not record.passed:
        raise VerificationError(
            f"{mv.ref} fails parity on {device_type} (tensor/{', '.join(record.strategies)}: "
            f"max error {record.max_error:.1e}, {record.label_mismatches} label(s) differ"
            f"{'; ' + record.detail if record.detail else ''}); score it with "
            "backend='native' (--backend native)"
        )
    return (f"tensor/{strategy} on {device_type}: verified {record.verified_at:%Y-%m-%d}, "
            f"max error {record.max_error:.1e} on {record.rows:,} rows")  # fmt: skip


def _verify_choice(store: ModelStore, mv: ModelVersion, bundle: Bundle, device_type: str,
                   strategy: str, earlier: Verification | None) -> Verification:  # fmt: skip
    """``strategy`` verified on ``device_type`` and recorded beside what was verified there
    before (one record per device type: every strategy it holds must pass)."""
    model, forest = bundle.restore()
    plan = {device_type: [strategy]}
    check = held_to_native(model, forest, plan, sample=store.sample(mv))[device_type]
    if earlier is not None:
        check = check.model_copy(update={
            "strategies": sorted({*earlier.strategies, strategy}),
            "max_error": max(earlier.max_error, check.max_error),
            "label_mismatches": earlier.label_mismatches + check.label_mismatches,
            "passed": earlier.passed and check.passed,
            "detail": "; ".join(d for d in (earlier.detail, check.detail) if d),
        })  # fmt: skip
    store.record_verification(mv, {device_type: check})
    return check


def reference_profile(model: Any, forest: Forest, sample: Any) -> Profile:
    """The sample's feature columns and its scores (the native predictor's, through the
    same output layout as a run's) profiled as the drift reference."""
    if isinstance(sample, pd.DataFrame):
        table = pa.Table.from_pandas(sample, preserve_index=False)
    else:  # an array: the columns a Parquet input of an unnamed model has
        rows = np.asarray(sample)
        names = forest.feature_names or [f"f{j}" for j in range(rows.shape[1])]
        table = pa.table({n: rows[:, j] for j, n in enumerate(names)})
    scorer = Scorer(compile_imported(model, forest, backend="native"))
    features = table.select(scorer.feature_columns(table.column_names))
    return profile(features, scorer.score(table))


class Registry(ModelStore):
    """Model versions in a root directory or fsspec URL, metadata in a SQL database.

    ``uri``: the root (default ``$SCORING_HOME``, else a per-user directory, see
    :func:`scoring._registry.root_url`).  ``db_url``: any SQLAlchemy URL; default SQLite
    in the root (local roots) or in process memory (``memory://`` roots); other remote
    roots need one.
    """

    def register(
        self,
        name: str,
        model_or_path: Any,
        *,
        sample: Any = None,
        tags: Mapping[str, str] | None = None,
        description: str = "",
        trusted: bool = False,
    ) -> ModelVersion:
        """Import, store and verify a model (an object, a model file, or an MLflow model:
        ``models:/NAME@ALIAS``, ``models:/NAME/VERSION``, ``runs:/...`` or a directory,
        its source recorded as ``mlflow.*`` tags); returns its new, immutable version.
        The same bytes registered again (under any name) share one artifact."""
        if is_mlflow_ref(model_or_path):  # recorded: where in MLflow it came from
            loaded = load_mlflow_model(model_or_path, trusted=trusted)
            model_or_path, tags = loaded.model, {**loaded.source, **(tags or {})}
        model = model_object(model_or_path, trusted=trusted)
        forest = import_model(model)  # an unsupported model is refused before storing
        schema = schema_of(forest)
        data = dump_model(model)
        _, stored = restore_model(
            schema.framework,
            data,
            kind=schema.model_kind,
            classes=schema.classes,
            trusted=trusted,
        )
        sample = read_sample(sample)
        checks = verify_model(model, forest, sample=sample, candidate=stored)
        reference = None if sample is None else reference_profile(model, forest, sample)
        return self.add_version(name, data, schema, verification=checks, sample=sample,
                                reference=reference, tags=tags,
                                description=description)  # fmt: skip

    def verify(
        self, ref: str, *, version: int | None = None, devices: Sequence[str] | None = None
    ) -> ModelVersion:
        """Re-run parity verification here (e.g. on a GPU machine) and record it."""
        mv = self.get(ref, version=version)
        model, forest = self.bundle(mv.name, version=mv.version).restore()
        checks = verify_model(model, forest, sample=self.sample(mv), devices=devices)
        return self.record_verification(mv, checks)

    def load(
        self,
        ref: str,
        *,
        version: int | None = None,
        device: str = "auto",
        backend: str = "auto",
        strategy: str = "auto",
        trusted: bool = False,
    ) -> CompiledModel:
        """The version's model, checked against its sha256 and compiled."""
        bundle = self.bundle(ref, version=version)
        return compile_model(bundle, backend=backend, device=device, strategy=strategy,
                             trusted=trusted)  # fmt: skip

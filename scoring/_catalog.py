"""``scoring.Registry``: the model store plus what needs the compiler.

Registering imports the model, stores its canonical bytes and holds the tensor backend
to the native predictor (:func:`scoring._parity.verify`) on every strategy ``auto`` may
pick on each available device type, and profiles the sample's features and scores as
the reference that runs measure drift against (:mod:`scoring._drift`); loading compiles
a stored version.  Storage,
names, versions and records are :class:`~scoring._registry.ModelStore`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from ._bundle import schema_of
from ._compiler import choose_strategy
from ._drift import Profile, profile
from ._frameworks import (
    dump_model,
    import_model,
    is_mlflow_ref,
    library_versions,
    load_mlflow_model,
    model_object,
    restore_model,
)
from ._ir import Forest
from ._model import CompiledModel, compile_imported, compile_model
from ._parity import Predictor, Verification, verify
from ._registry import ModelStore, ModelVersion, read_sample
from ._scorer import Scorer

__all__ = ["Registry", "available_device_types", "reference_profile", "verify_model"]


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
    reference: Predictor = compile_imported(model, forest, backend="native")
    compiled = candidate or forest

    def build(device: str, strategy: str) -> Predictor:
        return compile_imported(None, compiled, backend="tensor", device=device, strategy=strategy)

    plan = {d: _strategies(compiled, d) for d in devices or available_device_types()}
    return verify(reference, build, strategies=plan, sample=sample,
                  versions=library_versions(forest.framework))  # fmt: skip


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

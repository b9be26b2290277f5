"""What the registry records about a model: its schema, verification and version."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from ..ir import Forest

__all__ = ["ModelSchema", "ModelVersion", "Verification", "schema_of"]

_DISTRIBUTIONS = {"sklearn": "scikit-learn", "xgboost": "xgboost", "lightgbm": "lightgbm"}


class ModelSchema(BaseModel):
    """The model's interface: what it reads, what it predicts, what made it."""

    model_config = ConfigDict(frozen=True)

    framework: str
    model_kind: str
    task: str
    objective: str
    n_features: int
    feature_names: list[str] | None
    #: Per feature: "float" or "category".
    feature_dtypes: list[str]
    #: Category labels in code order, keyed by feature name (or index when unnamed).
    categories: dict[str, list[Any]] = Field(default_factory=dict)
    classes: list[Any] | None = None
    predict_returns: str = "value"
    n_trees: int
    n_outputs: int
    max_depth: int
    library_versions: dict[str, str]

    def feature_label(self, index: int) -> str:
        return self.feature_names[index] if self.feature_names else str(index)


class Verification(BaseModel):
    """Parity of the tensor backend with native on one device type."""

    model_config = ConfigDict(frozen=True)

    device_type: str
    backend: str = "tensor"
    strategies: list[str]
    rows: int
    max_error: float
    label_mismatches: int
    leaf_mismatches: int | None
    passed: bool
    detail: str = ""
    verified_at: datetime
    library_versions: dict[str, str]


@dataclass(frozen=True)
class ModelVersion:
    """One immutable, numbered version of a registered model."""

    name: str
    version: int
    artifact_uri: str
    sha256: str
    schema: ModelSchema
    verification: dict[str, Verification]
    created_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    description: str = ""
    aliases: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def verified(self) -> bool:
        """Verified on at least one device type and failed on none."""
        return bool(self.verification) and all(v.passed for v in self.verification.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able view (what ``scoring models show`` prints)."""
        return {
            "name": self.name,
            "version": self.version,
            "artifact_uri": self.artifact_uri,
            "sha256": self.sha256,
            "created_at": self.created_at.isoformat(),
            "description": self.description,
            "aliases": self.aliases,
            "tags": self.tags,
            "schema": self.schema.model_dump(mode="json"),
            "verification": {k: v.model_dump(mode="json") for k, v in self.verification.items()},
        }


def library_versions(framework: str) -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("scoring", _DISTRIBUTIONS.get(framework, framework)):
        try:
            out[dist] = dist_version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _plain(values: Any) -> list[Any]:
    """numpy labels -> JSON-able Python values."""
    return np.asarray(values).tolist() if values is not None else []


def schema_of(forest: Forest) -> ModelSchema:
    names = forest.feature_names
    cats = {
        (names[i] if names else str(i)): _plain(labels) for i, labels in forest.categories.items()
    }
    return ModelSchema(
        framework=forest.framework,
        model_kind=forest.model_kind,
        task=forest.task,
        objective=forest.objective,
        n_features=forest.n_features,
        feature_names=list(names) if names else None,
        feature_dtypes=[
            "category" if i in forest.categorical_features else "float"
            for i in range(forest.n_features)
        ],
        categories=cats,
        classes=_plain(forest.classes) if forest.classes is not None else None,
        predict_returns=forest.predict_returns,
        n_trees=forest.n_trees,
        n_outputs=forest.n_outputs,
        max_depth=forest.max_depth,
        library_versions=library_versions(forest.framework),
    )

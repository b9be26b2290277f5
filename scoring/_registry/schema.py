"""What the registry records about a model: its schema, verification and version."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._bundle import ModelSchema
from .._parity import Verification

__all__ = ["ModelVersion"]


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

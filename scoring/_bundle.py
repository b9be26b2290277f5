"""Bundles: a model as one self-contained, checksummed payload, and its schema.

A bundle is what identifies a model everywhere: its canonical bytes in the framework's
safe format (:func:`scoring._frameworks.dump_model`) and their sha256, which keys the
registry's artifacts, every scoring job and the compiled-model cache.  A Ray actor or
Spark executor receives a bundle (through the object store or a broadcast), never a
registry database connection.  The payload is a zip archive:

``manifest.json``
    ``{"format": "scoring-bundle", "format_version": 1, "name", "version", "sha256",
    "filename", "created_at", "schema": {...}}`` where ``sha256`` is that of the model
    file and ``schema`` is :class:`ModelSchema` as JSON.
``model.ubj`` | ``model.txt`` | ``model.skops``
    The model in its framework's own format.

The model bytes are checked against the manifest's sha256 before anything is restored.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ._ir import Forest
from .errors import IntegrityError, ModelFileError

__all__ = ["BUNDLE_FORMAT_VERSION", "Bundle", "ModelSchema", "schema_of", "sha256_hex"]

# The frameworks (and torch with them) are imported by the functions that need them, so
# that reading the registry (``scoring models list``) loads neither.

BUNDLE_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"


#: A bundle's model file name: one plain name, never a path.
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def _plain(values: Any) -> list[Any]:
    """numpy labels -> Python values; a list of mixed labels keeps each as it is (text
    next to NaN stays text, where one array would make NaN the text "nan")."""
    if values is None:
        return []
    if isinstance(values, list):
        return [v.item() if isinstance(v, np.generic) else v for v in values]
    return np.asarray(values).tolist()


def schema_of(forest: Forest) -> ModelSchema:
    from ._frameworks import library_versions

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


@dataclass(frozen=True)
class Bundle:
    manifest: dict[str, Any]
    model_bytes: bytes

    @property
    def sha256(self) -> str:
        return str(self.manifest["sha256"])

    @property
    def ref(self) -> str:
        return f"{self.manifest['name']}@{self.manifest['version']}"

    @property
    def schema(self) -> ModelSchema:
        return ModelSchema.model_validate(self.manifest["schema"])

    @classmethod
    def of(cls, model: Any, *, name: str | None = None, trusted: bool = False) -> Bundle:
        """An unregistered model (a fitted object or a model file) as version 0 of
        ``name`` (default: an MLflow model's name, else the model's kind), for engines
        that ship models to workers."""
        from ._frameworks import dump_model, import_model, is_mlflow_ref, mlflow_name, model_object

        if name is None and is_mlflow_ref(model):
            name = mlflow_name(str(model))
        model = model_object(model, trusted=trusted)
        forest = import_model(model)
        schema = schema_of(forest)
        data = dump_model(model)
        created = datetime.now(timezone.utc)
        manifest = bundle_manifest(name or forest.model_kind, 0, sha256_hex(data), schema, created)
        return cls(manifest=manifest, model_bytes=data)

    def verify(self) -> None:
        """Raise :class:`IntegrityError` unless the model bytes match the manifest."""
        found = sha256_hex(self.model_bytes)
        if found != self.sha256:
            raise IntegrityError(
                f"bundle {self.ref}: model bytes have sha256 {found}, the manifest says "
                f"{self.sha256}; the payload was corrupted in transit"
            )

    def restore(self, *, trusted: bool = False) -> tuple[Any, Forest]:
        """Verify the checksum, then the model object and its Forest."""
        from ._frameworks import restore_model

        self.verify()
        schema = self.schema
        return restore_model(
            schema.framework,
            self.model_bytes,
            kind=schema.model_kind,
            classes=schema.classes,
            trusted=trusted,
        )

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr(_MANIFEST, json.dumps(self.manifest, sort_keys=True, indent=1))
            zf.writestr(str(self.manifest["filename"]), self.model_bytes)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Bundle:
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise ModelFileError(f"not a scoring bundle: {exc}") from exc
        try:
            with archive:
                manifest = json.loads(archive.read(_MANIFEST))
                model_bytes = archive.read(manifest["filename"])
        except (KeyError, json.JSONDecodeError) as exc:
            raise ModelFileError(f"not a scoring bundle: {exc}") from exc
        except zipfile.BadZipFile as exc:  # a member's CRC no longer matches
            raise IntegrityError(f"bundle payload corrupted in transit: {exc}") from exc
        if manifest.get("format") != "scoring-bundle":
            raise ModelFileError("not a scoring bundle: its manifest has no scoring format")
        if not _FILENAME.match(str(manifest["filename"])):  # it names a storage key later
            raise ModelFileError(
                f"not a scoring bundle: its model file name {manifest['filename']!r} is not a "
                "plain file name"
            )
        if int(manifest.get("format_version", 0)) > BUNDLE_FORMAT_VERSION:
            raise ModelFileError(
                f"bundle format {manifest['format_version']} is newer than this scoring "
                f"understands ({BUNDLE_FORMAT_VERSION}); upgrade scoring on the workers"
            )
        bundle = cls(manifest=manifest, model_bytes=model_bytes)
        bundle.verify()
        return bundle


def bundle_manifest(
    name: str, version: int, sha256: str, schema: ModelSchema, created_at: datetime
) -> dict[str, Any]:
    from ._frameworks import framework_named

    return {
        "format": "scoring-bundle",
        "format_version": BUNDLE_FORMAT_VERSION,
        "name": name,
        "version": version,
        "sha256": sha256,
        "filename": framework_named(schema.framework).artifact,
        "created_at": created_at.isoformat(),
        "schema": schema.model_dump(mode="json"),
    }

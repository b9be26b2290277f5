"""Bundles: a model version as one self-contained, checksummed payload for workers.

A Ray actor or Spark executor receives a bundle (through the object store or a
broadcast), never a registry database connection.  The payload is a zip archive:

``manifest.json``
    ``{"format": "scoring-bundle", "format_version": 1, "name", "version", "sha256",
    "filename", "created_at", "schema": {...}}`` where ``sha256`` is that of the model
    file and ``schema`` is :class:`~scoring.registry.schema.ModelSchema` as JSON.
``model.ubj`` | ``model.txt`` | ``model.skops``
    The model in its framework's own format (see :mod:`scoring.registry.formats`).

The model bytes are checked against the manifest's sha256 before anything is compiled.
"""

from __future__ import annotations

import io
import json
import os
import threading
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import IntegrityError, ModelFileError
from ..importers import import_model, load_model_file
from ..model import CompiledModel, compile_imported
from .formats import FILENAMES, dump_model, restore_model
from .schema import ModelSchema, schema_of
from .storage import sha256_hex

__all__ = ["BUNDLE_FORMAT_VERSION", "Bundle", "bundle_manifest", "compile_bundle"]

BUNDLE_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"


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
        ``name`` (default: the model's kind), for engines that ship models to workers."""
        if isinstance(model, (str, os.PathLike)):
            model = load_model_file(model, trusted=trusted)
        forest = import_model(model)
        schema = schema_of(forest)
        data = dump_model(model, forest)
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
        if int(manifest.get("format_version", 0)) > BUNDLE_FORMAT_VERSION:
            raise ModelFileError(
                f"bundle format {manifest['format_version']} is newer than this scoring "
                f"understands ({BUNDLE_FORMAT_VERSION}); upgrade scoring on the workers"
            )
        bundle = cls(manifest=manifest, model_bytes=model_bytes)
        bundle.verify()
        return bundle

    def compile(
        self,
        *,
        device: str = "auto",
        backend: str = "auto",
        strategy: str = "auto",
        trusted: bool = False,
    ) -> CompiledModel:
        """Verify the checksum, restore the model and compile it."""
        self.verify()
        model, forest = restore_model(self.schema, self.model_bytes, trusted=trusted)
        cm = compile_imported(model, forest, backend=backend, device=device, strategy=strategy)
        cm.origin = {
            "name": self.manifest["name"],
            "version": self.manifest["version"],
            "sha256": self.sha256,
        }
        return cm


def bundle_manifest(
    name: str, version: int, sha256: str, schema: ModelSchema, created_at: datetime
) -> dict[str, Any]:
    return {
        "format": "scoring-bundle",
        "format_version": BUNDLE_FORMAT_VERSION,
        "name": name,
        "version": version,
        "sha256": sha256,
        "filename": FILENAMES[schema.framework],
        "created_at": created_at.isoformat(),
        "schema": schema.model_dump(mode="json"),
    }


_CACHE: dict[tuple[str, str, str, str], CompiledModel] = {}
_CACHE_LOCK = threading.Lock()


def compile_bundle(
    bundle: Bundle, *, device: str = "auto", backend: str = "auto", strategy: str = "auto"
) -> CompiledModel:
    """:meth:`Bundle.compile`, cached per process by model sha256, backend, strategy and
    device, so a worker compiles each model once however many batches it scores."""
    key = (bundle.sha256, backend, strategy, device)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = bundle.compile(device=device, backend=backend, strategy=strategy)
        return _CACHE[key]

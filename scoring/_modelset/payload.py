"""A set of models as it is identified and shipped: each member's bundle, output prefix
and row filter, in one payload (:func:`load_payload` reads a model's or a set's).

The set's sha256 covers every member's sha256, prefix and filter, so a job key, a resume
or a kept output is never mistaken for another set's.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass

from .._bundle import Bundle
from .._where import RowFilter
from ..errors import ConfigError, ModelFileError

__all__ = ["SEPARATOR", "BundleSet", "load_payload", "prefixed", "set_of"]

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


def set_of(payload: Bundle | BundleSet | None) -> BundleSet | None:
    """``payload`` where it is a set's, else None (one model's, or none)."""
    return payload if isinstance(payload, BundleSet) else None

"""The model registry: versioned, verified, tamper-evident storage of tree models.

Layout of a registry root (a directory or any fsspec URL)::

    <root>/registry.db                                  SQLite metadata (local roots)
    <root>/artifacts/<sha[:2]>/<sha256>/model.ubj       XGBoost (UBJSON)
    <root>/artifacts/<sha[:2]>/<sha256>/model.txt       LightGBM (model text)
    <root>/artifacts/<sha[:2]>/<sha256>/model.skops     scikit-learn (skops)
    <root>/artifacts/<sha[:2]>/<sha256>/sample.parquet  sample rows (or sample.npy)

Artifacts are content-addressed and immutable; the database holds, per version, the
sha256, the :class:`ModelSchema` (framework and library versions, task, classes,
objective, feature names, dtypes and categories), tags, aliases and one
:class:`Verification` per device type.  Every load re-hashes the bytes.  Workers get a
:class:`Bundle` (format documented in :mod:`scoring.registry.bundle`), never the database.
"""

from __future__ import annotations

from .bundle import BUNDLE_FORMAT_VERSION, Bundle, compile_bundle
from .registry import Registry, parse_ref
from .schema import ModelSchema, ModelVersion, Verification

__all__ = [
    "BUNDLE_FORMAT_VERSION",
    "Bundle",
    "ModelSchema",
    "ModelVersion",
    "Registry",
    "Verification",
    "compile_bundle",
    "parse_ref",
]

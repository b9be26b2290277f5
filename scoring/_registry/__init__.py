"""The model store: versioned, tamper-evident storage of tree models, beside the data path.

Layout of a registry root (a directory or any fsspec URL)::

    <root>/registry.db                                  SQLite metadata (local roots)
    <root>/artifacts/<sha[:2]>/<sha256>/model.ubj       XGBoost (UBJSON)
    <root>/artifacts/<sha[:2]>/<sha256>/model.txt       LightGBM (model text)
    <root>/artifacts/<sha[:2]>/<sha256>/model.skops     scikit-learn (skops)
    <root>/artifacts/<sha[:2]>/<sha256>/sample.parquet  sample rows (or sample.npy)

Artifacts are content-addressed and immutable (one file however many versions hold the
same bytes); the database holds, per version, the sha256, the schema, tags, aliases and
one verification record per device type, and the history of the jobs run against it
(:mod:`.runs`).  Every read re-hashes the bytes.  Workers get
a :class:`~scoring._bundle.Bundle`, never the database.  This package stores and records;
it never compiles (:class:`scoring.Registry` adds verification and loading).
"""

from __future__ import annotations

from .runs import OUTCOMES, RunHistory, RunRecord, describe_trend, trend
from .samples import read_sample
from .schema import ModelVersion
from .store import ModelStore, check_alias, default_root, parse_ref, root_url

__all__ = [
    "OUTCOMES", "ModelStore", "ModelVersion", "RunHistory", "RunRecord", "check_alias",
    "default_root",
    "describe_trend", "parse_ref", "read_sample", "root_url", "trend",
]  # fmt: skip

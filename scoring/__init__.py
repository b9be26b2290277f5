"""GPU batch scoring of tree ensembles.

The stable surface (see DESIGN.md)::

    cm = scoring.compile(model, backend="auto", device="auto", strategy="auto")
    cm.predict(X); cm.predict_proba(X); cm.predict_raw(X)

    reg = scoring.Registry()            # $SCORING_HOME, else ~/.local/share/scoring
    mv = reg.register("churn", model, sample=X_sample)
    reg.set_alias("churn", "production", mv.version)
    cm = reg.load("churn@production")

    scoring.score_parquet("s3://in/", "s3://out/", "churn@production", keep=["id"])
    scoring.spark.register_udf(spark, "score_churn", "churn@production")
    scoring.ray.score_dataset(ds, "churn@production")

``scoring.ray``, ``scoring.spark`` and ``scoring.jobs`` are imported on first use, so
``import scoring`` does not pull in Ray or PySpark.
"""

from __future__ import annotations

from . import errors
from ._bundle import Bundle
from ._catalog import Registry
from ._engines import ScoreReport, score_parquet
from ._model import CompiledModel
from ._model import compile_model as compile
from ._registry import ModelVersion
from ._version import __version__
from .errors import ScoringError

__all__ = [
    "Bundle",
    "CompiledModel",
    "ModelVersion",
    "Registry",
    "ScoreReport",
    "ScoringError",
    "__version__",
    "compile",
    "errors",
    "score_parquet",
]


_LAZY = ("jobs", "ray", "spark")


def __getattr__(name: str) -> object:
    if name in _LAZY:  # imported here, on first use: see the module docstring
        from importlib import import_module

        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'scoring' has no attribute {name!r}")

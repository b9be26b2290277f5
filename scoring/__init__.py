"""GPU batch scoring of tree ensembles.

The stable surface (see DESIGN.md)::

    cm = scoring.compile(model, backend="auto", device="auto", strategy="auto")
    cm.predict(X); cm.predict_proba(X); cm.predict_raw(X)

    reg = scoring.Registry()            # $SCORING_HOME, else ./.scoring
    mv = reg.register("churn", model, sample=X_sample)
    reg.set_alias("churn", "production", mv.version)
    cm = reg.load("churn@production")

    scoring.score_parquet("s3://in/", "s3://out/", "churn@production", keep=["id"])
"""

from __future__ import annotations

from . import errors
from ._version import __version__
from .engines import ScoreReport, score_parquet
from .errors import ScoringError
from .model import CompiledModel
from .model import compile_model as compile
from .registry import Bundle, ModelVersion, Registry

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

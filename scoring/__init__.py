"""GPU batch scoring of tree ensembles.

The stable surface::

    cm = scoring.compile(model, backend="auto", device="auto", strategy="auto")
    cm.predict(X); cm.predict_proba(X); cm.predict_raw(X)

    reg = scoring.Registry()            # $SCORING_HOME, else ~/.local/share/scoring
    mv = reg.register("churn", model, sample=X_sample)
    reg.set_alias("churn", "production", mv.version)
    cm = reg.load("churn@production")

    scoring.score_parquet("s3://in/", "s3://out/", "churn@production", keep=["id"])
    scoring.score_parquet(scoring.Input("delta:s3://in/", version=12),
                          scoring.Output("delta:s3://t/", mode="append"), "churn@production",
                          run=scoring.RunOptions(verify=True))
    scoring.spark.register_udf(spark, "score_churn", "churn@production")
    scoring.ray.score_dataset(ds, "churn@production")
    scoring.mlflow.export_model("churn@production")   # MLflow pyfunc; models:/ refs in

Every name is imported on first use (``scoring.ray``, ``scoring.spark``,
``scoring.mlflow`` and ``scoring.jobs`` too), so ``import scoring`` pulls in neither
torch, the frameworks, Ray, PySpark nor MLflow until they are needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import errors
from ._version import __version__
from .errors import ScoringError

if _TYPE_CHECKING:  # what the names below are; imported on first use (module docstring)
    from ._bundle import Bundle
    from ._catalog import Registry
    from ._engines import ScoreReport, score_parquet
    from ._model import CompiledModel
    from ._model import compile_model as compile
    from ._registry import ModelVersion
    from ._specs import Input, Output, RunOptions

__all__ = [
    "Bundle",
    "CompiledModel",
    "Input",
    "ModelVersion",
    "Output",
    "Registry",
    "RunOptions",
    "ScoreReport",
    "ScoringError",
    "__version__",
    "compile",
    "errors",
    "score_parquet",
]

#: Public names and the module each comes from, imported on first use: torch and the
#: frameworks load only when something that needs them is asked for (``scoring --help``
#: and ``import scoring.errors`` stay fast).
_NAMES = {
    "Bundle": ("._bundle", "Bundle"),
    "Registry": ("._catalog", "Registry"),
    "ScoreReport": ("._engines", "ScoreReport"),
    "Input": ("._specs", "Input"),
    "Output": ("._specs", "Output"),
    "RunOptions": ("._specs", "RunOptions"),
    "score_parquet": ("._engines", "score_parquet"),
    "CompiledModel": ("._model", "CompiledModel"),
    "compile": ("._model", "compile_model"),
    "ModelVersion": ("._registry", "ModelVersion"),
}
_LAZY = ("jobs", "mlflow", "ray", "spark", "recipes")


def __getattr__(name: str) -> object:
    from importlib import import_module

    if name in _NAMES:
        module, attr = _NAMES[name]
        value = getattr(import_module(module, __name__), attr)
        globals()[name] = value  # later lookups find it without coming here
        return value
    if name in _LAZY:  # imported here, on first use: see the module docstring
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'scoring' has no attribute {name!r}")

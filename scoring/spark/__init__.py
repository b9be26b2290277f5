"""Spark: a SQL function from the registry, DataFrame scoring and the Spark engine.

``register_udf(spark, "score_churn", "churn@production")`` makes
``SELECT id, score_churn(struct(*)) FROM features`` work (a pandas UDF in its iterator
form, so each Python worker compiles the model once); ``make_predict_fn`` is the same
model for Spark ML's ``predict_batch_udf``; ``score_dataframe`` adds the local
engine's output columns to a DataFrame through ``mapInArrow``; ``score_parquet(...,
engine="spark")`` runs a whole job (:mod:`scoring._engines.spark`) through Spark's own
committer plus our manifest.

The model travels as a registry bundle in a broadcast and is verified by checksum on
the executors; compiled models are cached per Python worker by model sha256, backend and
device.  A task's GPU comes from ``TaskContext.resources()["gpu"]``; without one the
model runs on CPU.
"""

from __future__ import annotations

from .._engines.spark import local_session, tune_session
from ._dataframe import score_dataframe
from ._predict_fn import make_predict_fn
from ._udf import UDF_OUTPUTS, register_udf

__all__ = ["UDF_OUTPUTS", "local_session", "make_predict_fn", "register_udf", "score_dataframe",
           "tune_session"]  # fmt: skip

"""MLflow: models in and out.

In: wherever a model is taken (``scoring.compile``, ``Registry.register``,
``score_parquet``, ``scoring score --model``, job files), ``models:/NAME@ALIAS``,
``models:/NAME/VERSION``, ``runs:/RUN_ID/PATH`` or a local MLflow model directory is
read through its flavor's native file (:mod:`scoring._frameworks._mlflow`).

Out: ``export_model("churn@production", registered_model_name="churn_scoring")`` logs
a registered version as a pyfunc model that scores with the compiled model, so
``mlflow.pyfunc.load_model`` and ``mlflow.pyfunc.spark_udf`` score as
``scoring.compile`` does.
"""

from __future__ import annotations

from .._frameworks import is_mlflow_ref, load_mlflow_model
from ._export import export_model

__all__ = ["export_model", "is_mlflow_ref", "load_mlflow_model"]

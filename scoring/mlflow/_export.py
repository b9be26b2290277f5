"""A registered version as an MLflow pyfunc model (:mod:`._pyfunc`), logged to the
tracking server MLflow is configured for and, when asked, registered there."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from .._bundle import Bundle
from .._frameworks import check_reachable, mlflow_client, mlflow_tracking
from .._registry import ModelStore
from .._version import __version__

__all__ = ["export_model"]

_CODE = Path(__file__).with_name("_pyfunc.py")


def export_model(
    ref: str,
    *,
    registry: str | os.PathLike[str] | ModelStore | None = None,
    name: str = "model",
    registered_model_name: str | None = None,
    tracking_uri: str | None = None,
    backend: str = "tensor",
) -> Any:
    """Log version ``ref`` of ``registry`` as an MLflow pyfunc model named ``name`` (in
    the active run, else a new one) and register it as ``registered_model_name`` when
    given; returns MLflow's ``ModelInfo`` (``model_uri``, ``registered_model_version``).

    ``mlflow.pyfunc.load_model(info.model_uri).predict(df)`` returns what
    ``scoring.compile(..., backend=backend).predict(df)`` does;
    ``params={"method": "predict_proba"}`` (or ``predict_raw``) what those methods do.
    ``backend``: what the loaded model compiles with (a fixed one, so that every
    process that loads it scores alike; see :mod:`._pyfunc`).
    """
    mlflow = mlflow_client("exports to MLflow")
    store = registry if isinstance(registry, ModelStore) else ModelStore(registry)
    bundle = store.bundle(ref)
    with mlflow_tracking(tracking_uri), tempfile.TemporaryDirectory() as tmp:
        check_reachable(mlflow.get_tracking_uri())  # at once, not after minutes of retries
        path = Path(tmp) / f"{bundle.manifest['name']}-{bundle.manifest['version']}.scoring"
        path.write_bytes(bundle.to_bytes())
        run = mlflow.active_run() or mlflow.start_run(run_name=f"scoring export {bundle.ref}")
        try:
            return mlflow.pyfunc.log_model(
                name=name,
                python_model=str(_CODE),
                artifacts={"bundle": str(path)},
                signature=_signature(mlflow, bundle),
                pip_requirements=[f"scoring=={__version__}"],
                registered_model_name=registered_model_name,
                model_config={"backend": backend},
                metadata={"scoring.model": bundle.ref, "scoring.sha256": bundle.sha256},
            )
        finally:
            if mlflow.active_run() is run and run.info.run_name.startswith("scoring export"):
                mlflow.end_run()


def _signature(mlflow: Any, bundle: Bundle) -> Any:
    """Input columns by the model's feature names (``f0``, ``f1``, ... for a model trained
    on unnamed data, as Parquet inputs name them), each a double unless its categories
    are text; a ``method`` parameter."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema, TensorSpec

    schema = bundle.schema
    names = schema.feature_names or [f"f{j}" for j in range(schema.n_features)]
    # Categories are keyed by feature name, or by position for an unnamed model.
    text = {key for key, labels in schema.categories.items()
            if any(isinstance(v, str) for v in labels)}  # fmt: skip
    columns: list[ColSpec | TensorSpec] = [
        ColSpec("string" if {n, str(j)} & text else "double", n) for j, n in enumerate(names)
    ]
    params = ParamSchema([ParamSpec("method", "string", "predict")])
    return ModelSignature(inputs=Schema(columns), params=params)

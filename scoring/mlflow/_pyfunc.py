"""The MLflow pyfunc model of an exported version: what ``mlflow.pyfunc.load_model``
runs.  MLflow logs this file as the model's code (no pickle) and the version's bundle as
its artifact; loading verifies the bundle's sha256 and compiles it with the backend the
export named (``model_config``; default ``tensor``, not ``auto``: every Spark executor
then runs the same code, whatever its load when it timed the candidates) on the device
that ``SCORING_DEVICE`` names (default ``auto``: CUDA when there is one).

``predict(df, params={"method": ...})``: ``predict`` (default; what the framework's own
``predict`` returns), ``predict_proba`` or ``predict_raw``, as
:class:`scoring.CompiledModel`'s methods of the same names return them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlflow
from mlflow.pyfunc import PythonModel

METHODS = ("predict", "predict_proba", "predict_raw")


class CompiledForest(PythonModel):
    def load_context(self, context: Any) -> None:
        from scoring._bundle import Bundle
        from scoring._model import compile_model

        bundle = Bundle.from_bytes(Path(context.artifacts["bundle"]).read_bytes())
        device = os.environ.get("SCORING_DEVICE", "auto")
        backend = (context.model_config or {}).get("backend", "tensor")
        self.compiled = compile_model(bundle, device=device, backend=backend)

    # No annotations: MLflow reads predict's type hints as a signature, and ours is logged.
    def predict(self, context, model_input, params=None):
        method = (params or {}).get("method", "predict")
        if method not in METHODS:
            from scoring.errors import ConfigError

            raise ConfigError(f"method {method!r} is not one of {', '.join(METHODS)}")
        return getattr(self.compiled, method)(model_input)


mlflow.models.set_model(CompiledForest())

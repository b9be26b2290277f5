"""``make_predict_fn``: a model for Spark ML's ``predict_batch_udf``.

``pyspark.ml.functions.predict_batch_udf(make_predict_fn, return_type=..., batch_size=...)``
is Spark's recipe for batch inference: it calls ``make_predict_fn()`` once per Python
worker and then the function it returns on numpy batches.  This module makes both: the
model travels inside the function as its registry bundle (checked by sha256 on the
worker), and is compiled once per worker for the GPU Spark gave the task (as
``register_udf`` does).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pyarrow as pa

from .._cache import compiled
from .._engines.base import resolve_model
from .._engines.placement import placement_only
from .._engines.spark import task_device
from .._inputs import feature_names
from .._model import CompiledModel
from .._modelset import load_payload
from .._scorer import Scorer
from ..errors import ConfigError, FeatureCountError
from ._outputs import output_spec

__all__ = ["make_predict_fn"]

Predict = Callable[..., np.ndarray]


def make_predict_fn(
    model: Any,
    *,
    output: str = "probability",
    inputs: str = "columns",
    device: str = "auto",
    backend: str = "auto",
    registry: Any = None,
) -> Callable[[], Predict]:
    """``make_predict_fn`` for ``predict_batch_udf``: ``model`` (a registry reference,
    model file, MLflow URI or fitted model) scoring ``output`` (probability, label,
    prediction or raw; one value per row, or an array per row where the model has several
    such columns).  Its ``return_type`` attribute is the Spark type to give
    ``predict_batch_udf``.

    ``inputs``: ``"columns"``, the UDF takes the model's feature columns in order
    (``udf(*features)``); ``"array"``, one array column of them (``udf(array(*features))``
    with ``input_tensor_shapes=[[n_features]]``).  ``predict_batch_udf`` tells the two
    apart by the parameters of the function it gets: one per feature, or one."""
    if isinstance(model, (list, tuple)):
        raise ConfigError("make_predict_fn makes one model's function; make one per model")
    if inputs not in ("columns", "array"):
        raise ConfigError(f"inputs={inputs!r}: expected 'columns' or 'array'")
    source = resolve_model(model, registry=registry, local=False)
    one = cast(CompiledModel, source.compiled)
    spec = output_spec(one.forest, output)
    if spec.output == "all":
        raise ConfigError(
            "make_predict_fn returns one output (probability, label, prediction or raw); "
            "for every column as a struct use register_udf(..., output='all')"
        )
    payload = source.shipped().to_bytes()
    placement = placement_only()  # the driver's setting, shipped with the function

    def make() -> Predict:
        chosen = task_device(device, placement=placement)
        cm = cast(CompiledModel, compiled(load_payload(payload), device=chosen, backend=backend))
        scorer = Scorer(cm, outputs="raw" if spec.output == "raw" else "default")
        names = feature_names(cm.forest) or [f"f{i}" for i in range(cm.forest.n_features)]

        def predict(*columns: np.ndarray) -> np.ndarray:
            scored = scorer.score(_table(columns, names, cm.forest.model_kind))
            cut = spec.cut(scored)
            return np.stack(cut.to_list()) if spec.per_class else cut.to_numpy()

        # What predict_batch_udf reads to decide how to call it: one argument per
        # feature column, or one for the array of them.
        params = [f"x{j}" for j in range(len(names))] if inputs == "columns" else ["features"]
        predict.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in params]
        )
        return predict

    make.return_type = spec.spark_type  # type: ignore[attr-defined]
    return make


def _table(columns: tuple[np.ndarray, ...], names: list[str], kind: str) -> pa.Table:
    """The feature columns in order, or one 2-D array of them, as named columns."""
    if len(columns) == 1 and np.ndim(columns[0]) == 2:
        matrix = columns[0]
        columns = tuple(matrix[:, j] for j in range(matrix.shape[1]))
    if len(columns) != len(names):
        raise FeatureCountError(
            f"{kind} takes {len(names)} feature columns in order, or one array column of "
            f"them; the function was given {len(columns)}"
        )
    return pa.table({n: pa.array(c) for n, c in zip(names, columns, strict=True)})

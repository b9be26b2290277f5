"""``register_udf``: a model from the registry as a Spark SQL function."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Tuple, Union, cast  # noqa: UP035  (pandas_udf reads these type hints)

import pandas as pd
import pyarrow as pa

from .._engines.base import resolve_model
from .._engines.placement import placement_only
from .._engines.spark import tune_session, worker_model
from .._inputs import feature_names
from .._model import CompiledModel
from .._scorer import Scorer
from ..errors import ConfigError, FeatureCountError
from ._outputs import UDF_OUTPUTS, output_spec

__all__ = ["UDF_OUTPUTS", "register_udf"]


def register_udf(
    spark: Any,
    name: str,
    model: Any,
    *,
    output: str = "probability",
    device: str = "auto",
    backend: str = "auto",
    registry: Any = None,
) -> Any:
    """Register ``model`` as the SQL function ``name`` and return it for DataFrame use.

    Call it with a struct of columns (``name(struct(*))``: fields matched to the model's
    features by name, extra ones ignored) or with the feature columns in order
    (``name(f0, f1, ...)``).  ``output``: probability (of the positive class; an array
    per class for multiclass), label, prediction, raw, or all of them as a struct.
    """
    from pyspark.sql.functions import pandas_udf

    if isinstance(model, (list, tuple)):
        raise ConfigError(
            f"register_udf registers one model per SQL function; register each of the "
            f"{len(model)} models under its own name, or score them together with "
            "scoring.spark.score_dataframe(df, [...])"
        )
    source = resolve_model(model, registry=registry, local=False)
    one = cast(CompiledModel, source.compiled)  # one model: a list was refused above
    spec = output_spec(one.forest, output)
    tune_session(spark)
    payload = spark.sparkContext.broadcast(source.shipped().to_bytes())
    placement = placement_only()  # the driver's setting, shipped with the function

    def score(
        batches: Iterator[Tuple[Union[pd.Series, pd.DataFrame], ...]],  # noqa: UP006, UP007
    ) -> Iterator[pd.Series]:
        chosen = worker_model(payload, device=device, backend=backend, placement=placement)
        cm = cast(CompiledModel, chosen)
        scorer = Scorer(cm, outputs="raw" if spec.output in ("raw", "all") else "default")
        for batch in batches:
            yield spec.cut(scorer.score(_features(batch, cm.forest)))

    udf = pandas_udf(score, returnType=spec.spark_type)  # type: ignore[call-overload]
    spark.udf.register(name, udf)
    return udf


def _features(batch: Any, forest: Any) -> pa.Table:
    """A struct argument matched by name (see :class:`~scoring._scorer.Scorer`), or
    positional columns named as the model's features."""
    names = feature_names(forest) or [f"f{i}" for i in range(forest.n_features)]
    if isinstance(batch, pd.DataFrame):
        return pa.Table.from_pandas(batch, preserve_index=False)
    columns = list(batch) if isinstance(batch, tuple) else [batch]
    if len(columns) != len(names):
        raise FeatureCountError(
            f"{forest.model_kind} takes {len(names)} feature columns in order, or one "
            f"struct of named columns; the function was given {len(columns)} column(s)"
        )
    return pa.table({n: pa.Array.from_pandas(c) for n, c in zip(names, columns, strict=True)})

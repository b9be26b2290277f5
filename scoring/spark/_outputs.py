"""What a scoring UDF returns: one output (a column) or all of them (a struct), typed
from the model's :class:`~scoring._outputs.OutputLayout`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .._ir import Forest
from .._outputs import OutputLayout
from ..errors import ConfigError

__all__ = ["UDF_OUTPUTS", "OutputSpec", "output_spec"]

UDF_OUTPUTS = ("probability", "label", "prediction", "raw", "all")
"""What ``register_udf(..., output=)`` may return: see :func:`scoring.spark.register_udf`."""


class OutputSpec:
    """The Spark type of an output and how to cut it from a scored Arrow table."""

    def __init__(self, output: str, layout: OutputLayout):
        self.output, self.layout = output, layout
        self.columns = list(layout.names) if output == "all" else layout.group(output)
        # several columns (per class, or per target): one array per row
        self.per_class = output != "all" and len(self.columns) > 1

    @property
    def spark_type(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_type
        from pyspark.sql.types import ArrayType, StructField, StructType

        types = dict(zip(self.layout.names, self.layout.types, strict=True))
        if self.output == "all":
            return StructType([StructField(n, from_arrow_type(types[n])) for n in self.columns])
        if self.per_class:
            return ArrayType(from_arrow_type(types[self.columns[0]]))
        return from_arrow_type(types[self.columns[0]])

    def cut(self, scored: pa.Table) -> pd.Series | pd.DataFrame:
        if self.output == "all":
            return scored.select(self.columns).to_pandas()
        if self.per_class:
            matrix = np.column_stack([scored.column(c).to_numpy() for c in self.columns])
            return pd.Series(list(matrix))
        return scored.column(self.columns[0]).to_pandas()


def output_spec(forest: Forest, output: str) -> OutputSpec:
    """Check ``output`` against the model's task; ``raw`` outputs are always available."""
    if output not in UDF_OUTPUTS:
        raise ConfigError(f"output={output!r}: expected one of {', '.join(UDF_OUTPUTS)}")
    layout = OutputLayout.of(forest, "raw")
    spec = OutputSpec(output, layout)
    if not spec.columns:
        valid = [o for o in UDF_OUTPUTS if OutputSpec(o, layout).columns]
        raise ConfigError(
            f"output={output!r} does not exist for {forest.model_kind} "
            f"({forest.task}); choose one of {', '.join(valid)}"
        )
    return spec

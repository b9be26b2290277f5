"""What a scoring UDF returns: one output (a column) or all of them (a struct)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import InputError
from ..model import CompiledModel
from ..registry.verify import probe_frame
from ..scorer import Scorer

__all__ = ["UDF_OUTPUTS", "OutputSpec", "output_spec", "probe_schema"]

UDF_OUTPUTS = ("probability", "label", "prediction", "raw", "all")


class OutputSpec:
    """The Spark type of an output and how to cut it from a scored Arrow table."""

    def __init__(self, output: str, schema: pa.Schema, task: str):
        self.output, self.schema, self.task = output, schema, task
        self.columns = self._columns()

    def _columns(self) -> list[str]:
        names = self.schema.names
        if self.output == "all":
            return names
        if self.output in names:
            return [self.output]
        if self.output in ("probability", "raw") and self.task == "multiclass":
            return [n for n in names if n.startswith(f"{self.output}_")]  # one per class
        return []

    @property
    def spark_type(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_type
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

        if self.output == "all":
            fields = [
                StructField(n, from_arrow_type(self.schema.field(n).type)) for n in self.columns
            ]
            return StructType(fields)
        if self.task == "multiclass" and self.output != "label":
            return ArrayType(DoubleType())
        return from_arrow_type(self.schema.field(self.columns[0]).type)

    def cut(self, scored: pa.Table) -> pd.Series | pd.DataFrame:
        if self.output == "all":
            return scored.select(self.columns).to_pandas()
        if self.task == "multiclass" and self.output != "label":
            matrix = np.column_stack([scored.column(c).to_numpy() for c in self.columns])
            return pd.Series(list(matrix))
        return scored.column(self.columns[0]).to_pandas()


def probe_schema(model: CompiledModel, outputs: str) -> pa.Schema:
    """The output columns' Arrow schema, learnt by scoring a few probe rows."""
    probe = probe_frame(model.forest, n_rows=4)
    if not isinstance(probe, pd.DataFrame):
        probe = pd.DataFrame(probe, columns=[f"f{i}" for i in range(probe.shape[1])])
    scored = Scorer(model, outputs=outputs).score(pa.Table.from_pandas(probe, preserve_index=False))
    return scored.schema.remove_metadata()


def output_spec(model: CompiledModel, output: str) -> OutputSpec:
    """Check ``output`` against the model's task and learn its type from a probe score."""
    if output not in UDF_OUTPUTS:
        raise InputError(f"output={output!r}: expected one of {', '.join(UDF_OUTPUTS)}")
    schema = probe_schema(model, "raw")
    spec = OutputSpec(output, schema, model.forest.task)
    if not spec.columns:
        valid = [o for o in UDF_OUTPUTS if OutputSpec(o, schema, model.forest.task).columns]
        raise InputError(
            f"output={output!r} does not exist for {model.forest.model_kind} "
            f"({model.forest.task}); choose one of {', '.join(valid)}"
        )
    return spec

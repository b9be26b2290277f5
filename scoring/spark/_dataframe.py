"""``score_dataframe``: a DataFrame with kept columns and the local engine's outputs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from ..scorer import Scorer
from ._outputs import probe_schema
from ._session import tune_session
from ._worker import worker_model

__all__ = ["score_dataframe"]


def score_dataframe(
    df: Any,
    model: Any,
    *,
    keep: Sequence[str] | None = None,
    outputs: str = "default",
    device: str = "auto",
    backend: str = "auto",
    registry: Any = None,
) -> Any:
    """``df`` scored by ``model`` through ``mapInArrow`` (no pandas on the way).

    ``keep=None`` keeps every input column.  Columns are matched as the Scorer does
    and checked here, on the driver: a missing feature column raises an error naming it.
    """
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    from ..engines import resolve_bundle

    bundle = resolve_bundle(model, registry=registry)
    checker = bundle.compile(backend="native")
    kept = list(df.columns if keep is None else keep)
    scorer = Scorer(checker, keep=kept, outputs=outputs)
    scorer.check_schema(to_arrow_schema(df.schema))
    columns = list(dict.fromkeys([*kept, *scorer.feature_columns(df.columns)]))
    scored = probe_schema(checker, outputs)
    target = pa.schema([*to_arrow_schema(df.select(*kept).schema), *scored])
    tune_session(df.sparkSession)
    payload = df.sparkSession.sparkContext.broadcast(bundle.to_bytes())

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cm = worker_model(payload, device=device, backend=backend)
        worker = Scorer(cm, keep=kept, outputs=outputs)
        for batch in batches:
            yield from worker.score(batch).cast(target).to_batches()

    out_schema = from_arrow_schema(target)
    return df.select(*columns).mapInArrow(score, out_schema)

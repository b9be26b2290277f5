"""``score_dataframe``: a DataFrame with kept columns and the local engine's outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._engines.base import resolve_model
from .._engines.plan import ScoreSpec
from .._engines.spark import score_frame
from .._explanations import output_spec

__all__ = ["score_dataframe"]


def score_dataframe(
    df: Any,
    model: Any,
    *,
    keep: Sequence[str] | None = None,
    outputs: str | Sequence[str] = "default",
    device: str = "auto",
    backend: str = "auto",
    registry: Any = None,
) -> Any:
    """``df`` scored by ``model`` through ``mapInArrow`` (no pandas on the way).

    ``model`` may be a list of models, scored in one pass as ``score_parquet`` takes it.

    ``keep=None`` keeps every input column.  Columns are matched as the Scorer does
    and checked here, on the driver: a missing feature column raises an error naming it.
    """
    source = resolve_model(model, registry=registry, local=False)
    kept = list(df.columns if keep is None else keep)
    spec = output_spec(outputs)  # scores, contributions, reasons: see scoring._explanations
    how = ScoreSpec(keep=tuple(kept), outputs=spec, device=device, backend=backend)
    return score_frame(df, source, how)

"""Sample rows kept with a version (pickle-free), for re-verification on other devices."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["SAMPLE_ROWS", "read_sample", "sample_from_bytes", "sample_to_bytes"]

SAMPLE_ROWS = 10_000


def read_sample(sample: Any) -> Any:
    """A sample given as a Parquet path is read; any other input is kept as is."""
    if isinstance(sample, (str, os.PathLike)):
        return pq.read_table(sample).to_pandas()
    if isinstance(sample, (pa.Table, pa.RecordBatch)):
        return sample.to_pandas()
    return sample


def sample_to_bytes(sample: Any) -> tuple[bytes, str]:
    """The first SAMPLE_ROWS rows as Parquet (frames) or .npy (arrays), pickle-free."""
    buf = io.BytesIO()
    if isinstance(sample, pd.DataFrame):
        pq.write_table(pa.Table.from_pandas(sample.head(SAMPLE_ROWS), preserve_index=False), buf)
        return buf.getvalue(), "sample.parquet"
    np.save(buf, np.asarray(sample)[:SAMPLE_ROWS], allow_pickle=False)
    return buf.getvalue(), "sample.npy"


def sample_from_bytes(data: bytes, filename: str) -> Any:
    if filename.endswith(".npy"):
        return np.load(io.BytesIO(data), allow_pickle=False)
    return pq.read_table(io.BytesIO(data)).to_pandas()

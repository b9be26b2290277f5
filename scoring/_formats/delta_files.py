"""What a Delta add action says of a file, as delta-rs's own writer says it: the file's
statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``, from its
Parquet footer, so readers can skip it) and its partition values (from the
``key=value`` folders of its path).

Statistics are taken per top-level column from every row group's footer statistics:
min and max where every row group has them (NaN never counts, as in Parquet's own),
null counts where every row group has them.  Values are written as delta-rs writes
them: numbers and booleans as JSON values, text as is, dates as ``YYYY-MM-DD`` and
timestamps in UTC to the millisecond with a ``Z``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

__all__ = ["file_stats", "partition_values"]


def file_stats(metadata: pq.FileMetaData) -> str:
    """The add action's ``stats`` for a file with this footer."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    schema = metadata.schema
    for i in range(metadata.num_columns):
        path = schema.column(i).path
        if "." in path:  # nested: delta-rs nests these; the product writes none
            continue
        groups = [
            metadata.row_group(g).column(i).statistics for g in range(metadata.num_row_groups)
        ]
        if not groups or any(s is None for s in groups):
            continue
        if all(s.has_null_count for s in groups):
            nulls[path] = sum(int(s.null_count) for s in groups)
        bounds = [(s.min, s.max) for s in groups if s.has_min_max]
        if len(bounds) == len(groups):
            low, high = _bound(min(b[0] for b in bounds)), _bound(max(b[1] for b in bounds))
            if low is not None and high is not None:
                minimum[path], maximum[path] = low, high
    stats = {"numRecords": metadata.num_rows, "minValues": minimum, "maxValues": maximum,
             "nullCount": nulls}  # fmt: skip
    return json.dumps(stats, separators=(",", ":"))


def _bound(value: Any) -> Any:
    """A footer statistic as a Delta stats value; None where there is none to give."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dt.datetime):
        at = value.astimezone(dt.timezone.utc) if value.tzinfo else value
        return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return None  # binary: no order readers agree on
    if isinstance(value, (bool, int, float, str)):
        return value
    return None


def partition_values(relpath: str, columns: list[str]) -> dict[str, str | None]:
    """The values of ``columns`` that the ``key=value`` folders of ``relpath`` name
    (Hive's ``__HIVE_DEFAULT_PARTITION__`` is a null, and so is the empty string: the
    Delta protocol serialises both as null, as Spark's writer does)."""
    found = {}
    for part in relpath.split("/")[:-1]:
        key, sep, value = part.partition("=")
        if sep:
            found[unquote(key)] = unquote(value)
    return {
        c: (None if found[c] in ("", "__HIVE_DEFAULT_PARTITION__") else found[c]) for c in columns
    }

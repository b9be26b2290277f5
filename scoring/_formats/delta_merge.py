"""An incremental run's merge into a Delta table: its scored rows replace or add the
rows of their key, the keys deleted from the input remove theirs, in one delta-rs
``MERGE`` (one commit, carrying the run's transaction)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from .._journal.journal import Journal
from .dataset import arrow_filesystem

__all__ = ["merge", "merge_source"]

#: The merge source's column saying what each row does: ``upsert`` or ``delete``.
CHANGE = "_scoring_change"


def merge(table: Any, source: pa.Table, *, key: Sequence[str], properties: Any) -> None:
    """Merge ``source`` (:func:`merge_source`) into ``table`` on the ``key`` columns."""
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)
    mark = [CHANGE]
    (
        table.merge(source, on, source_alias="s", target_alias="t",
                    commit_properties=properties)
        .when_matched_delete(f"s.`{CHANGE}` = 'delete'")
        .when_matched_update_all(f"s.`{CHANGE}` = 'upsert'", except_cols=mark)
        .when_not_matched_insert_all(f"s.`{CHANGE}` = 'upsert'", except_cols=mark)
        .execute()
    )  # fmt: skip


def merge_source(
    journal: Journal, paths: list[str], *, base: str, deletes: str | None, target: pa.Schema
) -> pa.Table:
    """The scored files ``paths`` (partition columns read back from their ``key=value``
    folders below ``base``) marked ``upsert``, and the staged deleted keys (the Parquet
    file ``deletes``) marked ``delete``, in the table's schema ``target``."""
    parts = []
    if paths:
        scored = pads.dataset(paths, format="parquet", filesystem=arrow_filesystem(journal.fs),
                              partitioning="hive", partition_base_dir=base).to_table()  # fmt: skip
        parts.append(_marked(scored, "upsert", target))
    if deletes is not None:
        with journal.fs.open(deletes, "rb") as f:
            parts.append(_marked(pq.read_table(f), "delete", target))
    return pa.concat_tables(parts)


def _marked(table: pa.Table, change: str, target: pa.Schema) -> pa.Table:
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in target
    ]  # fmt: skip
    return pa.Table.from_arrays([*columns, pa.array([change] * table.num_rows)],
                                names=[*target.names, CHANGE])  # fmt: skip

"""A Delta table's change data feed read from its log, as the Delta protocol defines it,
for the tables delta-rs's own ``load_cdf`` cannot read.

delta-rs (1.6) URI-encodes a change file's path once more than the log holds it, so
in a table partitioned by a value that a path escapes (a space, ``/``, ``%``, ``é``,
``:``) every change file under ``_change_data/`` is "not found".  Where a version range
holds such a file, :func:`changes` reads the range from the commits themselves:

- a commit with ``cdc`` actions: their files are its changes (each row's
  ``_change_type`` is in the file), the partition values from the action;
- a commit without: each ``add`` with ``dataChange`` is its rows inserted, each
  ``remove`` with ``dataChange`` its rows deleted (the file read as it was).

Each row gets its ``_commit_version``.  Deletion vectors and column mapping are refused
before a run gets here (:mod:`scoring._formats.dataset`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["changes", "escaped_log"]

_CHANGE = "_change_type"
_VERSION = "_commit_version"


#: Each commit's actions by kind, by version.
Log = dict[int, dict[str, list[dict[str, Any]]]]


def escaped_log(url: str, *, since: int, until: int) -> Log | None:
    """The commits of versions ``since .. until``, where one names a file whose path is
    escaped (the files delta-rs cannot find); None where none does."""
    log = _log(url, since=since, until=until)
    escaped = any("%" in a["path"] for actions in log.values()
                  for kind in ("cdc", "add", "remove") for a in actions.get(kind, []))  # fmt: skip
    return log if escaped else None


def changes(
    url: str, *, schema: pa.Schema, partitions: Sequence[str], since: int, until: int,
    columns: Sequence[str], log: Log | None = None,
) -> pa.Table:  # fmt: skip
    """The rows changed in versions ``since .. until`` of the table at ``url`` (whose
    ``schema`` and ``partitions`` are the pinned version's): ``columns`` of the table,
    ``_change_type`` and ``_commit_version``; ``log``: those commits, already read."""
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    log = _log(url, since=since, until=until) if log is None else log
    wanted = [c for c in columns if c not in (_CHANGE, _VERSION)]
    marks = [pa.field(_CHANGE, pa.string()), pa.field(_VERSION, pa.int64())]
    target = pa.schema([schema.field(c) for c in wanted] + marks)
    parts = []
    for version, actions in log.items():
        files = ([(a, None) for a in actions.get("cdc", [])] if actions.get("cdc") else
                 [(a, "insert") for a in actions.get("add", []) if a.get("dataChange", True)]
                 + [(a, "delete") for a in actions.get("remove", [])
                    if a.get("dataChange", True)])  # fmt: skip
        for action, kind in files:
            rows = _rows(fs, f"{root}/{unquote(action['path'])}", action, schema=schema,
                         partitions=partitions, wanted=wanted, kind=kind)  # fmt: skip
            version_column = pa.array([version] * rows.num_rows, pa.int64())
            parts.append(rows.append_column(_VERSION, version_column).select(target.names)
                         .cast(target))  # fmt: skip
    return pa.concat_tables(parts) if parts else target.empty_table()


def _log(url: str, *, since: int, until: int) -> Log:
    fs, root = fsspec.core.url_to_fs(url)
    return {v: _actions(fs, root.rstrip("/"), v) for v in range(since, until + 1)}


def _actions(fs: Any, root: str, version: int) -> dict[str, list[dict[str, Any]]]:
    """The actions of one commit, by kind."""
    found: dict[str, list[dict[str, Any]]] = {}
    text = fs.cat_file(f"{root}/_delta_log/{version:020d}.json").decode()
    for line in text.splitlines():
        if line.strip():
            for kind, action in json.loads(line).items():
                found.setdefault(kind, []).append(action)
    return found


def _rows(
    fs: Any, path: str, action: dict[str, Any], *, schema: pa.Schema, partitions: Sequence[str],
    wanted: Sequence[str], kind: str | None,
) -> pa.Table:  # fmt: skip
    """One file's rows: its own columns, the partition values its action names, and
    ``_change_type`` (from the file, or ``kind``)."""
    with fs.open(path, "rb") as f:
        stored = pq.read_schema(f).names
        own = [c for c in wanted if c in stored and c not in partitions]
        rows = pq.read_table(f, columns=[*own, *([_CHANGE] if kind is None else [])])
    values = action.get("partitionValues") or {}
    for column in wanted:
        if column in rows.column_names:
            continue
        value = values.get(column) if column in partitions else None
        kind_of = schema.field(column).type
        scalar = pa.scalar(value or None, pa.string()).cast(kind_of)
        rows = rows.append_column(column, pa.array([scalar.as_py()] * rows.num_rows, kind_of))
    if kind is not None:
        rows = rows.append_column(_CHANGE, pa.array([kind] * rows.num_rows, pa.string()))
    return rows

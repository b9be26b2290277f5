"""A Delta Lake table, read and written through delta-rs (no JVM): a run published as
one commit to the table's transaction log (:mod:`scoring._formats.table`).

A run's files are placed under ``scoring-<run id>/`` of the table folder (readers and
``VACUUM`` skip the ``_temporary/`` they were staged in) and added in one commit that
carries the application transaction ``scoring-<run id>``: a rerun finds it there.  A
partitioned table's files leave their partition columns to ``key=value`` folders
(:mod:`scoring._formats.delta_files`); an incremental run with updated or deleted rows
merges on its key (:mod:`scoring._formats.delta_merge`).

Read as an input (:func:`read_delta`), a table's snapshot (its latest version, or the
one asked for) is pinned when the input is opened, and the files of that version, each
with its partition values, are the input's files; an incremental run reads its change
data feed (:mod:`scoring._formats.delta_cdf`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import fsspec
import fsspec.config
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from .._journal.journal import Journal
from .._journal.manifest import FileRecord
from ..errors import (
    READ_FIX,
    DependencyError,
    InputFileError,
    OutputError,
    cause_line,
    translated,
)
from .dataset import InputDataset, snapshot_dataset, table_input, without_delta_prefix
from .delta_files import file_stats, partition_values
from .delta_merge import merge, merge_source
from .publication import INCREMENTAL, Opening, Target, table_mode, table_settings
from .table import TablePublisher

__all__ = ["DeltaTable", "delta_storage_options", "open_delta", "read_delta"]


def open_delta(output: str, opening: Opening) -> TablePublisher:
    """A Delta table's publisher, as the run's :class:`Opening` says."""
    mode = table_mode("Delta", opening.mode, extra=(INCREMENTAL,))
    _deltalake()  # refused before anything is written when delta-rs is missing
    journal = Journal(output, job=opening.job, settings=table_settings("delta", mode, opening))
    return TablePublisher(journal, DeltaTable(journal, partitions=opening.partitions),
                          url=journal.url, mode=mode, on_step=opening.on_step)  # fmt: skip


class DeltaTable:
    """A Delta table as :class:`~scoring._formats.table.TablePublisher` writes it."""

    kind = "Delta"
    unit = "version"
    holds_data = "already exists"
    incremental_only = "replaces or merges only a table it wrote"
    merges = True

    def __init__(self, journal: Journal, *, partitions: dict[str, pa.DataType] | None = None):
        self.journal = journal  # the staging's: where the table's files are
        self.url = journal.url
        #: The table's partition columns and their types: the files leave them to their
        #: ``key=value`` folders (:mod:`scoring._formats.delta_files`).
        self.partition_types = dict(partitions or {})
        self.partition_by = list(self.partition_types)

    def load(self) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.url, storage_options=delta_storage_options(self.url))
        except deltalake.exceptions.TableNotFoundError:
            return None

    def holds(self, table: Any) -> bool:
        return table is not None

    def last_run(self, table: Any) -> dict[str, Any] | None:
        deltalake = _deltalake()
        try:
            history = table.history()
        except deltalake.exceptions.DeltaError as exc:
            raise OutputError(
                f"cannot read the history of Delta table {table.table_uri!r}: "
                f"{cause_line(exc)}; check that its _delta_log is readable and whole"
            ) from exc
        return next((c for c in history if "scoring.job_key" in c), None)

    def committed(self, table: Any, run: str) -> bool:
        return table is not None and table.transaction_version(f"scoring-{run}") is not None

    def folder(self, run: str) -> str:
        return f"scoring-{run}"

    def check_schema(self, schema: pa.Schema) -> None:
        """delta-rs checks the schema in the commit itself (and names the column)."""

    def _properties(self, target: Target, summary: dict[str, Any]) -> Any:
        """The commit's metadata and the run's application transaction."""
        deltalake = _deltalake()
        from deltalake.transaction import CommitProperties

        # The log records the input's version alone, as it always has.
        metadata = {k: v for k, v in summary.items() if k != "scoring.input_format"}
        return CommitProperties(
            custom_metadata=metadata,
            app_transactions=[deltalake.Transaction(app_id=f"scoring-{target.run}", version=1)],
        )

    def merge(self, target: Target, table: Any, paths: list[str], *, base: str,
              summary: Callable[[int], dict[str, Any]]) -> None:  # fmt: skip
        """One merge on the key columns, one commit carrying the run's transaction
        (:func:`scoring._formats.delta_merge.merge`)."""
        deltalake = _deltalake()
        source = merge_source(target.journal, paths, base=base, deletes=target.deletes,
                              target=pa.schema(table.schema().to_arrow()))  # fmt: skip
        try:
            merge(table, source, key=list(target.key),
                  properties=self._properties(target, summary(source.num_rows)))  # fmt: skip
        except deltalake.exceptions.DeltaError as exc:
            raise OutputError(
                f"cannot merge into Delta table {self.url!r} on {list(target.key)}: "
                f"{cause_line(exc)}"
            ) from exc

    def commit(self, target: Target, table: Any, files: list[FileRecord], *,
               summary: dict[str, Any]) -> None:  # fmt: skip
        deltalake = _deltalake()
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        footers = [self._footer(f) for f in files]
        adds = [
            AddAction(f.output, f.bytes, partition_values(f.output, self.partition_by), now,
                      True, file_stats(footer))
            for f, footer in zip(files, footers, strict=True)
        ]  # fmt: skip
        schema = _delta_schema(footers[0].schema.to_arrow_schema(), self.partition_types)
        properties = self._properties(target, summary)
        try:
            if table is None:
                deltalake.transaction.create_table_with_add_actions(
                    self.url, schema, adds, mode="error",
                    partition_by=self.partition_by or None,
                    storage_options=delta_storage_options(self.url),
                    commit_properties=properties,
                )  # fmt: skip
            else:
                table.create_write_transaction(
                    [*adds, *self._replaced(target.mode, table, adds)],
                    mode="overwrite" if target.mode == "overwrite" else "append",
                    schema=schema, partition_by=self.partition_by or None,
                    commit_properties=properties,
                )  # fmt: skip
        except deltalake.exceptions.DeltaError as exc:
            raise OutputError(
                f"cannot commit to Delta table {self.url!r}: {cause_line(exc)}; an "
                "existing table must have this run's output columns and types (or use "
                "mode 'overwrite')"
            ) from exc

    def _footer(self, record: FileRecord) -> pq.FileMetaData:
        path = f"{self.journal.root}/{record.output}"
        try:
            with self.journal.fs.open(path, "rb") as f:
                return pq.read_metadata(f)
        except (OSError, pa.ArrowException) as exc:
            raise OutputError(
                f"cannot read the footer of this run's file {path!r} to commit it to Delta "
                f"table {self.url!r}: {cause_line(exc)}; nothing was committed: check the "
                "output's storage, then rerun"
            ) from exc

    def _replaced(self, mode: str, table: Any, adds: list[Any]) -> list[Any]:
        """``overwrite_partitions``: the table's files in the partitions this run writes,
        removed in the same commit that adds the run's (every other partition kept)."""
        if mode != "overwrite_partitions":
            return []
        from deltalake.transaction import RemoveAction

        touched = {_partition_key(a.partition_values, self.partition_by) for a in adds}
        now = int(time.time() * 1000)
        removed = []
        for f in pa.table(table.get_add_actions(flatten=True)).to_pylist():
            values = {c: f.get(f"partition.{c}") for c in self.partition_by}
            if _partition_key(values, self.partition_by) in touched:
                # The log holds paths URI-encoded, and delta-rs encodes a remove action's
                # path again: hand it the file's own path, as an add action gets it.
                removed.append(RemoveAction(unquote(f["path"]), True, now, f["size_bytes"],
                                            {c: _text(v) for c, v in values.items()}))  # fmt: skip
        return removed


def _partition_key(values: Mapping[str, Any], columns: list[str]) -> tuple[str | None, ...]:
    return tuple(_text(values.get(c)) for c in columns)


def _text(value: Any) -> str | None:
    """A partition value as the log writes it (text; a date as YYYY-MM-DD)."""
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _deltalake() -> Any:
    try:
        import deltalake
        import deltalake.exceptions
        import deltalake.transaction
    except ImportError:
        raise DependencyError(
            "Delta Lake outputs need delta-rs: pip install 'scoring[delta]'"
        ) from None
    return deltalake


def _delta_schema(schema: pa.Schema, partitions: dict[str, pa.DataType]) -> Any:
    """The table schema of files written with ``schema`` (and the ``partitions``' columns,
    which the files leave to their folders): Delta has no dictionary or large types (the
    files keep their encodings; readers see the value types)."""
    from deltalake import Schema

    fields = [pa.field(f.name, _plain(f.type), nullable=True) for f in schema]
    fields += [pa.field(n, _plain(t), nullable=True) for n, t in partitions.items()]
    return Schema.from_arrow(pa.schema(fields))


def _plain(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(kind):
        return _plain(kind.value_type)
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    return kind


# -- reading ----------------------------------------------------------------------


def delta_storage_options(url: str) -> dict[str, str]:
    """delta-rs's options for ``url``'s object store, from fsspec's configuration (the
    command's storage options, :mod:`scoring._stores`) and the AWS environment."""
    protocol = fsspec.utils.get_protocol(url)
    if protocol not in ("s3", "s3a"):
        return {}
    conf = fsspec.config.conf.get("s3", {})
    options = {"AWS_ENDPOINT_URL": conf.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")}
    options["AWS_ACCESS_KEY_ID"] = conf.get("key")
    options["AWS_SECRET_ACCESS_KEY"] = conf.get("secret")
    if str(options["AWS_ENDPOINT_URL"] or "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"  # a local S3 API (MinIO, moto) without TLS
    return {k: str(v) for k, v in options.items() if v}


def read_delta(url: str, *, version: int | str | None, empty: bool = False) -> InputDataset:
    """A Delta table's snapshot as an input: the latest version, or the one asked for
    (a number, or an ISO 8601 time: the version current then), its files those of that
    version, each with its partition values.  Deletion vectors and column mapping change
    what a file's rows or columns mean without rewriting it: tables with either are
    refused."""
    url = without_delta_prefix(url)[0]
    with translated("table read", f"cannot read Delta table {url!r}", fix=READ_FIX):
        return _delta_snapshot(url, version=version, empty=empty)


def _delta_snapshot(url: str, *, version: int | str | None, empty: bool) -> InputDataset:
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError
    except ImportError:
        raise DependencyError(
            f"input {url!r} is a Delta table: reading it needs delta-rs: pip install "
            "'scoring[delta]'"
        ) from None
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    number = version if isinstance(version, int) else None
    if isinstance(version, str) and version.isdigit():
        number = int(version)
    try:
        table = DeltaTable(url, version=number, storage_options=delta_storage_options(url))
        if version is not None and number is None:  # a time: the version current then
            _load_as_of(table, str(version), url)
    except TableNotFoundError:
        raise InputFileError(f"input {url!r} is not a Delta table (no _delta_log)") from None
    except InputFileError:
        raise
    except (DeltaError, ValueError) as exc:  # ValueError: a time that is no ISO 8601 time
        raise InputFileError(_unreadable(url, fs, root, version, exc)) from None
    try:  # the version's state: its log read on
        _refuse_rewriting_features(table, url)
        schema = pa.schema(table.schema().to_arrow())
        adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        partitioned = list(table.metadata().partition_columns)
    except DeltaError as exc:
        raise InputFileError(_unreadable(url, fs, root, version, exc)) from None
    adds = sorted(adds, key=lambda a: str(a["path"]))
    paths = [f"{root}/{unquote(a['path'])}" for a in adds]
    values = [_partition(a, partitioned, schema) for a in adds]
    dataset = snapshot_dataset(fs, paths, schema, partitions=values)
    data = table_input(url, fs, dataset, root, empty=empty)
    data.snapshot = {"format": "delta", "version": int(table.version())}
    data.requested_version = number if number is not None else version
    return data


def _unreadable(url: str, fs: Any, root: str, version: int | str | None, exc: Exception) -> str:
    """Why a Delta table cannot be read, naming a damaged commit file (the newest,
    when the latest version was asked for) and the older versions that still read."""
    at = version or "its latest version"
    said = f"cannot read Delta table {url!r} at {at}: {cause_line(exc)}"
    if version is not None:
        return said
    commits = sorted(p for p in fs.glob(f"{root}/_delta_log/*.json")
                     if p.rsplit("/", 1)[-1][:-5].isdigit())  # fmt: skip
    if not commits or _parses(fs, commits[-1]):
        return said
    newest = int(commits[-1].rsplit("/", 1)[-1][:-5])
    older = (f"; --input-version {newest - 1} (input_version = {newest - 1}) still reads "
             "the versions before it" if newest > 0 else "")  # fmt: skip
    return (
        f"cannot read Delta table {url!r}: its latest version {newest} has a damaged commit "
        f"file _delta_log/{commits[-1].rsplit('/', 1)[-1]} ({cause_line(exc)}){older}"
    )


def _parses(fs: Any, path: str) -> bool:
    """Whether every line of a commit file is JSON (a truncated one is not)."""
    try:
        for line in fs.cat_file(path).decode().splitlines():
            if line.strip():
                json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _load_as_of(table: Any, when: str, url: str) -> None:
    """The table at the version current at ``when`` (ISO 8601; naive means UTC); a time
    before its first version is refused (delta-rs would give that version)."""
    from datetime import datetime, timezone

    at = datetime.fromisoformat(when)
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    first = min(int(h["timestamp"]) for h in table.history())  # ms since the epoch
    if at.timestamp() * 1000 < first:
        created = datetime.fromtimestamp(first / 1000, timezone.utc).isoformat()
        raise InputFileError(
            f"Delta table {url!r} has no version at {when}: its first was committed at "
            f"{created}; ask for a later time or a version number"
        )
    table.load_as_version(at)


def _refuse_rewriting_features(table: Any, url: str) -> None:
    features = set(table.protocol().reader_features or [])
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if "columnMapping" in features and mapping != "none":
        raise InputFileError(
            f"Delta table {url!r} uses column mapping ({mapping}): its files' column names "
            "are not the table's; rewrite it without column mapping to score it"
        )
    if "deletionVectors" in features and pa.table(table.deletion_vectors()).num_rows:
        raise InputFileError(
            f"Delta table {url!r} has deletion vectors: rows deleted without rewriting "
            "their files; purge them (OPTIMIZE ... or REORG TABLE ... APPLY (PURGE)) first"
        )


def _partition(add: dict[str, Any], columns: list[str], schema: pa.Schema) -> Any:
    """The file's partition values as the expression pyarrow fills those columns from."""
    expression = pads.scalar(True)
    for column in columns:
        value = add.get(f"partition.{column}")
        kind = schema.field(column).type
        term = (pads.field(column).is_null() if value is None
                else pads.field(column) == pa.scalar(value).cast(kind))  # fmt: skip
        expression = expression & term
    return expression

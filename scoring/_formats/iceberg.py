"""An Apache Iceberg table, read and written through pyiceberg (no JVM, no Spark runtime
jars): a run published as one snapshot in one catalog commit
(:mod:`scoring._formats.table`), and a snapshot read as an input (:func:`read_iceberg`).

The table is named through its catalog, ``iceberg:CATALOG.NAMESPACE.TABLE``
(:mod:`scoring._formats.iceberg_catalog`, which also reads an Iceberg input).  A run's
files are placed under ``data/scoring-<run id>/`` of the table's location and added in
one snapshot whose summary carries ``scoring.run`` (the run's id), the job key, the rows
and the input (and its snapshot or version) read: a rerun finds it there.  A table
created empty ahead of the run is written in mode ``error``; an absent table is created
with the output's schema (and its ``partition_by`` columns as identity partitions) in
that same commit; an existing table's schema is checked against the output's, naming the
column that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from .._journal.journal import Journal
from .._journal.manifest import FileRecord
from ..errors import WRITE_FIX, ConfigError, OutputError, cause_line, translated
from . import iceberg_catalog as catalogs
from .dataset import InputDataset, snapshot_dataset, table_input
from .publication import INCREMENTAL, Opening, Target, table_mode, table_settings
from .table import TablePublisher

__all__ = ["IcebergTable", "open_iceberg", "read_iceberg"]


def open_iceberg(output: str, opening: Opening) -> TablePublisher:
    """An Iceberg table's publisher, as the run's :class:`Opening` says."""
    mode = table_mode("Iceberg", opening.mode, extra=(INCREMENTAL,))
    catalogs.pyiceberg()  # refused before anything is written when pyiceberg is missing
    ref = catalogs.parse(output)
    if ref.metadata is not None:
        raise ConfigError(
            f"Iceberg output {output!r}: a table is written through its catalog; name it "
            "iceberg:CATALOG.NAMESPACE.TABLE"
        )
    if mode == "overwrite_partitions" and not opening.partitions:
        raise ConfigError(
            "mode 'overwrite_partitions' replaces the partitions a run writes: name the "
            "output's partition columns (partition_by)"
        )
    settings = table_settings("iceberg", mode, opening)
    with translated("table write", f"cannot open Iceberg table {output!r}", fix=WRITE_FIX):
        journal = Journal(catalogs.table_location(ref), job=opening.job, settings=settings)
    table = IcebergTable(journal, ref=ref, partitions=list(opening.partitions))
    return TablePublisher(journal, table, url=ref.text, mode=mode, on_step=opening.on_step)


class IcebergTable:
    """An Iceberg table as :class:`~scoring._formats.table.TablePublisher` writes it."""

    kind = "Iceberg"
    unit = "snapshot"
    holds_data = "already holds data"
    incremental_only = "replaces or adds to a table it wrote only"
    #: An Iceberg input's changes are appended snapshots: nothing to merge.
    merges = False

    def __init__(self, journal: Journal, *, ref: catalogs.TableRef, partitions: Sequence[str] = ()):
        #: The files keep their partition columns (Iceberg's own files hold partition
        #: source columns), so none is left to folders.
        self.partition_by: list[str] = []
        self.journal = journal  # the staging's: the table's location
        self.url = ref.text
        self.ref = ref
        #: The table's identity partition columns.
        self.partitions = list(partitions)

    def load(self) -> Any:
        return catalogs.load_table(self.ref)

    def holds(self, table: Any) -> bool:
        return table is not None and table.current_snapshot() is not None

    def last_run(self, table: Any) -> dict[str, str] | None:
        """The summary of the newest snapshot of the current history a run committed."""
        from pyiceberg.table.snapshots import ancestors_of

        current = table.current_snapshot()
        if current is None:
            return None
        for snapshot in ancestors_of(current, table.metadata):
            summary = _summary(snapshot)
            if "scoring.job_key" in summary:
                return summary
        return None

    def committed(self, table: Any, run: str) -> bool:
        return table is not None and any(
            _summary(s).get("scoring.run") == run for s in table.snapshots()
        )

    def folder(self, run: str) -> str:
        return f"data/scoring-{run}"

    def check_schema(self, schema: pa.Schema) -> None:
        """An existing table's columns against the run's (:func:`_check_schema`), in
        every mode (``overwrite`` replaces rows, not the schema); a table this run
        creates takes the run's."""
        table = catalogs.load_table(self.ref)
        if table is not None:
            _check_schema(table, _table_schema(schema), self.url)

    def merge(self, target: Target, table: Any, paths: list[str], *, base: str,
              summary: Callable[[int], dict[str, Any]]) -> None:  # fmt: skip
        raise OutputError(f"Iceberg table {self.url!r}: an Iceberg output is not merged")

    def commit(self, target: Target, table: Any, files: list[FileRecord], *,
               summary: dict[str, Any]) -> None:  # fmt: skip
        """One catalog commit: the table created if absent, its files replaced as the
        mode says, the run's files added, in one snapshot (its summary's values text)."""
        module = catalogs.pyiceberg()
        paths = [target.journal.fs.unstrip_protocol(f"{target.journal.root}/{f.output}")
                 for f in files]  # fmt: skip
        schema = _table_schema(self._footer(files[0]).schema.to_arrow_schema()) if files else None
        properties = {k: str(v) for k, v in summary.items()}
        try:
            if table is None:
                txn = self._create(schema)
            else:
                if schema is not None:
                    _check_schema(table, schema, self.url)
                txn = table.transaction()
            self._snapshot(txn, table, paths, mode=target.mode, summary=properties)
            txn.commit_transaction()
        except (module.exceptions.CommitFailedException,
                module.exceptions.ValidationException) as exc:  # another commit won  # fmt: skip
            raise OutputError(
                f"Iceberg table {self.url!r} changed while this run committed "
                f"({cause_line(exc)}); rerun: its files are kept and committed once"
            ) from exc
        except ValueError as exc:  # pyiceberg's word on a file it cannot add
            raise OutputError(f"cannot commit to Iceberg table {self.url!r}: {cause_line(exc)}"
                              ) from exc  # fmt: skip

    def _create(self, schema: pa.Schema | None) -> Any:
        """A transaction creating the table where the run staged (its location), its
        partition columns identity partitions."""
        if schema is None:
            raise OutputError(f"Iceberg table {self.url!r}: no file of this run to create it with")
        catalog = catalogs.catalog_of(self.ref)
        catalog.create_namespace_if_not_exists(self.ref.identifier[:-1])
        txn = catalog.create_table_transaction(self.ref.identifier, schema=schema,
                                               location=self.journal.url)  # fmt: skip
        if self.partitions:
            with txn.update_spec() as spec:
                for column in self.partitions:
                    spec.add_identity(column)
        return txn

    def _snapshot(self, txn: Any, table: Any, paths: list[str], *, mode: str,
                  summary: dict[str, str]) -> None:  # fmt: skip
        """Add ``paths`` to ``table`` (None: the one ``txn`` creates), removing what the
        mode replaces, in one snapshot."""
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import parquet_file_to_data_file
        from pyiceberg.table import TableProperties

        if txn.table_metadata.name_mapping() is None:  # the files carry no field ids
            mapping = txn.table_metadata.schema().name_mapping.model_dump_json()
            txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})
        io = table.io if table is not None else load_file_io(
            catalogs.catalog_of(self.ref).properties, location=self.journal.url)  # fmt: skip
        added = [parquet_file_to_data_file(io, txn.table_metadata, p) for p in paths]
        replaced = self._replaced(mode, table, added)
        update = txn.update_snapshot(snapshot_properties=summary)
        with update.overwrite() if replaced else update.fast_append() as snapshot:
            for data_file in replaced:
                snapshot.delete_data_file(data_file)
            for data_file in added:
                snapshot.append_data_file(data_file)

    def _replaced(self, mode: str, table: Any, added: list[Any]) -> list[Any]:
        """The table's data files this run's snapshot removes: all (``overwrite``), or
        those of the partitions it writes (``overwrite_partitions``); none of a table
        this run creates (None)."""
        if mode not in ("overwrite", "overwrite_partitions") or table is None:
            return []
        current = table.current_snapshot()
        if current is None:
            return []
        files = catalogs.data_files(table, current.snapshot_id)
        if mode == "overwrite":
            return list(files)
        touched = {tuple(f.partition) for f in added}
        return [f for f in files if tuple(f.partition) in touched]

    def _footer(self, record: FileRecord) -> pq.FileMetaData:
        with self.journal.fs.open(f"{self.journal.root}/{record.output}", "rb") as f:
            return pq.read_metadata(f)


def _summary(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties) if summary is not None else {}


def _table_schema(schema: pa.Schema) -> pa.Schema:
    """The table's schema for files written with ``schema``: every column optional,
    dictionaries as their values (the files keep their encodings)."""
    fields = []
    for f in schema:
        kind = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        fields.append(pa.field(f.name, kind, nullable=True))
    return pa.schema(fields)


def _check_schema(table: Any, schema: pa.Schema, url: str) -> None:
    """The output's columns against the table's: each must be there, with a type the
    table's takes; a column the table has and the output lacks is refused too."""
    have = {f.name: f for f in table.schema().as_arrow()}
    kinds = {f.name: f.field_type for f in table.schema().fields}
    for f in schema:
        if f.name not in have:
            raise OutputError(
                f"Iceberg table {url!r} has no column {f.name!r}, which this run writes; "
                "add it to the table (ALTER TABLE ... ADD COLUMN) or write another table"
            )
        if not _same_kind(have[f.name].type, f.type):
            raise OutputError(
                f"Iceberg table {url!r} column {f.name!r} is {kinds[f.name]}, this run "
                f"writes {f.type}; change one, or write another table"
            )
    for field in table.spec().fields:
        source = table.schema().find_column_name(field.source_id)
        if source not in schema.names:
            raise OutputError(
                f"Iceberg table {url!r} is partitioned by {source!r}, which this run does not "
                "write; keep it from the input (keep) or write another table"
            )
    missing = sorted(set(have) - set(schema.names))
    if missing and table.schema().find_field(missing[0]).required:
        raise OutputError(
            f"Iceberg table {url!r} requires column {missing[0]!r}, which this run does not "
            "write; keep it from the input (keep) or write another table"
        )


def _same_kind(table: pa.DataType, written: pa.DataType) -> bool:
    """Whether files holding ``written`` are read right as the table's ``table``."""
    plain = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    return plain.get(table, table) == plain.get(written, written)


# -- reading ----------------------------------------------------------------------


def read_iceberg(url: str, *, version: int | str | None, empty: bool = False) -> InputDataset:
    """An Iceberg table's snapshot as an input (:mod:`scoring._formats.iceberg_catalog`):
    its data files, their deleted rows left out as the scan reads them."""
    scan = catalogs.pinned_scan(url, version=version)
    fs, root = fsspec.core.url_to_fs(scan.location)
    dataset = snapshot_dataset(fs, [fs._strip_protocol(p) for p in scan.paths], scan.schema)
    catalogs.refuse_renamed(scan, dataset.get_fragments())
    deleted = {fs._strip_protocol(p): d for p, d in scan.deleted.items()}
    data = table_input(url, fs, dataset, root.rstrip("/"), deleted=deleted, empty=empty)
    data.snapshot = {"format": "iceberg", "version": scan.snapshot_id}
    data.file_partitions = list(scan.identity)
    data.requested_version = version
    return data

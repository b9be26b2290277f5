"""An Apache Iceberg output: a run's journal (:mod:`scoring._journal`), published as one
snapshot in one catalog commit (pyiceberg; no JVM, no Spark runtime jars).

The table is named through its catalog, ``iceberg:CATALOG.NAMESPACE.TABLE``
(:mod:`scoring._iceberg`).  A run stages its files under the table's location, in
``_temporary/`` (no snapshot names a file there, so readers never see them), and
journals each as any run does.  Publication moves them to ``data/scoring-<run id>/``
and commits one snapshot that adds them all; its summary carries ``scoring.run`` (the
run's id), the job key, the rows and the input (and its snapshot or version) read.
Readers see every row of the run in that snapshot, or none of it.

A rerun after a kill finds the run's record: if a snapshot of the table carries its id
(killed after the commit) the run is complete; otherwise it resumes, the journal's
files (staged, or already moved) counting as done, and commits once.  A new run into a
table that holds data follows its mode: ``error`` refuses (a table created empty ahead
of the run is written), ``append`` adds the run's files, ``overwrite`` replaces every
data file, and ``overwrite_partitions`` those of the partitions the run writes, each in
the same one snapshot.  An absent table is created with the output's schema (and its
``partition_by`` columns as identity partitions) in that same commit; an existing
table's schema is checked against the output's, naming the column that differs.

The Spark engine writes through Spark's own committer (:meth:`IcebergPublisher.publish_files`):
its ``part-*`` files are moved into the run's folder and added in the same one commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ._changes import INCREMENTAL, Changes
from ._dataset import Fragment
from ._files import exists
from ._iceberg import TableRef, catalog_of, data_files, load_table, parse, pyiceberg, table_location
from ._journal import Entry, Journal
from ._manifest import FileRecord, InputRecord, Manifest
from ._publish import (
    TABLE_MODES,
    Publication,
    begin,
    forget_inputs,
    landed_meanwhile,
    place,
    recorded,
    recorded_inputs,
    recording,
    table_mode,
    take,
    written,
)
from .errors import WRITE_FIX, ConfigError, OutputError, cause_line, translated, translating

__all__ = ["MODES", "IcebergPublisher", "open_iceberg"]

MODES = TABLE_MODES
log = logging.getLogger("scoring.output")


def open_iceberg(
    output: str, *, job: dict[str, Any], mode: str | None, verify: bool,
    engine_files: tuple[str, ...], settings: dict[str, Any], partitions: dict[str, pa.DataType],
    on_step: Callable[[str], None] | None = None,
) -> IcebergPublisher:  # fmt: skip
    """An Iceberg table's publisher for a run given ``settings`` (:mod:`scoring._staging`)."""
    mode = table_mode("Iceberg", mode, extra=(INCREMENTAL,))
    pyiceberg()  # refused before anything is written when pyiceberg is missing
    ref = parse(output)
    if ref.metadata is not None:
        raise ConfigError(
            f"Iceberg output {output!r}: a table is written through its catalog; name it "
            "iceberg:CATALOG.NAMESPACE.TABLE"
        )
    if mode == "overwrite_partitions" and not partitions:
        raise ConfigError(
            "mode 'overwrite_partitions' replaces the partitions a run writes: name the "
            "output's partition columns (partition_by)"
        )
    settings = {"format": "iceberg", "mode": mode, "partition_by": list(partitions), **settings}
    with translated("table write", f"cannot open Iceberg table {output!r}", fix=WRITE_FIX):
        journal = Journal(table_location(ref), job=job, settings=settings)
    return IcebergPublisher(journal, ref=ref, mode=mode, partitions=list(partitions),
                            on_step=on_step)  # fmt: skip


@translating(
    "table write", lambda publisher: f"cannot write Iceberg table {publisher.url!r}", fix=WRITE_FIX
)
class IcebergPublisher:
    def __init__(
        self, journal: Journal, *, ref: TableRef, mode: str = "error",
        partitions: Sequence[str] = (), on_step: Callable[[str], None] | None = None,
    ):  # fmt: skip
        self.on_step = on_step
        self.journal = journal
        self.url = ref.text
        self.ref = ref
        self.mode = mode
        #: The mode asked, and the table's state the run planned against
        #: (:func:`scoring._publish.landed_meanwhile`).
        self.asked = mode
        self.seen: str | None = None
        #: The table's identity partition columns; the files keep them (Iceberg's own
        #: files hold partition source columns), so none is left to folders.
        self.partitions = list(partitions)
        self.partition_by: list[str] = []
        self.run_id: str | None = None
        #: An incremental run's: the last run's record of a folder input's files.
        self.carried: Manifest | None = None

    # -- before writing ------------------------------------------------------------

    def check_target(self, fragments: list[Fragment]) -> bool:
        """True when this run's snapshot already landed (a kill between the commit and
        the cleanup); raise when the mode refuses a table holding data.  An interrupted
        run's staging is settled first, as for every output."""
        journal = self.journal
        journal.forget_listings()
        pending, discard = journal.reconcile()
        if discard is not None:
            self._discard(discard)
        table = load_table(self.ref)
        if pending is not None and pending.get("job_key") == journal.job_key:
            self.run_id = str(pending["run"])
            if _committed(table, self.run_id):
                journal.clear()
                return True
        else:
            self.run_id = uuid.uuid4().hex[:16]
        holds = table is not None and table.current_snapshot() is not None
        if self.mode == INCREMENTAL and holds and self._last_run(table) is None:
            raise OutputError(
                f"Iceberg table {self.url!r} holds no run of scoring's: an incremental run "
                "replaces or adds to a table it wrote only; choose a new table"
            )
        if self.mode == "error" and holds:
            raise OutputError(
                f"Iceberg table {self.url!r} already holds data; set the output mode to "
                "'append' (this run's rows as a new snapshot) or 'overwrite' (they replace "
                "the table's rows), or choose a new table"
            )
        journal.write_record(**{**journal.extras(pending), "run": self.run_id})
        self.journal = journal.in_folder(f"{self._folder}/")
        self.seen = self._state(table)
        return False

    def _state(self, table: Any) -> str | None:
        """None where the table holds no snapshot, else its last scoring run ("" for
        none)."""
        if table is None or table.current_snapshot() is None:
            return None
        return str((self._last_run(table) or {}).get("scoring.run", ""))

    @property
    def _folder(self) -> str:
        return f"data/scoring-{self.run_id}"

    def _discard(self, record: dict[str, Any]) -> None:
        """An interrupted run's staging, and the files it placed before its commit."""
        fs = self.journal.fs
        run = record.get("run")
        if run and not _committed(load_table(self.ref), str(run)):
            folder = f"{self.journal.root}/data/scoring-{run}"
            if exists(fs, folder):
                fs.rm(folder, recursive=True)
            forget_inputs(self.journal, keep=None, run=str(run))
        self.journal.clear()

    @staticmethod
    def _last_run(table: Any) -> dict[str, str] | None:
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

    def previous(self) -> Manifest | None:
        """The table's last snapshot of a scoring run, as a manifest."""
        table = load_table(self.ref)
        summary = None if table is None else self._last_run(table)
        if summary is None:
            return None
        version, kind = summary.get("scoring.input_version"), summary.get("scoring.input_format")
        sha256 = summary.get("scoring._model.sha256")
        return Manifest(
            job_key=summary["scoring.job_key"], job={"model_sha256": sha256} if sha256 else {},
            metadata={k: v for k, v in summary.items() if k.startswith("scoring.")},
            committed_at=summary.get("scoring.committed_at", ""),
            rows=int(summary.get("scoring.rows", 0)),
            fragments=recorded_inputs(self.journal, summary.get("scoring.inputs")), files=[],
            input_snapshot=None if version is None else {"format": kind or "delta",
                                                         "version": int(version)},
            input=summary.get("scoring.input"), run=summary.get("scoring.run"),
        )  # fmt: skip

    def present(self) -> None:
        """A table's files are its snapshots' to say: nothing to list."""
        return None

    def check_schema(self, schema: pa.Schema) -> None:
        """An existing table's columns against the run's (:func:`_check_schema`), in
        every mode (``overwrite`` replaces rows, not the schema); a table this run
        creates takes the run's."""
        table = load_table(self.ref)
        if table is not None:
            _check_schema(table, _table_schema(schema), self.url)

    def follow(self, changes: Changes, *, key: Sequence[str] = ()) -> None:
        """An incremental run's mode: a full run replaces the table's rows (it is this
        job's), any other appends (an Iceberg input's changes are appended snapshots)."""
        self.mode = "overwrite" if changes.kind == "full" else "append"
        self.carried = None if changes.kind == "full" else changes.carried

    def completed(self, fragments: list[Fragment]) -> dict[str, Entry]:
        return self.journal.completed(fragments)

    # -- publication ---------------------------------------------------------------

    def publish(self, entries: Iterable[Entry], *, extra: dict[str, Any]) -> Manifest:
        """Move the staged files into the table, then one snapshot that adds them."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        publication.phase = "committing"
        entries = sorted(entries, key=lambda e: e.relpath)
        extra = recording(journal, self.run_id, self.carried, entries, extra)
        # A file not staged was moved by an earlier, interrupted publish.
        place(
            journal,
            publication,
            [e.output for e in entries if exists(journal.fs, f"{journal.staging}/{e.output}")],
        )
        files = [FileRecord(e.output, e.rows, e.sha256, e.bytes) for e in entries]
        self._commit(files, extra=extra)
        return self._done(publication, entries, files, extra=extra)

    def publish_files(
        self, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> Manifest:
        """The ``prefix*`` files Spark's committer wrote, moved into the run's folder and
        added in one snapshot, as :meth:`publish` does."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        publication.phase = "committing"
        inputs = [InputRecord(f.relpath, f.path, f.fingerprint, f.rows) for f in fragments]
        extra = recording(journal, self.run_id, self.carried, inputs, extra)
        take(journal, publication, prefix, into=self._folder)
        files = recorded(journal, written(journal, f"{journal.root}/{self._folder}", prefix))
        self._commit(files, extra=extra)
        return self._done(publication, inputs, files, extra=extra)

    def _done(
        self, publication: Publication, fragments: list[Entry] | list[InputRecord],
        files: list[FileRecord], *, extra: dict[str, Any],
    ) -> Manifest:  # fmt: skip
        publication.phase = "published"
        publication.step("committed the new table snapshot")
        forget_inputs(self.journal, keep=self.run_id)
        self.journal.clear()
        return Manifest(job_key=self.journal.job_key, job=self.journal.job, committed_at=_now(),
                        rows=sum(f.rows for f in files), fragments=fragments, files=files,
                        metadata=extra.get("metadata"), input_snapshot=extra.get("input_snapshot"),
                        input=extra.get("input"), run=self.run_id, mode=self.mode)  # fmt: skip

    def _summary(self, *, extra: dict[str, Any], rows: int) -> dict[str, str]:
        """The snapshot's summary properties: the run, its job key, input and input
        version (what a rerun and an incremental run read back)."""
        summary = {"scoring.run": str(self.run_id), "scoring.job_key": self.journal.job_key,
                   "scoring.rows": str(rows), "scoring.committed_at": _now(),
                   **{k: str(v) for k, v in (extra.get("metadata") or {}).items()
                      if k.startswith("scoring.")}}  # fmt: skip
        snapshot = extra.get("input_snapshot")
        if snapshot is not None:
            summary["scoring.input_version"] = str(snapshot["version"])
            summary["scoring.input_format"] = str(snapshot.get("format", "delta"))
        if extra.get("input"):
            summary["scoring.input"] = str(extra["input"])
        if extra.get("inputs"):
            summary["scoring.inputs"] = str(extra["inputs"])
        return summary

    def _commit(self, files: list[FileRecord], *, extra: dict[str, Any]) -> None:
        """One catalog commit: the table created if absent, its files replaced as the
        mode says, the run's files added, in one snapshot."""
        module = pyiceberg()
        paths = [self.journal.fs.unstrip_protocol(f"{self.journal.root}/{f.output}")
                 for f in files]  # fmt: skip
        schema = _table_schema(self._footer(files[0]).schema.to_arrow_schema()) if files else None
        table = load_table(self.ref)
        landed_meanwhile(self.journal, kind="Iceberg", mode=self.asked, seen=self.seen,
                         now=self._state(table), folder=self._folder)  # fmt: skip
        try:
            if table is None:
                txn = self._create(schema)
            else:
                if schema is not None:
                    _check_schema(table, schema, self.url)
                txn = table.transaction()
            self._snapshot(txn, table, paths, summary=self._summary(
                extra=extra, rows=sum(f.rows for f in files)))  # fmt: skip
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
        catalog = catalog_of(self.ref)
        catalog.create_namespace_if_not_exists(self.ref.identifier[:-1])
        txn = catalog.create_table_transaction(self.ref.identifier, schema=schema,
                                               location=self.journal.url)  # fmt: skip
        if self.partitions:
            with txn.update_spec() as spec:
                for column in self.partitions:
                    spec.add_identity(column)
        return txn

    def _snapshot(self, txn: Any, table: Any, paths: list[str], *,
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
            catalog_of(self.ref).properties, location=self.journal.url)  # fmt: skip
        added = [parquet_file_to_data_file(io, txn.table_metadata, p) for p in paths]
        replaced = self._replaced(table, added)
        update = txn.update_snapshot(snapshot_properties=summary)
        with update.overwrite() if replaced else update.fast_append() as snapshot:
            for data_file in replaced:
                snapshot.delete_data_file(data_file)
            for data_file in added:
                snapshot.append_data_file(data_file)

    def _replaced(self, table: Any, added: list[Any]) -> list[Any]:
        """The table's data files this run's snapshot removes: all (``overwrite``), or
        those of the partitions it writes (``overwrite_partitions``); none of a table
        this run creates (None)."""
        if self.mode not in ("overwrite", "overwrite_partitions") or table is None:
            return []
        current = table.current_snapshot()
        if current is None:
            return []
        files = data_files(table, current.snapshot_id)
        if self.mode == "overwrite":
            return list(files)
        touched = {tuple(f.partition) for f in added}
        return [f for f in files if tuple(f.partition) in touched]

    def _footer(self, record: FileRecord) -> pq.FileMetaData:
        with self.journal.fs.open(f"{self.journal.root}/{record.output}", "rb") as f:
            return pq.read_metadata(f)


def _committed(table: Any, run: str) -> bool:
    """Whether a snapshot of ``table`` (None: absent) carries run ``run``."""
    return table is not None and any(
        _summary(s).get("scoring.run") == run for s in table.snapshots()
    )


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()

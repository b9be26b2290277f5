"""A Delta Lake output: a run's journal (:mod:`scoring._journal`), published as one
commit to the table's transaction log (delta-rs, no JVM).

A run writes its files under the table's ``_temporary/`` (readers and ``VACUUM`` skip
``_`` folders) and journals each, as any run does; ``_temporary/_scoring_run.json``
records the run: its id and what it was given (:mod:`scoring._staging`).  Publication
moves the files into the table folder under ``scoring-<run id>/`` and then adds them
all in one commit, which carries the application transaction ``scoring-<run id>``:
readers see every row of the run in one new version, or none of it.

A rerun after a kill finds the run's record: if the table already holds its
transaction (killed after the commit) the run is complete; otherwise it resumes, the
journal's files (staged, or already moved) counting as done, and commits once, with
the rerun's own mode (a rerun given other contents discards the staged files, or
refuses once the interrupted run had begun publishing).  A new
run into a table that exists follows its mode: ``error`` refuses (the default, as
Spark's and delta-rs's writers do), ``append`` adds a version, ``overwrite`` replaces
the table's rows in one version.

The Spark engine writes through Spark's own committer (:meth:`DeltaPublisher.publish_files`):
its ``part-*`` files are moved into the run's folder and added in the same one commit,
each recorded with its size and sha256 as the product's own files are.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ._changes import INCREMENTAL, Changes
from ._dataset import Fragment, delta_storage_options
from ._delta_files import file_stats, partition_values
from ._delta_merge import merge, merge_source
from ._files import exists
from ._journal import Entry, Journal
from ._manifest import FileRecord, InputRecord, Manifest
from ._publish import (
    TABLE_MODES,
    Publication,
    begin,
    engine_dir,
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
from ._staging import LEGACY_RECORDS
from .errors import WRITE_FIX, DependencyError, OutputError, cause_line, translating

__all__ = ["MODES", "DeltaPublisher", "open_delta"]

MODES = TABLE_MODES
log = logging.getLogger("scoring.output")


def open_delta(
    output: str, *, job: dict[str, Any], mode: str | None, verify: bool,
    engine_files: tuple[str, ...], settings: dict[str, Any], partitions: dict[str, pa.DataType],
    on_step: Callable[[str], None] | None = None,
) -> DeltaPublisher:  # fmt: skip
    """A Delta table's publisher for a run given ``settings`` (:mod:`scoring._staging`)."""
    mode = table_mode("Delta", mode, extra=(INCREMENTAL,))
    _deltalake()  # refused before anything is written when delta-rs is missing
    settings = {"format": "delta", "mode": mode, "partition_by": list(partitions), **settings}
    return DeltaPublisher(Journal(output, job=job, settings=settings), mode=mode,
                          partition_by=partitions, on_step=on_step)  # fmt: skip


@translating(
    "table write", lambda publisher: f"cannot write Delta table {publisher.url!r}", fix=WRITE_FIX
)
class DeltaPublisher:
    def __init__(
        self,
        journal: Journal,
        *,
        mode: str = "error",
        partition_by: dict[str, pa.DataType] | None = None,
        on_step: Callable[[str], None] | None = None,
    ):
        self.on_step = on_step
        #: The staging's journal; once the target is checked, one naming the run's folder.
        self.journal = journal
        self.url = journal.url
        self.mode = mode
        #: The mode asked (an incremental run's becomes its publication's), and the
        #: table's state the run planned against (:func:`scoring._publish.landed_meanwhile`).
        self.asked = mode
        self.seen: str | None = None
        #: The table's partition columns and their types: the files leave them to their
        #: ``key=value`` folders (:mod:`scoring._delta_files`).
        self.partition_types = dict(partition_by or {})
        self.partition_by = list(self.partition_types)
        self.run_id: str | None = None  # the pending run's, or a new one: check_target's
        #: An incremental run's merge: the key columns, and the staged keys whose rows go.
        self.key: list[str] = []
        self.deletes: str | None = None
        #: An incremental run's: the last run's record of a folder input's files.
        self.carried: Manifest | None = None

    # -- before writing ------------------------------------------------------------

    def check_target(self, fragments: list[Fragment]) -> bool:
        """True when this run's commit already landed (a rerun after a kill between the
        commit and the cleanup); raise when the mode refuses an existing table.  An
        interrupted run's staging is settled first (:mod:`scoring._staging`): resumed
        with this run's mode, or discarded when it holds other contents.  From here the
        journal names the run's folder."""
        journal = self.journal
        journal.forget_listings()
        pending, discard = journal.reconcile()
        if discard is not None:
            self._discard(discard)
        pending = pending or self._legacy_record()
        if pending is not None and pending.get("job_key") == journal.job_key:
            self.run_id = str(pending["run"])
            if self._committed(self.run_id):
                if pending.get("mode", self.mode) != self.mode:
                    log.warning("output %s: the interrupted run's commit (mode %s) had "
                                "landed; nothing to do", self.url, pending["mode"])  # fmt: skip
                journal.clear()
                return True
        else:
            self.run_id = uuid.uuid4().hex[:16]
        if self.mode == INCREMENTAL and self._foreign():
            raise OutputError(
                f"Delta table {self.url!r} holds no run of scoring's: an incremental run "
                "replaces or merges only a table it wrote; choose a new table"
            )
        if self.mode == "error" and self._foreign():
            raise OutputError(
                f"Delta table {self.url!r} already exists; set the output mode to 'append' "
                "(this run's rows as a new version) or 'overwrite' (they replace the "
                "table's rows), or choose a new table"
            )
        journal.write_record(**{**journal.extras(pending), "run": self.run_id})
        self.journal = journal.in_folder(f"{self._folder}/")
        self.seen = self._state(self._table())
        return False

    def _state(self, table: Any) -> str | None:
        """None where there is no table, else its last scoring run ("" for none)."""
        return None if table is None else str((self._last_run(table) or {}).get("scoring.run", ""))

    def _recheck(self, table: Any) -> None:
        landed_meanwhile(self.journal, kind="Delta", mode=self.asked, seen=self.seen,
                         now=self._state(table), folder=self._folder)  # fmt: skip

    @property
    def _folder(self) -> str:
        return f"scoring-{self.run_id}"

    def _foreign(self) -> bool:
        """The table exists and (for an incremental run) holds no run of scoring's."""
        table = self._table()
        if table is None:
            return False
        return self.mode == "error" or self._last_run(table) is None

    def previous(self) -> Manifest | None:
        """The table's last commit of a scoring run, as a manifest: its job key, input
        and input version (the table's log is the rest)."""
        table = self._table()
        commit = None if table is None else self._last_run(table)
        if commit is None:
            return None
        version = commit.get("scoring.input_version")
        sha256 = commit.get("scoring._model.sha256")
        inputs = commit.get("scoring.inputs")
        return Manifest(
            job_key=str(commit["scoring.job_key"]), job={"model_sha256": sha256} if sha256 else {},
            metadata={k: str(v) for k, v in commit.items() if k.startswith("scoring.")},
            committed_at=str(commit.get("scoring.committed_at", "")),
            rows=int(commit.get("scoring.rows", 0)), files=[],
            fragments=recorded_inputs(self.journal, inputs),
            input_snapshot=None if version is None else {"format": "delta",
                                                         "version": int(version)},
            input=commit.get("scoring.input"), run=commit.get("scoring.run"),
        )  # fmt: skip

    @staticmethod
    def _last_run(table: Any) -> dict[str, Any] | None:
        deltalake = _deltalake()
        try:
            history = table.history()
        except deltalake.exceptions.DeltaError as exc:
            raise OutputError(
                f"cannot read the history of Delta table {table.table_uri!r}: "
                f"{cause_line(exc)}; check that its _delta_log is readable and whole"
            ) from exc
        return next((c for c in history if "scoring.job_key" in c), None)

    def present(self) -> None:
        """A table's files are its log's to say: nothing to list."""
        return None

    def check_schema(self, schema: pa.Schema) -> None:
        """delta-rs checks the schema in the commit itself (and names the column)."""

    def follow(self, changes: Changes, *, key: Sequence[str] = ()) -> None:
        """An incremental run's mode: a full run replaces the table's rows (it is this
        job's), one with updated or deleted rows merges on ``key``, any other appends."""
        if changes.kind == "full":
            self.mode = "overwrite"
        else:
            self.mode = "merge" if changes.merges else "append"
        self.key, self.deletes = list(key), changes.deletes
        self.carried = None if changes.kind == "full" else changes.carried

    def _legacy_record(self) -> dict[str, Any] | None:
        """An earlier version's record of an interrupted run (its id, mode, job key)."""
        fs, path = self.journal.fs, f"{self.journal.staging}/{LEGACY_RECORDS[0]}"
        return dict(json.loads(fs.cat_file(path))) if exists(fs, path) else None

    def _discard(self, record: dict[str, Any]) -> None:
        """An interrupted run's staging, and the folder it placed files in before its
        commit."""
        fs = self.journal.fs
        if record.get("run"):
            folder = f"{self.journal.root}/scoring-{record['run']}"
            if exists(fs, folder) and not self._committed(str(record["run"])):
                fs.rm(folder, recursive=True)
            if not self._committed(str(record["run"])):
                forget_inputs(self.journal, keep=None, run=str(record["run"]))
        self.journal.clear()

    def completed(self, fragments: list[Fragment]) -> dict[str, Entry]:
        """Journal entries only: a published Delta run leaves no journal behind."""
        return self.journal.completed(fragments)

    def _table(self) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.url, storage_options=self._options())
        except deltalake.exceptions.TableNotFoundError:
            return None

    def _committed(self, run: str) -> bool:
        table = self._table()
        return table is not None and table.transaction_version(f"scoring-{run}") is not None

    def _options(self) -> dict[str, str]:
        return delta_storage_options(self.url)

    # -- publication ---------------------------------------------------------------

    def publish(self, entries: Iterable[Entry], *, extra: dict[str, Any]) -> Manifest:
        """Move the staged files into the table, then one commit that adds them all."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        publication.phase = "committing"  # what a stopped command says
        entries = sorted(entries, key=lambda e: e.relpath)
        extra = recording(journal, self.run_id, self.carried, entries, extra)
        if self.mode == "merge":  # delta-rs writes the merged files itself
            paths = [journal.where(e) or f"{journal.staging}/{e.output}" for e in entries]
            files = [FileRecord(e.output, e.rows, e.sha256, e.bytes) for e in entries]
            self._merge(paths, base=f"{journal.staging}/{self._folder}", extra=extra)
            return self._done(publication, entries, files, extra=extra)
        # A file not staged was moved by an earlier, interrupted publish.
        place(
            journal,
            publication,
            [e.output for e in entries if exists(journal.fs, f"{journal.staging}/{e.output}")],
        )
        files = [FileRecord(e.output, e.rows, e.sha256, e.bytes) for e in entries]
        self._commit(files, extra=extra, rows=sum(f.rows for f in files))
        return self._done(publication, entries, files, extra=extra)

    def publish_files(
        self, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> Manifest:
        """The ``prefix*`` files an engine's own committer wrote (Spark's) moved into the
        run's folder and added in one commit, as :meth:`publish` does."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        publication.phase = "committing"
        inputs = [InputRecord(f.relpath, f.path, f.fingerprint, f.rows) for f in fragments]
        extra = recording(journal, self.run_id, self.carried, inputs, extra)
        if self.mode == "merge":
            source = engine_dir(journal)
            paths = written(journal, source, prefix)
            # Recorded as the product's own files are (rows, size, sha256), named within
            # the engine's folder; delta-rs writes the merged files from them.
            files = [dataclasses.replace(r, output=p[len(source) :].lstrip("/"))
                     for r, p in zip(recorded(journal, paths), paths, strict=True)]  # fmt: skip
            self._merge(paths, base=source, extra=extra)
            return self._done(publication, inputs, files, extra=extra)
        take(journal, publication, prefix, into=self._folder)
        files = recorded(journal, written(journal, f"{journal.root}/{self._folder}", prefix))
        self._commit(files, extra=extra, rows=sum(f.rows for f in files))
        return self._done(publication, inputs, files, extra=extra)

    def _done(
        self,
        publication: Publication,
        fragments: list[Entry] | list[InputRecord],
        files: list[FileRecord],
        *,
        extra: dict[str, Any],
    ) -> Manifest:
        rows = sum(f.rows for f in files)
        publication.phase = "published"
        publication.step("committed the new table version")
        forget_inputs(self.journal, keep=self.run_id)
        self.journal.clear()
        return Manifest(job_key=self.journal.job_key, job=self.journal.job, committed_at=_now(),
                        rows=rows, fragments=fragments, files=files,
                        metadata=extra.get("metadata"), input_snapshot=extra.get("input_snapshot"),
                        input=extra.get("input"), run=self.run_id, mode=self.mode)  # fmt: skip

    def _properties(self, *, extra: dict[str, Any], rows: int) -> Any:
        """The commit's metadata (the run, its job key, input and input version: what an
        incremental run reads back) and the run's application transaction."""
        deltalake = _deltalake()
        from deltalake.transaction import CommitProperties

        metadata = {"scoring.run": self.run_id, "scoring.job_key": self.journal.job_key,
                    "scoring.rows": rows, "scoring.committed_at": _now(),
                    **{k: v for k, v in extra.get("metadata", {}).items()
                       if k.startswith("scoring.")}}  # fmt: skip
        if "input_snapshot" in extra:  # the input table's version this run read
            metadata["scoring.input_version"] = extra["input_snapshot"]["version"]
        if extra.get("input"):
            metadata["scoring.input"] = extra["input"]
        if extra.get("inputs"):  # a folder input's files scored to date
            metadata["scoring.inputs"] = extra["inputs"]
        return CommitProperties(
            custom_metadata=metadata,
            app_transactions=[deltalake.Transaction(app_id=f"scoring-{self.run_id}", version=1)],
        )

    def _merge(self, paths: list[str], *, base: str, extra: dict[str, Any]) -> None:
        """One merge on the key columns, one commit carrying the run's transaction
        (:func:`scoring._delta_merge.merge`)."""
        deltalake = _deltalake()
        table = self._table()
        self._recheck(table)
        source = merge_source(self.journal, paths, base=base, deletes=self.deletes,
                              target=pa.schema(table.schema().to_arrow()))  # fmt: skip
        try:
            merge(table, source, key=self.key,
                  properties=self._properties(extra=extra, rows=source.num_rows))  # fmt: skip
        except deltalake.exceptions.DeltaError as exc:
            raise OutputError(
                f"cannot merge into Delta table {self.url!r} on {self.key}: {cause_line(exc)}"
            ) from exc

    def _commit(self, files: list[FileRecord], *, extra: dict[str, Any], rows: int) -> None:
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
        properties = self._properties(extra=extra, rows=rows)
        table = self._table()
        self._recheck(table)
        try:
            if table is None:
                deltalake.transaction.create_table_with_add_actions(
                    self.url, schema, adds, mode="error",
                    partition_by=self.partition_by or None,
                    storage_options=self._options(), commit_properties=properties,
                )  # fmt: skip
            else:
                table.create_write_transaction(
                    [*adds, *self._replaced(table, adds)],
                    mode="overwrite" if self.mode == "overwrite" else "append",
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

    def _replaced(self, table: Any, adds: list[Any]) -> list[Any]:
        """``overwrite_partitions``: the table's files in the partitions this run writes,
        removed in the same commit that adds the run's (every other partition kept)."""
        if self.mode != "overwrite_partitions":
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()

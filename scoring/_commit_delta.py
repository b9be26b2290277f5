"""Delta Lake output: the journal and staging of :class:`~scoring._commit.Committer`,
published as one commit to the table's transaction log (delta-rs, no JVM).

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

The Spark engine writes through Spark's own committer (:meth:`publish_files`): its
``part-*`` files are moved into the run's folder and added in the same one commit.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ._commit import Committer, Entry, _extras
from ._dataset import Fragment, delta_storage_options
from ._delta_files import file_stats, partition_values
from ._files import exists
from ._staging import LEGACY_RECORDS
from .errors import ConfigError, DependencyError, OutputError, cause_line

__all__ = ["MODES", "DeltaCommitter"]

MODES = ("error", "append", "overwrite", "overwrite_partitions")
log = logging.getLogger("scoring.output")


class DeltaCommitter(Committer):
    def __init__(
        self,
        url: str,
        *,
        job: dict[str, Any],
        mode: str = "error",
        verify: bool = False,
        run_id: str | None = None,
        engine_files: tuple[str, ...] = (),
        settings: dict[str, Any] | None = None,
        partition_by: dict[str, pa.DataType] | None = None,
    ):
        if mode not in MODES:
            raise ConfigError(f"Delta output mode {mode!r}: expected one of {', '.join(MODES)}")
        super().__init__(url, job=job, overwrite=mode.startswith("overwrite"), verify=verify,
                         engine_files=engine_files, settings=settings)  # fmt: skip
        self.mode = mode
        #: The table's partition columns and their types: the files leave them to their
        #: ``key=value`` folders (:mod:`scoring._delta_files`).
        self.partition_types = dict(partition_by or {})
        self.partition_by = list(self.partition_types)
        self.run_id = run_id  # set by check_target: the pending run's, or a new one
        self.table_uri = url
        _deltalake()  # refused before anything is written when delta-rs is missing

    def for_worker(self) -> DeltaCommitter:
        return DeltaCommitter(self.url, job=self.job, mode=self.mode, run_id=self.run_id,
                              partition_by=self.partition_types)  # fmt: skip

    def output_for(self, fragment: Fragment) -> str:
        return f"scoring-{self.run_id}/{super().output_for(fragment)}"

    # -- before writing ------------------------------------------------------------

    def check_target(self, fragments: list[Fragment]) -> bool:
        """True when this run's commit already landed (a rerun after a kill between the
        commit and the cleanup); raise when the mode refuses an existing table.  An
        interrupted run's staging is settled first (:mod:`scoring._staging`): resumed
        with this run's mode, or discarded when it holds other contents."""
        self._forget_listings()
        pending = self._reconcile() or self._legacy_record()
        if pending is not None and pending.get("job_key") == self.job_key:
            self.run_id = pending["run"]
            if self._committed():
                if pending.get("mode", self.mode) != self.mode:
                    log.warning("output %s: the interrupted run's commit (mode %s) had "
                                "landed; nothing to do", self.url, pending["mode"])  # fmt: skip
                self.fs.rm(self.staging, recursive=True)
                return True
        else:
            self.run_id = uuid.uuid4().hex[:16]
        if self.mode == "error" and self._table() is not None:
            raise OutputError(
                f"Delta table {self.url!r} already exists; set the output mode to 'append' "
                "(this run's rows as a new version) or 'overwrite' (they replace the "
                "table's rows), or choose a new table"
            )
        self._record_run(**{**_extras(pending, self.settings), "run": self.run_id})
        return False

    def _legacy_record(self) -> dict[str, Any] | None:
        """An earlier version's record of an interrupted run (its id, mode, job key)."""
        path = f"{self.staging}/{LEGACY_RECORDS[0]}"
        return dict(json.loads(self.fs.cat_file(path))) if exists(self.fs, path) else None

    def _discard_staging(self, record: dict[str, Any]) -> None:
        """The staging, and the folder a run placed files in before its commit."""
        if record.get("run"):
            folder = f"{self.root}/scoring-{record['run']}"
            if exists(self.fs, folder) and not self._committed_run(str(record["run"])):
                self.fs.rm(folder, recursive=True)
        super()._discard_staging(record)

    def completed(self, fragments: list[Fragment]) -> dict[str, Entry]:
        """Journal entries only: a published Delta run leaves no journal behind."""
        self._forget_listings()
        wanted = {f.relpath: f for f in fragments}
        return {
            e.relpath: e for e in self._entries()
            if e.relpath in wanted and e.job == self.job_key
            and e.fingerprint == wanted[e.relpath].fingerprint and self._intact(e)
        }  # fmt: skip

    def previous_manifest(self) -> dict[str, Any] | None:
        return None  # the table's log is the record of what was published

    def _table(self) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.table_uri, storage_options=self._options())
        except deltalake.exceptions.TableNotFoundError:
            return None

    def _committed(self) -> bool:
        return self._committed_run(str(self.run_id))

    def _committed_run(self, run: str) -> bool:
        table = self._table()
        return table is not None and table.transaction_version(f"scoring-{run}") is not None

    @property
    def _app_id(self) -> str:
        return f"scoring-{self.run_id}"

    def _options(self) -> dict[str, str]:
        return delta_storage_options(self.table_uri)

    # -- publication ---------------------------------------------------------------

    def publish(self, entries: Any, *, extra: dict[str, Any]) -> dict[str, Any]:
        """Move the staged files into the table, then one commit that adds them all."""
        self._forget_listings()
        self._begin()
        self.publication.phase = "committing"  # what a stopped command says
        entries = sorted(entries, key=lambda e: e.relpath)
        # A file not staged was moved by an earlier, interrupted publish.
        self._place([e.output for e in entries if exists(self.fs, f"{self.staging}/{e.output}")])
        return self._committing(entries, extra=extra)

    def publish_files(
        self, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> dict[str, Any]:
        """The ``prefix*`` files an engine's own committer wrote (Spark's) moved into the
        run's folder and added in one commit, as :meth:`publish` does."""
        self._forget_listings()
        self._begin()
        self.publication.phase = "committing"
        folder = f"{self.root}/scoring-{self.run_id}"
        # Spark lays a partitioned write out in key=value folders: kept, below the run's.
        for path in self._written(self.engine_dir, prefix):
            moved = f"{folder}/{path[len(self.engine_dir) :].lstrip('/')}"
            self.fs.makedirs(moved.rsplit("/", 1)[0], exist_ok=True)
            self.fs.mv(path, moved)
            self._step("placed a new file")
        entries = []
        for path in self._written(folder, prefix):
            name = path[len(self.root) :].lstrip("/")
            with self.fs.open(path, "rb") as f:
                rows = pq.ParquetFile(f).metadata.num_rows
            size = self.fs.size(path)
            entries.append(Entry(relpath=name, input="", fingerprint="", rows=rows, output=name,
                                 sha256="", bytes=size, job=self.job_key))  # fmt: skip
        return self._committing(entries, extra=extra)

    def _written(self, folder: str, prefix: str) -> list[str]:
        """The ``prefix*`` files below ``folder``, at any depth (partition folders)."""
        if not exists(self.fs, folder):
            return []
        return sorted(p for p in self.fs.find(folder) if p.rsplit("/", 1)[-1].startswith(prefix))

    def _committing(self, entries: list[Entry], *, extra: dict[str, Any]) -> dict[str, Any]:
        rows = sum(e.rows for e in entries)
        self._commit(entries, extra=extra, rows=rows)
        self.publication.phase = "published"
        self._step("committed the new table version")
        self.fs.rm(self.staging, recursive=True)
        files = [{"output": e.output, "rows": e.rows, "bytes": e.bytes} for e in entries]
        return {"job_key": self.job_key, "job": self.job, "rows": rows, "files": files,
                "fragments": [e.__dict__ for e in entries], "run": self.run_id,
                "mode": self.mode, **extra}  # fmt: skip

    def _commit(self, entries: list[Entry], *, extra: dict[str, Any], rows: int) -> None:
        deltalake = _deltalake()
        from deltalake.transaction import AddAction, CommitProperties

        now = int(time.time() * 1000)
        footers = [self._footer(e) for e in entries]
        adds = [
            AddAction(e.output, e.bytes, partition_values(e.relpath, self.partition_by), now,
                      True, file_stats(footer))
            for e, footer in zip(entries, footers, strict=True)
        ]  # fmt: skip
        schema = _delta_schema(footers[0].schema.to_arrow_schema(), self.partition_types)
        metadata = {"scoring.run": self.run_id, "scoring.job_key": self.job_key,
                    "scoring.rows": rows, "scoring.committed_at": _now(),
                    **{k: v for k, v in extra.get("metadata", {}).items()
                       if k.startswith("scoring.")}}  # fmt: skip
        if "input_snapshot" in extra:  # the input table's version this run read
            metadata["scoring.input_version"] = extra["input_snapshot"]["version"]
        properties = CommitProperties(
            custom_metadata=metadata,
            app_transactions=[deltalake.Transaction(app_id=self._app_id, version=1)],
        )
        table = self._table()
        try:
            if table is None:
                deltalake.transaction.create_table_with_add_actions(
                    self.table_uri, schema, adds, mode="error",
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

    def _footer(self, entry: Entry) -> pq.FileMetaData:
        with self.fs.open(f"{self.root}/{entry.output}", "rb") as f:
            return pq.read_metadata(f)

    def _replaced(self, table: Any, adds: list[Any]) -> list[Any]:
        """``overwrite_partitions``: the table's files in the partitions this run writes,
        removed in the same commit that adds the run's (every other partition kept)."""
        if self.mode != "overwrite_partitions":
            return []
        from deltalake.transaction import RemoveAction

        written = {_partition_key(a.partition_values, self.partition_by) for a in adds}
        now = int(time.time() * 1000)
        removed = []
        for f in pa.table(table.get_add_actions(flatten=True)).to_pylist():
            values = {c: f.get(f"partition.{c}") for c in self.partition_by}
            if _partition_key(values, self.partition_by) in written:
                removed.append(RemoveAction(f["path"], True, now, f["size_bytes"],
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

"""A table output's publication, shared by every table format: a run's journal
(:mod:`scoring._journal.journal`) published as one commit.

A run stages its files under the table's ``_temporary/`` (no commit names a file there,
so readers never see them) and journals each, as any run does; the staging's record
holds the run's id and what it was given (:mod:`scoring._journal.staging`).
Publication moves the files into the run's own folder of the table and adds them all
in one commit that carries the run's id: readers see every row of the run in one new
version (or snapshot), or none of it.

A rerun after a kill finds the run's record: if the table already holds its commit
(killed after it) the run is complete; otherwise it resumes, the journal's files
(staged, or already moved) counting as done, and commits once, with the rerun's own
mode.  A new run into a table that holds data follows its mode: ``error`` refuses (the
default, as Spark's writers do), ``append`` adds the run's files, ``overwrite`` replaces
the table's rows, ``overwrite_partitions`` those of the partitions it writes.

:class:`TablePublisher` is that lifecycle, once; a format is a :class:`TableFormat`:
how it loads its table, reads its last run, refuses a schema and commits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

import pyarrow as pa

from .._files import Fragment, exists
from .._journal.journal import Entry, Journal
from .._journal.manifest import FileRecord, InputRecord, Manifest
from .._journal.staging import LEGACY_RECORDS
from ..errors import WRITE_FIX, OutputError, translating
from .publication import (
    INCREMENTAL,
    ChangePlan,
    Publication,
    Target,
    begin,
    engine_dir,
    forget_inputs,
    landed_meanwhile,
    place,
    recorded,
    recorded_inputs,
    recording,
    take,
    written,
)

__all__ = ["TableFormat", "TablePublisher", "now", "run_summary"]

log = logging.getLogger("scoring.output")


class TableFormat(Protocol):
    """What a table format does for :class:`TablePublisher`: the part that differs."""

    #: How messages name the format ("Delta"), what one commit adds ("version"), and
    #: how a refusal says what the table holds and what an incremental run may write.
    kind: str
    unit: str
    holds_data: str
    incremental_only: str
    #: The output's partition columns that the files leave to ``key=value`` folders.
    partition_by: list[str]
    #: Whether an incremental run merges updated and deleted rows on its key.
    merges: bool

    def load(self) -> Any:
        """The table, or None where there is none."""

    def holds(self, table: Any) -> bool:
        """Whether ``table`` (None: absent) holds anything a mode ``error`` refuses."""

    def last_run(self, table: Any) -> dict[str, Any] | None:
        """The properties of the table's last commit of a scoring run."""

    def committed(self, table: Any, run: str) -> bool:
        """Whether ``table`` (None: absent) holds run ``run``'s commit."""

    def folder(self, run: str) -> str:
        """Where in the table run ``run`` places its files."""

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse a run writing ``schema`` into the table, naming the column."""

    def commit(self, target: Target, table: Any, files: list[FileRecord], *,
               summary: dict[str, Any]) -> None:  # fmt: skip
        """``files`` (placed under ``target.journal``'s root) in one commit carrying
        ``summary``, replacing what ``target.mode`` says; ``table`` None creates it."""

    def merge(self, target: Target, table: Any, paths: list[str], *, base: str,
              summary: Callable[[int], dict[str, Any]]) -> None:  # fmt: skip
        """The rows of ``paths`` (below ``base``) merged on ``target.key`` in one commit
        carrying ``summary(rows merged)``."""


@translating(
    "table write",
    lambda publisher: f"cannot write {publisher.table.kind} table {publisher.url!r}",
    fix=WRITE_FIX,
)
class TablePublisher:
    """A table output's publisher: the lifecycle of the module docstring over a
    :class:`TableFormat`.  ``mode``: the mode asked (an incremental run's publication
    follows its changes: :meth:`follow`)."""

    def __init__(
        self, journal: Journal, table: TableFormat, *, url: str, mode: str = "error",
        on_step: Callable[[str], None] | None = None,
    ):  # fmt: skip
        self.journal = journal
        self.table = table
        self.url = url
        self.mode = mode
        self.on_step = on_step
        self.partition_by = table.partition_by

    # -- before writing ------------------------------------------------------------

    def check_target(self, fragments: list[Fragment]) -> Target:
        """Complete when this run's commit already landed (a rerun after a kill between
        the commit and the cleanup); raise when the mode refuses the table.  An
        interrupted run's staging is settled first (:mod:`scoring._journal.staging`):
        resumed with this run's mode, or discarded when it holds other contents."""
        journal = self.journal
        journal.forget_listings()
        pending, discard = journal.reconcile()
        if discard is not None:
            self._discard(discard)
        pending = pending or self._legacy_record()
        table = self.table.load()
        if pending is not None and pending.get("job_key") == journal.job_key:
            run = str(pending["run"])
            if self.table.committed(table, run):
                if pending.get("mode", self.mode) != self.mode:
                    log.warning("output %s: the interrupted run's commit (mode %s) had "
                                "landed; nothing to do", self.url, pending["mode"])  # fmt: skip
                journal.clear()
                return Target(journal, complete=True, mode=self.mode, run=run)
        else:
            run = uuid.uuid4().hex[:16]
        self._refuse(table)
        journal.write_record(**{**journal.extras(pending), "run": run})
        return Target(journal.in_folder(f"{self.table.folder(run)}/"), mode=self.mode,
                      run=run, seen=self._state(table))  # fmt: skip

    def _refuse(self, table: Any) -> None:
        """The mode's refusal of a table holding data: ``error`` refuses any, an
        incremental run one that holds no run of scoring's."""
        if not self.table.holds(table):
            return
        kind = self.table.kind
        if self.mode == INCREMENTAL and self.table.last_run(table) is None:
            raise OutputError(
                f"{kind} table {self.url!r} holds no run of scoring's: an incremental run "
                f"{self.table.incremental_only}; choose a new table"
            )
        if self.mode == "error":
            raise OutputError(
                f"{kind} table {self.url!r} {self.table.holds_data}; set the output mode to "
                f"'append' (this run's rows as a new {self.table.unit}) or 'overwrite' (they "
                "replace the table's rows), or choose a new table"
            )

    def _state(self, table: Any) -> str | None:
        """None where the table holds nothing, else its last scoring run ("" for none)."""
        if not self.table.holds(table):
            return None
        return str((self.table.last_run(table) or {}).get("scoring.run", ""))

    def _legacy_record(self) -> dict[str, Any] | None:
        """An earlier version's record of an interrupted run (its id, mode, job key)."""
        fs, path = self.journal.fs, f"{self.journal.staging}/{LEGACY_RECORDS[0]}"
        return dict(json.loads(fs.cat_file(path))) if exists(fs, path) else None

    def _discard(self, record: dict[str, Any]) -> None:
        """An interrupted run's staging, and the files it placed before its commit."""
        run = record.get("run")
        if run and not self.table.committed(self.table.load(), str(run)):
            folder = f"{self.journal.root}/{self.table.folder(str(run))}"
            if exists(self.journal.fs, folder):
                self.journal.fs.rm(folder, recursive=True)
            forget_inputs(self.journal, keep=None, run=str(run))
        self.journal.clear()

    def previous(self) -> Manifest | None:
        """The table's last commit of a scoring run, as a manifest: its job key, input
        and input version (the table's log is the rest)."""
        table = self.table.load()
        summary = None if table is None else self.table.last_run(table)
        if summary is None:
            return None
        version = summary.get("scoring.input_version")
        sha256 = summary.get("scoring._model.sha256")
        snapshot = None if version is None else {
            "format": str(summary.get("scoring.input_format") or "delta"), "version": int(version)
        }  # fmt: skip
        return Manifest(
            job_key=str(summary["scoring.job_key"]), job={"model_sha256": sha256} if sha256 else {},
            metadata={k: str(v) for k, v in summary.items() if k.startswith("scoring.")},
            committed_at=str(summary.get("scoring.committed_at", "")),
            rows=int(summary.get("scoring.rows", 0)), files=[],
            fragments=recorded_inputs(self.journal, summary.get("scoring.inputs")),
            input_snapshot=snapshot, input=summary.get("scoring.input"),
            run=summary.get("scoring.run"),
        )  # fmt: skip

    def present(self) -> None:
        """A table's files are its log's to say: nothing to list."""
        return None

    def check_schema(self, schema: pa.Schema) -> None:
        self.table.check_schema(schema)

    def follow(self, target: Target, changes: ChangePlan, *, key: Sequence[str] = ()) -> Target:
        """An incremental run's publication: a full run replaces the table's rows (it is
        this job's), one with updated or deleted rows merges on ``key`` (where the
        format merges), any other appends."""
        if changes.kind == "full":
            mode = "overwrite"
        else:
            mode = "merge" if changes.merges and self.table.merges else "append"
        return dataclasses.replace(
            target, mode=mode, key=tuple(key), deletes=changes.deletes,
            carried=None if changes.kind == "full" else changes.carried,
        )  # fmt: skip

    def completed(self, target: Target, fragments: list[Fragment]) -> dict[str, Entry]:
        """Journal entries only: a published table run leaves no journal behind."""
        return target.journal.completed(fragments)

    # -- publication ---------------------------------------------------------------

    def publish(self, target: Target, entries: Iterable[Entry], *,
                extra: dict[str, Any]) -> Manifest:  # fmt: skip
        """Move the staged files into the table, then one commit that adds them all."""
        journal = target.journal
        publication = self._begin(journal)
        entries = sorted(entries, key=lambda e: e.relpath)
        extra = recording(journal, target.run, target.carried, entries, extra)
        files = [FileRecord(e.output, e.rows, e.sha256, e.bytes) for e in entries]
        if target.mode == "merge":  # the format writes the merged files itself
            paths = [journal.where(e) or f"{journal.staging}/{e.output}" for e in entries]
            self._merge(target, paths, base=f"{journal.staging}/{self._folder(target)}",
                        extra=extra)  # fmt: skip
            return self._done(target, publication, entries, files, extra=extra)
        # A file not staged was moved by an earlier, interrupted publish.
        staged = [e.output for e in entries if exists(journal.fs, f"{journal.staging}/{e.output}")]
        place(journal, publication, staged)
        self._commit(target, files, extra=extra)
        return self._done(target, publication, entries, files, extra=extra)

    def publish_files(
        self, target: Target, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> Manifest:
        """The ``prefix*`` files an engine's own committer wrote (Spark's) moved into the
        run's folder and added in one commit, as :meth:`publish` does."""
        journal = target.journal
        publication = self._begin(journal)
        inputs = [InputRecord(f.relpath, f.path, f.fingerprint, f.rows) for f in fragments]
        extra = recording(journal, target.run, target.carried, inputs, extra)
        if target.mode == "merge":
            source = engine_dir(journal)
            paths = written(journal, source, prefix)
            # Recorded as the product's own files are (rows, size, sha256), named within
            # the engine's folder; the format writes the merged files from them.
            files = [dataclasses.replace(r, output=p[len(source) :].lstrip("/"))
                     for r, p in zip(recorded(journal, paths), paths, strict=True)]  # fmt: skip
            self._merge(target, paths, base=source, extra=extra)
            return self._done(target, publication, inputs, files, extra=extra)
        folder = self._folder(target)
        take(journal, publication, prefix, into=folder)
        files = recorded(journal, written(journal, f"{journal.root}/{folder}", prefix))
        self._commit(target, files, extra=extra)
        return self._done(target, publication, inputs, files, extra=extra)

    def _begin(self, journal: Journal) -> Publication:
        publication = begin(journal, self.on_step)
        publication.phase = "committing"  # what a stopped command says
        return publication

    def _folder(self, target: Target) -> str:
        return self.table.folder(str(target.run))

    def _recheck(self, target: Target, table: Any) -> None:
        """Refuse the commit if the table changed as the mode asked cannot take
        (:func:`~scoring._formats.publication.landed_meanwhile`)."""
        landed_meanwhile(target.journal, kind=self.table.kind, mode=self.mode,
                         seen=target.seen, now=self._state(table),
                         folder=self._folder(target))  # fmt: skip

    def _commit(self, target: Target, files: list[FileRecord], *, extra: dict[str, Any]) -> None:
        table = self.table.load()
        self._recheck(target, table)
        summary = run_summary(target, extra=extra, rows=sum(f.rows for f in files))
        self.table.commit(target, table, files, summary=summary)

    def _merge(self, target: Target, paths: list[str], *, base: str,
               extra: dict[str, Any]) -> None:  # fmt: skip
        table = self.table.load()
        self._recheck(target, table)
        self.table.merge(
            target, table, paths, base=base,
            summary=lambda rows: run_summary(target, extra=extra, rows=rows),
        )  # fmt: skip

    def _done(
        self, target: Target, publication: Publication,
        fragments: list[Entry] | list[InputRecord], files: list[FileRecord], *,
        extra: dict[str, Any],
    ) -> Manifest:  # fmt: skip
        journal = target.journal
        publication.phase = "published"
        publication.step(f"committed the new table {self.table.unit}")
        forget_inputs(journal, keep=target.run)
        journal.clear()
        return Manifest(job_key=journal.job_key, job=journal.job, committed_at=now(),
                        rows=sum(f.rows for f in files), fragments=fragments, files=files,
                        metadata=extra.get("metadata"), input_snapshot=extra.get("input_snapshot"),
                        input=extra.get("input"), run=target.run, mode=target.mode)  # fmt: skip


def run_summary(target: Target, *, extra: dict[str, Any], rows: int) -> dict[str, Any]:
    """A run's commit properties: its id, job key, rows, input and input version (what
    a rerun and an incremental run read back), and the model's ``scoring.*`` metadata."""
    summary = {"scoring.run": target.run, "scoring.job_key": target.journal.job_key,
               "scoring.rows": rows, "scoring.committed_at": now(),
               **{k: v for k, v in (extra.get("metadata") or {}).items()
                  if k.startswith("scoring.")}}  # fmt: skip
    snapshot = extra.get("input_snapshot")
    if snapshot is not None:  # the input table's version this run read, and its format
        summary["scoring.input_version"] = snapshot["version"]
        summary["scoring.input_format"] = snapshot.get("format", "delta")
    if extra.get("input"):
        summary["scoring.input"] = extra["input"]
    if extra.get("inputs"):  # a folder input's files scored to date
        summary["scoring.inputs"] = extra["inputs"]
    return summary


def now() -> str:
    return datetime.now(timezone.utc).isoformat()

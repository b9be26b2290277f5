"""A Parquet folder output: the journal's files moved into place, then the manifest, then
``_SUCCESS`` last; a run killed at any point never leaves ``_SUCCESS``.

Readers: with ``_SUCCESS``, the folder's data files are the output the manifest
describes; without it, the files the manifest names are a complete output (or there is
none).  Publishing over a previous complete output keeps that true at every step: its
``_SUCCESS`` goes first, each of its files about to be replaced or removed is kept under
``_temporary/_previous/`` (a hard link where the filesystem has them, else a copy) and
the manifest is pointed at those (written whole: a temporary file renamed over it);
only then are the new files moved in, the new manifest written and ``_SUCCESS`` last.
A run killed at any step leaves either the previous run or the new one readable through
the manifest, never a mix, and the same command finishes the publication.  A rerun
of a published job trusts ``_SUCCESS`` only while every file the manifest names is there
with its recorded size (and, with ``verify``, its recorded sha256); otherwise the
manifest's intact files count as done (as journal entries do) and only the others are
scored again.

The Spark engine writes through Spark's own committer instead, into
``_temporary/_engine/`` (``part-*`` files, Spark's ``_SUCCESS`` turned off; its overwrite
mode clears that folder only, so the output's lease stays), and then
:meth:`FolderPublisher.publish_files` moves them into place, records them in the
manifest (``files``, beside the input ``fragments``) and writes ``_SUCCESS`` last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from .._files import Fragment, exists
from .._journal.journal import STAGING, Entry, Journal
from .._journal.manifest import MANIFEST, PREVIOUS, SUCCESS, FileRecord, InputRecord, Manifest
from ..errors import ConfigError, OutputError
from .publication import (
    FOLDER_MODES,
    ChangePlan,
    Opening,
    Publication,
    Target,
    begin,
    place,
    recorded,
    take,
)

__all__ = ["FolderPublisher", "open_folder"]


def open_folder(output: str, opening: Opening) -> FolderPublisher:
    """A Parquet folder's publisher, as the run's :class:`Opening` says."""
    if opening.mode not in (None, *FOLDER_MODES):
        raise ConfigError(
            f"output mode {opening.mode!r} needs a Delta output (format delta): a Parquet "
            "output is published whole, replacing the previous run (mode 'overwrite')"
        )
    journal = Journal(output, job=opening.job, settings={"format": "parquet", **opening.settings})
    return FolderPublisher(journal, opening)


class FolderPublisher:
    def __init__(self, journal: Journal, opening: Opening):
        self.journal = journal
        self.on_step = opening.on_step
        self.url = journal.url
        self.mode = opening.mode or "error"  # "error", "overwrite" or "incremental"
        self.verify = opening.verify  # a complete output's files are read back and hashed
        #: Prefixes of the files an engine's own commit leaves.
        self.engine_files = opening.engine_files
        self.partition_by: list[str] = []

    @property
    def _root(self) -> str:
        return self.journal.root

    # -- before writing ------------------------------------------------------------

    def check_target(self, fragments: list[Fragment]) -> Target:
        """Complete when the output holds this job's run with every file intact; raise
        when it holds another's (unless the mode replaces it) or files scoring did not
        write.  An interrupted run's staging is settled first."""
        journal = self.journal
        journal.forget_listings()
        kept, discard = journal.reconcile()
        if discard is not None:
            journal.clear()
        previous = self._complete()
        if previous is not None:
            now = {f.relpath: f for f in fragments}
            same = (
                previous.job_key == journal.job_key
                and sorted(f.relpath for f in previous.fragments) == sorted(now)
                and all(now[f.relpath].same_as(f.fingerprint) for f in previous.fragments)
            )
            if same and not self._damaged(previous):
                journal.clear()  # left by a kill after _SUCCESS
                return Target(journal, complete=True, mode=self.mode)
            if not same and self.mode == "error":
                raise OutputError(
                    f"output {self.url!r} already holds a completed run of another model or "
                    "input; choose a new output or overwrite it: mode 'overwrite' (--overwrite)"
                )
            # The same job with a published file deleted or replaced rescores what it
            # needs; another job replaces it.
            journal.write_record(**journal.extras(kept))
            return Target(journal, mode=self.mode)
        # Outputs an interrupted publish already moved into place are ours too, and so
        # are those of the run it was publishing over (its manifest names them).
        manifest = self._manifest()
        ours = {e.output for e in journal.entries()} | set(manifest.names() if manifest else ())
        foreign = [
            p for p in journal.listing()
            if not p.startswith((STAGING, "_", ".", *self.engine_files)) and p not in ours
        ]  # fmt: skip
        if foreign:
            raise OutputError(
                f"output {self.url!r} holds files scoring did not write ({foreign[0]!r}, ...); "
                "choose an empty or new output location"
            )
        journal.write_record(**journal.extras(kept))
        return Target(journal, mode=self.mode)

    def _complete(self) -> Manifest | None:
        """The manifest of a complete output (``_SUCCESS`` beside it), else None."""
        if not exists(self.journal.fs, f"{self._root}/{SUCCESS}"):
            return None
        return self._manifest()

    def _manifest(self) -> Manifest | None:
        """The output's manifest, with or without ``_SUCCESS`` beside it."""
        path = f"{self._root}/{MANIFEST}"
        fs = self.journal.fs
        return Manifest.from_json(fs.cat_file(path)) if exists(fs, path) else None

    def _damaged(self, manifest: Manifest) -> list[str]:
        """Published files the manifest names that are gone, not of their recorded size
        or (``verify``) not of their recorded sha256: a ``_SUCCESS`` proves nothing about
        files deleted or rewritten after it."""
        return [
            f.output for f in manifest.published()
            if not self.journal.holds(f"{self._root}/{f.output}", size=f.bytes,
                                      sha256=f.sha256 if self.verify else None)
        ]  # fmt: skip

    def previous(self) -> Manifest | None:
        """The output's last complete run: its manifest (with or without ``_SUCCESS``:
        an interrupted publication leaves one naming a complete output), each file by
        the name it has in the output."""
        manifest = self._manifest()
        if manifest is None:
            return None
        aside = {f.output for f in manifest.published() if f.output.startswith(f"{PREVIOUS}/")}
        if not aside:
            return manifest
        restored = {name.removeprefix(f"{PREVIOUS}/") for name in aside}
        return manifest.restored(restored)

    def check_schema(self, schema: pa.Schema) -> None:
        """A folder takes any schema (its manifest says which run wrote it)."""

    def present(self) -> dict[str, int]:
        """The output's files (staging left out) and their sizes, in one listing."""
        fs, root = self.journal.fs, self._root
        if not exists(fs, root):
            return {}
        found = fs.find(root, detail=True)
        named = {p[len(root) :].lstrip("/"): int(i.get("size") or 0) for p, i in found.items()}
        return {n: size for n, size in named.items() if not n.startswith(STAGING)}

    def follow(self, target: Target, changes: ChangePlan, *, key: Sequence[str] = ()) -> Target:
        """An incremental run's plan: a full one replaces the output (it is this job's),
        any other keeps the last run's files it carries and adds its own."""
        return dataclasses.replace(
            target, carried=None if changes.kind == "full" else changes.carried
        )

    def completed(self, target: Target, fragments: list[Fragment]) -> dict[str, Entry]:
        """Journal entries, or entries of this job's published manifest, that prove a
        fragment done for this job (file intact)."""
        self.journal.forget_listings()
        manifest = self._complete()
        published: list[Entry] = []
        if manifest is not None and manifest.job_key == self.journal.job_key:
            published = [e for e in manifest.fragments if isinstance(e, Entry)]
        return self.journal.completed(fragments, published=published)

    # -- publication ---------------------------------------------------------------

    def publish(self, target: Target, entries: Iterable[Entry], *,
                extra: dict[str, Any]) -> Manifest:  # fmt: skip
        """Move every staged file into place, then the manifest, then ``_SUCCESS``
        (a previous complete output's files set aside first, see the module docstring)."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        entries = sorted(entries, key=lambda e: e.relpath)
        carried = target.carried
        keep = {e.output for e in entries} | set(carried.names() if carried else ())
        staged = {e.output for e in entries if exists(journal.fs, f"{journal.staging}/{e.output}")}
        manifest = self._manifest()
        old = set(manifest.names()) if manifest else set()
        self._set_aside(publication, manifest, staged | (old - keep))
        self._remove_all(publication, old - keep)
        # A file not staged was placed by an earlier, interrupted publish.
        place(journal, publication, [e.output for e in entries if e.output in staged])
        if carried is None:
            return self._finish(publication, entries, extra=extra)
        if carried.files is None:  # one entry per fragment, as this run's
            kept = [e for e in carried.fragments if isinstance(e, Entry)]
            both = sorted([*kept, *entries], key=lambda e: e.relpath)
            return self._finish(publication, both, extra=extra)
        inputs, files = _as_records(entries)  # the last run's files Spark's committer wrote
        return self._finish(publication, [*carried.fragments, *inputs],
                            files=[*carried.files, *files], extra=extra)  # fmt: skip

    def publish_files(
        self, target: Target, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> Manifest:
        """Move the ``prefix*`` files another committer wrote into place (an earlier
        run's files there go first, set aside as :meth:`publish` does), record them,
        then the manifest, then ``_SUCCESS``."""
        journal = self.journal
        publication = begin(journal, self.on_step)
        manifest = self._manifest()
        carried = target.carried
        kept = set(carried.names() if carried else ())
        old = set(manifest.names() if manifest else ()) | {
            p[len(self._root) :].lstrip("/") for p in journal.fs.glob(f"{self._root}/{prefix}*")
        }  # named by the manifest, or moved in by an interrupted publish
        self._set_aside(publication, manifest, old - kept)
        self._remove_all(publication, old - kept)
        take(journal, publication, prefix, into="")
        files = recorded(journal, sorted(
            p for p in journal.fs.glob(f"{self._root}/{prefix}*")
            if p[len(self._root) :].lstrip("/") not in kept
        ))  # fmt: skip
        inputs = [InputRecord(f.relpath, f.path, f.fingerprint, f.rows) for f in fragments]
        if carried is not None:
            before, before_files = (
                _as_records([e for e in carried.fragments if isinstance(e, Entry)])
                if carried.files is None
                else ([f for f in carried.fragments if isinstance(f, InputRecord)], carried.files)
            )  # fmt: skip
            inputs, files = [*before, *inputs], [*before_files, *files]
        return self._finish(publication, inputs, files=files, extra=extra)

    def _remove_all(self, publication: Publication, names: set[str]) -> None:
        for name in sorted(names):
            self._remove(f"{self._root}/{name}")
            publication.step("removed a file of the previous run")

    def _set_aside(
        self, publication: Publication, manifest: Manifest | None, touched: set[str]
    ) -> None:
        """Before files of the output's ``manifest`` are replaced or removed (``touched``):
        ``_SUCCESS`` off, each kept under ``_previous/`` and the manifest pointed at
        those, so that it names a complete output at every step.  A manifest exists only
        once a publication finished, so it always named a complete output; one an
        interrupted publication already pointed there keeps its kept files."""
        if manifest is None:
            return
        fs, root = self.journal.fs, self._root
        listed = manifest.published()
        kept = any(f.output.startswith(f"{PREVIOUS}/") for f in listed)
        if kept or manifest.job_key != self.journal.job_key:
            publication.phase = "replacing"  # a previous run is what readers see
        if exists(fs, f"{root}/{SUCCESS}"):
            fs.rm_file(f"{root}/{SUCCESS}")
            publication.step("unmarked the previous run")
        # A file lost since (a rerun rescoring it) has nothing to keep.
        moving = {f.output for f in listed
                  if f.output in touched and exists(fs, f"{root}/{f.output}")}  # fmt: skip
        for name in sorted(moving, key=[f.output for f in listed].index):
            self._keep(f"{root}/{name}", f"{root}/{PREVIOUS}/{name}")
            publication.step("kept a file of the previous run")
        if moving:
            self.journal.write_whole(f"{root}/{MANIFEST}", manifest.set_aside(moving).to_json())
            publication.step("pointed the manifest at the previous run's kept files")

    def _keep(self, path: str, kept: str) -> None:
        """``kept`` holds the bytes of ``path`` (a hard link on a local disk)."""
        fs = self.journal.fs
        self._remove(kept)
        fs.makedirs(kept.rsplit("/", 1)[0], exist_ok=True)
        if isinstance(fs, LocalFileSystem):
            with contextlib.suppress(OSError):  # a filesystem without links: copied below
                os.link(path, kept)
                return
        fs.cp_file(path, kept)

    def _remove(self, path: str) -> None:
        if exists(self.journal.fs, path):
            self.journal.fs.rm_file(path)

    def _finish(
        self,
        publication: Publication,
        fragments: list[Entry] | list[InputRecord],
        *,
        extra: dict[str, Any],
        files: Any = None,
    ) -> Manifest:
        journal = self.journal
        manifest = Manifest(
            job_key=journal.job_key,
            job=journal.job,
            committed_at=datetime.now(timezone.utc).isoformat(),
            rows=sum(f.rows for f in fragments),
            fragments=fragments,
            files=files,
            metadata=extra.get("metadata"),
            input_snapshot=extra.get("input_snapshot"),
            input=extra.get("input"),
        )
        journal.write_whole(f"{self._root}/{MANIFEST}", manifest.to_json())
        publication.step("wrote the new manifest")
        journal.fs.pipe_file(f"{self._root}/{SUCCESS}", b"")
        publication.phase = "published"
        publication.step("marked the output complete")
        journal.clear()
        return manifest


def _as_records(entries: list[Entry]) -> tuple[list[InputRecord], list[FileRecord]]:
    """Journal entries as a manifest of files listed apart (one an engine's committer
    wrote: an incremental run adds to it in its form)."""
    inputs = [InputRecord(e.relpath, e.input, e.fingerprint, e.rows) for e in entries]
    return inputs, [FileRecord(e.output, e.rows, e.sha256, e.bytes) for e in entries]

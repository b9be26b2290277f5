"""Output commit: staged files, a journal that makes reruns resume, then publication.

Layout under the output directory while a run is in flight::

    _temporary/<relpath>                 a finished output file, not yet published
    _temporary/<relpath>.inprogress-*    a file being written (never trusted)
    _temporary/_journal/<key>.json       one entry per finished input fragment

An entry names the input (path and fingerprint), its row count, the output file and its
sha256, and the job (model sha256, kept columns, outputs).  A rerun skips a fragment
only when its entry matches this job and input and the file still has that sha256.
Publication moves the staged files into place, writes ``_scoring_manifest.json`` and
writes ``_SUCCESS`` last; a run killed at any point never leaves ``_SUCCESS``.

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

Other processes (Ray actors, Spark executors, a killed run's) write here too, so every
decision read from the output (:meth:`Committer.check_target`, :meth:`~Committer.completed`,
the publishes) starts from fresh listings: an object store's filesystem (s3fs) caches
listings per process, and one filled while planning would hide what the workers wrote.

The Spark engine writes through Spark's own committer instead, into
``_temporary/_engine/`` (``part-*`` files, Spark's ``_SUCCESS`` turned off; its overwrite
mode clears that folder only, so the output's lease stays), and then
:meth:`Committer.publish_files` moves them into place, records them in the manifest
(``files``, beside the input ``fragments``) and writes ``_SUCCESS`` last.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import fsspec
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from ._dataset import Fragment
from ._files import exists
from ._staging import RECORD, compare, owned, refuse_publishing, say
from .errors import OutputError

__all__ = [
    "MANIFEST", "SUCCESS", "Committer", "HashingSink", "Publication", "job_key",
    "publications_since",
]  # fmt: skip

MANIFEST = "_scoring_manifest.json"
SUCCESS = "_SUCCESS"
STAGING = "_temporary"
MANIFEST_FORMAT_VERSION = 1
_HASH_CHUNK = 8 << 20  # outputs are hashed as a stream, never held whole in memory


#: Where the files of a previous output wait while a new one is published over it.
PREVIOUS = f"{STAGING}/_previous"


@dataclass
class Publication:
    """How far a publication in this process got, for what a command stopped by a
    signal says: ``publishing`` (nothing published yet), ``replacing`` (a previous
    complete output is set aside and readable through the manifest), ``committing`` (a
    Delta table's files placed, its one commit not yet made), ``published``."""

    url: str
    started: float  # time.monotonic()
    phase: str = "publishing"


_PUBLICATIONS: list[Publication] = []


def publications_since(started: float) -> list[Publication]:
    """This process's publications begun at or after ``started`` (time.monotonic())."""
    return [p for p in _PUBLICATIONS if p.started >= started]


def job_key(job: dict[str, Any]) -> str:
    """What makes two runs interchangeable: same model bytes, kept columns, outputs."""
    return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]


class HashingSink:
    """A writable file that hashes and counts the bytes going through it.

    The hashing runs on a thread of its own, in write order, off the writer's thread: a
    file's Parquet encoding is the slowest serial step of a fast job, and sha256 inline
    added about a fifth to it (8 ms per 16 MB).  The chunks are the writer's ``bytes``,
    which do not change after they are written."""

    def __init__(self, raw: Any):
        self.raw = raw
        self.size = 0
        self.dropped = False
        self._sha = hashlib.sha256()
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="scoring-hash")

    def drop(self) -> None:
        """Close the file and take later writes into the void, so that a writer
        interrupted by a failure can still be closed (not left to fail at exit)."""
        self.dropped = True
        self._hasher.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):
            self.raw.close()

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self.dropped:
            return view.nbytes
        self._hasher.submit(self._sha.update, data if isinstance(data, bytes) else bytes(view))
        self.size += view.nbytes
        return int(self.raw.write(data))

    def hexdigest(self) -> str:
        """The sha256 of every byte written (once the hashing has caught up)."""
        self._hasher.shutdown(wait=True)
        return self._sha.hexdigest()

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.raw.close()

    @property
    def closed(self) -> bool:
        return bool(self.raw.closed)

    def tell(self) -> int:
        return self.size


@dataclass(frozen=True)
class Entry:
    relpath: str
    input: str
    fingerprint: str
    rows: int
    output: str
    sha256: str
    bytes: int
    job: str
    #: What the run counted in this file for drift (:mod:`scoring._drift`), opaque here.
    stats: dict[str, list[int]] | None = None


class Committer:
    def __init__(
        self,
        url: str,
        *,
        job: dict[str, Any],
        overwrite: bool = False,
        verify: bool = False,
        engine_files: tuple[str, ...] = (),
        settings: dict[str, Any] | None = None,
    ):
        self.fs, root = fsspec.core.url_to_fs(str(url))
        self.url = str(url)
        self.root = root.rstrip("/")
        self.job = job
        self.job_key = job_key(job)
        self.overwrite = overwrite
        self.verify = verify  # a complete output's files are read back and hashed
        self.engine_files = engine_files  # prefixes of files an engine's own commit leaves
        self.staging = f"{self.root}/{STAGING}"
        #: Where an engine with its own committer writes, to be moved into place on publish.
        self.engine_dir = f"{self.staging}/_engine"
        #: What this run was given, compared with an interrupted run's record (see
        #: :mod:`scoring._staging`); the job key stands for model, kept columns, outputs.
        self.settings = {"job_key": self.job_key, **(settings or {})}

    # -- before writing ------------------------------------------------------------

    def previous_manifest(self) -> dict[str, Any] | None:
        """The manifest of a complete output (``_SUCCESS`` beside it), else None."""
        if not exists(self.fs, f"{self.root}/{SUCCESS}"):
            return None
        return self._manifest()

    def check_target(self, fragments: list[Fragment]) -> bool:
        """True when the output already holds this exact job, complete; raise when the
        output holds something else this run must not overwrite."""
        self._forget_listings()
        kept = self._reconcile()
        previous = self.previous_manifest()
        if previous is not None:
            same = previous.get("job_key") == self.job_key and sorted(
                (f["relpath"], f["fingerprint"]) for f in previous["fragments"]
            ) == sorted((f.relpath, f.fingerprint) for f in fragments)
            if same and not self._damaged(previous):
                if exists(self.fs, self.staging):  # left by a kill after _SUCCESS
                    self.fs.rm(self.staging, recursive=True)
                return True
            if not same and not self.overwrite:
                raise OutputError(
                    f"output {self.url!r} already holds a completed run of another model or "
                    "input; choose a new output or pass overwrite=True (--overwrite)"
                )
            # The same job with a published file deleted or replaced rescores what it
            # needs; another job replaces it.
            self._record_run(**_extras(kept, self.settings))
            return False
        # Outputs an interrupted publish already moved into place are ours too, and so
        # are those of the run it was publishing over (its manifest names them).
        ours = {e.output for e in self._entries()} | set(_published_names(self._manifest()))
        foreign = [
            p for p in self._listing()
            if not p.startswith((STAGING, "_", ".", *self.engine_files)) and p not in ours
        ]  # fmt: skip
        if foreign:
            raise OutputError(
                f"output {self.url!r} holds files scoring did not write ({foreign[0]!r}, ...); "
                "choose an empty or new output location"
            )
        self._record_run(**_extras(kept, self.settings))
        return False

    # -- the run's record (see :mod:`scoring._staging`) ---------------------------------

    @property
    def _record(self) -> str:
        return f"{self.staging}/{RECORD}"

    def _run_record(self) -> dict[str, Any] | None:
        if not exists(self.fs, self._record):
            return None
        return dict(json.loads(self.fs.cat_file(self._record)))

    def _record_run(self, **extra: Any) -> None:
        """This run's record, written before any file is staged (the marker that the
        staging folder is scoring's)."""
        self.fs.makedirs(self.staging, exist_ok=True)
        record = {**self.settings, **extra}
        self._write_whole(self._record, json.dumps(record, default=str).encode())

    def _reconcile(self) -> dict[str, Any] | None:
        """Settle an interrupted run's staging for this run: refuse a ``_temporary`` that
        is not scoring's; discard staged files written with other contents, or keep them
        with this run's settings (saying which); returns the record kept, if any."""
        if not exists(self.fs, self.staging):
            return None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.staging, detail=False)]
        if not owned(names):
            raise OutputError(
                f"output {self.url!r} holds a {STAGING}/ folder scoring did not write (no "
                f"{RECORD} or journal in it); remove it if nothing writes there, or choose "
                "another output"
            )
        record = self._run_record()
        if record is None:
            return None  # an earlier version's journal: its entries name their job
        rerun = compare(record, self.settings)
        staged = len(self.fs.glob(f"{self.staging}/_journal/*.json"))
        if rerun.discard:
            if record.get("publishing"):
                raise refuse_publishing(self.url, rerun.discard, record, self.settings)
            say(self.url, rerun.discard, record, self.settings, staged, discarded=True)
            self._discard_staging(record)
            return None
        if rerun.changed:
            say(self.url, rerun.changed, record, self.settings, staged, discarded=False)
            self._record_run(**_extras(record, self.settings))
        return record

    def _discard_staging(self, record: dict[str, Any]) -> None:
        """Remove what an interrupted run staged (its record proves it scoring's)."""
        self.fs.rm(self.staging, recursive=True)

    def _damaged(self, manifest: dict[str, Any]) -> list[str]:
        """Published files the manifest names that are gone, not of their recorded size
        or (``verify``) not of their recorded sha256: a ``_SUCCESS`` proves nothing about
        files deleted or rewritten after it."""
        return [
            f["output"] for f in _files(manifest)
            if not self._holds(f"{self.root}/{f['output']}", f, hashed=self.verify)
        ]  # fmt: skip

    def _holds(self, path: str, record: dict[str, Any], *, hashed: bool) -> bool:
        """``path`` exists with the record's size and, when ``hashed``, its sha256."""
        if not exists(self.fs, path) or self.fs.size(path) != record["bytes"]:
            return False
        return not hashed or self._sha256(path) == record["sha256"]

    def _sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def _forget_listings(self) -> None:
        """Listings cached in this process may predate what other processes wrote."""
        self.fs.invalidate_cache()

    def _listing(self) -> list[str]:
        if not exists(self.fs, self.root):
            return []
        return [p[len(self.root) :].lstrip("/") for p in self.fs.find(self.root)]

    def completed(self, fragments: list[Fragment]) -> dict[str, Entry]:
        """Journal entries, or entries of this job's published manifest, that prove a
        fragment done for this job (file intact)."""
        self._forget_listings()
        wanted = {f.relpath: f for f in fragments}
        done = {}
        for entry in [*self._published(), *self._entries()]:
            fragment = wanted.get(entry.relpath)
            if fragment is None or entry.job != self.job_key:
                continue
            if entry.fingerprint == fragment.fingerprint and self._intact(entry):
                done[entry.relpath] = entry
        return done

    def _published(self) -> list[Entry]:
        manifest = self.previous_manifest()
        if manifest is None or manifest.get("job_key") != self.job_key or "files" in manifest:
            return []
        return [
            Entry(**{k: f[k] for k in Entry.__dataclass_fields__ if k in f})
            for f in manifest["fragments"]
        ]

    def _entries(self) -> list[Entry]:
        paths = self.fs.glob(f"{self.staging}/_journal/*.json")
        return [Entry(**json.loads(self.fs.cat_file(p))) for p in paths]

    def _intact(self, entry: Entry) -> bool:
        for path in (f"{self.staging}/{entry.output}", f"{self.root}/{entry.output}"):
            if self._holds(path, entry.__dict__, hashed=False):
                return self._sha256(path) == entry.sha256
        return False

    # -- while writing -------------------------------------------------------------

    def pinned_input(self) -> dict[str, Any] | None:
        """The input snapshot an interrupted run of this job read (a Delta version), which
        its rerun reads again: the journal holds files of that snapshot."""
        path = f"{self.staging}/_input.json"
        if not exists(self.fs, path):
            return None
        pinned = dict(json.loads(self.fs.cat_file(path)))
        return pinned if pinned.pop("job_key", None) == self.job_key else None

    def pin_input(self, snapshot: dict[str, Any]) -> None:
        self.fs.makedirs(self.staging, exist_ok=True)
        self._write_whole(f"{self.staging}/_input.json",
                          json.dumps({**snapshot, "job_key": self.job_key}).encode())  # fmt: skip

    def output_for(self, fragment: Fragment) -> str:
        """The fragment's output file, relative to the output."""
        return output_name(fragment)

    def for_worker(self) -> Committer:
        """A committer for another process writing this run's files (a Ray actor)."""
        return Committer(self.url, job=self.job)

    def open(self, fragment: Fragment) -> tuple[str, HashingSink]:
        """A sink for the fragment's output, under a name no other attempt uses."""
        tmp = f"{self.staging}/{self.output_for(fragment)}.inprogress-{uuid.uuid4().hex}"
        self.fs.makedirs(tmp.rsplit("/", 1)[0], exist_ok=True)
        return tmp, HashingSink(self.fs.open(tmp, "wb"))

    def discard(self, tmp: str) -> None:
        """Remove an unfinished file (best effort: a rerun never trusts one anyway)."""
        with contextlib.suppress(OSError):
            if exists(self.fs, tmp):
                self.fs.rm_file(tmp)

    def finish(
        self,
        fragment: Fragment,
        tmp: str,
        sink: HashingSink,
        rows: int,
        *,
        stats: dict[str, list[int]] | None = None,
    ) -> Entry:
        """Move a closed output into the staging area and journal it (with ``stats``)."""
        name = self.output_for(fragment)
        self.fs.mv(tmp, f"{self.staging}/{name}")
        entry = Entry(
            relpath=fragment.relpath,
            input=fragment.path,
            fingerprint=fragment.fingerprint,
            rows=rows,
            output=name,
            sha256=sink.hexdigest(),
            bytes=sink.size,
            job=self.job_key,
            stats=stats,
        )
        key = hashlib.sha256(fragment.relpath.encode()).hexdigest()[:24]
        journal = f"{self.staging}/_journal/{key}.json"
        self.fs.makedirs(f"{self.staging}/_journal", exist_ok=True)
        self.fs.pipe_file(f"{journal}.tmp", json.dumps(entry.__dict__).encode())
        self.fs.mv(f"{journal}.tmp", journal)
        return entry

    # -- publication ---------------------------------------------------------------

    def publish(self, entries: Iterable[Entry], *, extra: dict[str, Any]) -> dict[str, Any]:
        """Move every staged file into place, then the manifest, then ``_SUCCESS``
        (a previous complete output's files set aside first, see the module docstring)."""
        self._forget_listings()
        self._begin()
        entries = sorted(entries, key=lambda e: e.relpath)
        keep = {e.output for e in entries}
        staged = {e.output for e in entries if exists(self.fs, f"{self.staging}/{e.output}")}
        manifest = self._manifest()
        old = _published_names(manifest)
        self._set_aside(manifest, staged | (set(old) - keep))
        for name in sorted(set(old) - keep):
            self._remove(f"{self.root}/{name}")
            self._step("removed a file of the previous run")
        # A file not staged was placed by an earlier, interrupted publish.
        self._place([e.output for e in entries if e.output in staged])
        manifest = self._finish([e.__dict__ for e in entries], extra)
        self.fs.rm(self.staging, recursive=True)
        return manifest

    def _place(self, names: list[str]) -> None:
        """Move staged files to the same names in the output, one step each."""
        for name in names:
            self.fs.makedirs(f"{self.root}/{name}".rsplit("/", 1)[0], exist_ok=True)
            self.fs.mv(f"{self.staging}/{name}", f"{self.root}/{name}")
            self._step("placed a new file")

    def publish_files(
        self, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> dict[str, Any]:
        """Move the ``prefix*`` files another committer wrote into :attr:`engine_dir` into
        place (an earlier run's files there go first, set aside as :meth:`publish` does),
        record them (rows from their footers, sha256 of their bytes), then the manifest,
        then ``_SUCCESS``."""
        self._forget_listings()
        self._begin()
        manifest = self._manifest()
        old = set(_published_names(manifest)) | {
            p[len(self.root) :].lstrip("/") for p in self.fs.glob(f"{self.root}/{prefix}*")
        }  # named by the manifest, or moved in by an interrupted publish
        self._set_aside(manifest, old)
        for name in sorted(old):
            self._remove(f"{self.root}/{name}")
            self._step("removed a file of the previous run")
        for path in self.fs.glob(f"{self.engine_dir}/{prefix}*"):
            self.fs.mv(path, f"{self.root}/{path.rsplit('/', 1)[-1]}")
            self._step("placed a new file")
        files = []
        for path in sorted(self.fs.glob(f"{self.root}/{prefix}*")):
            with self.fs.open(path, "rb") as f:
                rows = pq.ParquetFile(f).metadata.num_rows
            files.append({
                "output": path[len(self.root) :].lstrip("/"),
                "rows": rows,
                "sha256": self._sha256(path),
                "bytes": self.fs.size(path),
            })  # fmt: skip
        inputs = [
            {"relpath": f.relpath, "input": f.path, "fingerprint": f.fingerprint, "rows": f.rows}
            for f in fragments
        ]
        manifest = self._finish(inputs, {"files": files, **extra})
        self.fs.rm(self.staging, recursive=True)
        return manifest

    # -- the steps of a publication ---------------------------------------------------

    def _begin(self) -> None:
        self.publication = Publication(self.url, time.monotonic())
        _PUBLICATIONS[:] = [*_PUBLICATIONS[-15:], self.publication]
        # From here the run's files may be in place: a rerun with other contents refuses.
        self._record_run(**{**_extras(self._run_record(), self.settings), "publishing": True})

    def _step(self, done: str) -> None:
        """Called after each step of a publication (the fault tests stop it there)."""

    def _manifest(self) -> dict[str, Any] | None:
        """The output's manifest, with or without ``_SUCCESS`` beside it."""
        path = f"{self.root}/{MANIFEST}"
        return dict(json.loads(self.fs.cat_file(path))) if exists(self.fs, path) else None

    def _set_aside(self, manifest: dict[str, Any] | None, touched: set[str]) -> None:
        """Before files of the output's ``manifest`` are replaced or removed (``touched``):
        ``_SUCCESS`` off, each kept under ``_previous/`` and the manifest pointed at
        those, so that it names a complete output at every step.  A manifest exists only
        once a publication finished, so it always named a complete output; one an
        interrupted publication already pointed there keeps its kept files."""
        if manifest is None:
            return
        listed = _files(manifest)
        kept = any(str(f.get("output", "")).startswith(f"{PREVIOUS}/") for f in listed)
        if kept or manifest.get("job_key") != self.job_key:
            self.publication.phase = "replacing"  # a previous run is what readers see
        if exists(self.fs, f"{self.root}/{SUCCESS}"):
            self.fs.rm_file(f"{self.root}/{SUCCESS}")
            self._step("unmarked the previous run")
        # A file lost since (a rerun rescoring it) has nothing to keep.
        moving = [f for f in listed if f.get("output") in touched
                  and exists(self.fs, f"{self.root}/{f['output']}")]  # fmt: skip
        for f in moving:
            name = f["output"]
            self._keep(f"{self.root}/{name}", f"{self.root}/{PREVIOUS}/{name}")
            self._step("kept a file of the previous run")
            f["output"] = f"{PREVIOUS}/{name}"
        if moving:
            self._write_whole(f"{self.root}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
            self._step("pointed the manifest at the previous run's kept files")

    def _keep(self, path: str, kept: str) -> None:
        """``kept`` holds the bytes of ``path`` (a hard link on a local disk)."""
        self._remove(kept)
        self.fs.makedirs(kept.rsplit("/", 1)[0], exist_ok=True)
        if isinstance(self.fs, LocalFileSystem):
            with contextlib.suppress(OSError):  # a filesystem without links: copied below
                os.link(path, kept)
                return
        self.fs.cp_file(path, kept)

    def _remove(self, path: str) -> None:
        if exists(self.fs, path):
            self.fs.rm_file(path)

    def _write_whole(self, path: str, data: bytes) -> None:
        """A reader sees the old bytes or the new ones, never a part (a rename on a
        local disk; an object store's put is whole already)."""
        partial = f"{path}.{uuid.uuid4().hex}.tmp"
        self.fs.pipe_file(partial, data)
        self.fs.mv(partial, path)

    def _finish(self, fragments: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        manifest = {
            "format_version": MANIFEST_FORMAT_VERSION,
            "job_key": self.job_key,
            "job": self.job,
            "committed_at": datetime.now(timezone.utc).isoformat(),
            "rows": sum(int(f["rows"]) for f in fragments),
            "fragments": fragments,
            **extra,
        }
        self._write_whole(f"{self.root}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
        self._step("wrote the new manifest")
        self.fs.pipe_file(f"{self.root}/{SUCCESS}", b"")
        self.publication.phase = "published"
        self._step("marked the output complete")
        return manifest


def _extras(record: dict[str, Any] | None, settings: dict[str, Any]) -> dict[str, Any]:
    """What a run's record holds beyond its settings (a Delta run's id, ``publishing``)."""
    return {k: v for k, v in (record or {}).items() if k not in settings}


def _files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The output files a manifest records: an engine's own (``files``), else those of
    the input fragments."""
    return manifest.get("files") or [f for f in manifest.get("fragments", []) if "output" in f]


def _published_names(manifest: dict[str, Any] | None) -> list[str]:
    """The files ``manifest`` names, by the name each has in the output: a file set aside
    under ``_previous/`` by its own."""
    names = [str(f["output"]) for f in _files(manifest)] if manifest else []
    return [n.removeprefix(f"{PREVIOUS}/") for n in names]


def output_name(fragment: Fragment) -> str:
    """The output file for an input fragment: the same relative path, as .parquet."""
    stem = fragment.relpath
    return stem if stem.endswith(".parquet") else f"{stem}.parquet"

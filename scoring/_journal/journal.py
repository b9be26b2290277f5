"""A run's journal: the staging area under its output, the files staged there, an entry
per finished input fragment, the run's record and the input version it pinned.

Layout under the output while a run is in flight::

    _temporary/_scoring_run.json          what the run was given (:mod:`scoring._journal.staging`)
    _temporary/_input.json                the input version it read (a Delta table's)
    _temporary/<name>                     a finished output file, not yet published
    _temporary/<name>.inprogress-*        a file being written (never trusted)
    _temporary/_journal/<key>.json        one entry per finished input fragment

An entry names the input (path and fingerprint), its row count, the output file and its
sha256, and the job (model sha256, kept columns, outputs).  A rerun skips a fragment
only when its entry matches this job and input and the file still has that sha256.

The journal is all a worker (a Ray actor, a local writer) gets: it opens, finishes and
discards files.  What is published, and how, is a publisher's (:mod:`scoring._formats.publication`).
Other processes write here too, so every decision starts from fresh listings: an
object store's filesystem (s3fs) caches them per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import fsspec

from .._files import Fragment, exists
from ..errors import OutputError
from .staging import RECORD, compare, owned, refuse_publishing, say

__all__ = ["STAGING", "Entry", "HashingSink", "Journal", "job_key", "output_name"]

STAGING = "_temporary"
_HASH_CHUNK = 8 << 20  # outputs are hashed as a stream, never held whole in memory


def job_key(job: dict[str, Any]) -> str:
    """What makes two runs interchangeable: same model bytes, kept columns, outputs."""
    return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]


def output_name(fragment: Fragment) -> str:
    """The output file for an input fragment: the same relative path, as .parquet."""
    stem = fragment.relpath
    return stem if stem.endswith(".parquet") else f"{stem}.parquet"


@dataclass(frozen=True)
class Entry:
    """A finished input fragment: its output file, where the output's manifest names
    it, with that file's sha256 and size."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


class Journal:
    """The staging area of a run writing to ``url``.  ``folder``: where the run's files
    go in the output (a Delta run's own ``scoring-<run>/``; empty for a folder output,
    whose files take their input's relative paths).  ``settings``: what the run was
    given, compared with an interrupted run's record (the job key stands for model,
    kept columns, outputs)."""

    def __init__(
        self,
        url: str,
        *,
        job: dict[str, Any],
        settings: dict[str, Any] | None = None,
        folder: str = "",
    ):
        self.fs, root = fsspec.core.url_to_fs(str(url))
        self.url = str(url)
        self.root = root.rstrip("/")
        self.job = job
        self.job_key = job_key(job)
        self.staging = f"{self.root}/{STAGING}"
        self.folder = folder
        self.settings = {"job_key": self.job_key, **(settings or {})}

    def in_folder(self, folder: str) -> Journal:
        """This journal, its files going to ``folder`` of the output."""
        return Journal(self.url, job=self.job, settings=self.settings, folder=folder)

    # -- the run's record (see :mod:`scoring._journal.staging`) ---------------------------------

    @property
    def record_path(self) -> str:
        return f"{self.staging}/{RECORD}"

    def record(self) -> dict[str, Any] | None:
        if not exists(self.fs, self.record_path):
            return None
        return dict(json.loads(self.fs.cat_file(self.record_path)))

    def write_record(self, **extra: Any) -> None:
        """This run's record, written before any file is staged (the marker that the
        staging folder is scoring's); ``extra``: what it holds beyond the settings."""
        self.fs.makedirs(self.staging, exist_ok=True)
        self.write_whole(self.record_path,
                         json.dumps({**self.settings, **extra}, default=str).encode())  # fmt: skip

    def extras(self, record: dict[str, Any] | None) -> dict[str, Any]:
        """What ``record`` holds beyond this run's settings (a Delta run's id,
        ``publishing``)."""
        return {k: v for k, v in (record or {}).items() if k not in self.settings}

    def reconcile(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Settle an interrupted run's staging for this run: refuse a ``_temporary``
        that is not scoring's; keep staged files written with the same contents (saying
        which settings this run changes).  Returns ``(kept, discard)``: the record kept,
        or the record of staging to discard (the caller removes it, and what else that
        run placed)."""
        if not exists(self.fs, self.staging):
            return None, None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.staging, detail=False)]
        if not owned(names):
            raise OutputError(
                f"output {self.url!r} holds a {STAGING}/ folder scoring did not write (no "
                f"{RECORD} or journal in it); remove it if nothing writes there, or choose "
                "another output"
            )
        record = self.record()
        if record is None:
            return None, None  # an earlier version's journal: its entries name their job
        rerun = compare(record, self.settings)
        staged = len(self.fs.glob(f"{self.staging}/_journal/*.json"))
        if not staged and not record.get("publishing") and self.unused():
            return None, record  # a run refused before it staged anything: nothing to say
        if rerun.discard:
            if record.get("publishing"):
                raise refuse_publishing(self.url, rerun.discard, record, self.settings)
            say(self.url, rerun.discard, record, self.settings, staged, discarded=True)
            return None, record
        if rerun.changed:
            say(self.url, rerun.changed, record, self.settings, staged, discarded=False)
            self.write_record(**self.extras(record))
        return record, None

    def unused(self) -> bool:
        """Whether the staging area holds nothing but the run's record and input pin (a
        run refused before it staged a file)."""
        if not exists(self.fs, self.staging):
            return True
        names = {p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.staging, detail=False)}
        return names <= {RECORD, "_input.json"}

    def clear(self) -> None:
        """Remove the staging area (its record proves it scoring's)."""
        if exists(self.fs, self.staging):
            self.fs.rm(self.staging, recursive=True)

    # -- the input version ------------------------------------------------------------

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
        self.write_whole(f"{self.staging}/_input.json",
                         json.dumps({**snapshot, "job_key": self.job_key}).encode())  # fmt: skip

    # -- files ----------------------------------------------------------------------

    def output_for(self, fragment: Fragment) -> str:
        """The fragment's output file, relative to the output."""
        return f"{self.folder}{output_name(fragment)}"

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
        self.fs.pipe_file(f"{journal}.tmp", json.dumps(entry.to_dict()).encode())
        self.fs.mv(f"{journal}.tmp", journal)
        return entry

    def entries(self) -> list[Entry]:
        paths = self.fs.glob(f"{self.staging}/_journal/*.json")
        return [Entry(**json.loads(self.fs.cat_file(p))) for p in paths]

    def completed(
        self, fragments: list[Fragment], *, published: Iterable[Entry] = ()
    ) -> dict[str, Entry]:
        """Entries (journaled, or ``published`` ones of this job) that prove a fragment
        done for this job: same input fingerprint, file intact where it is staged or
        published."""
        self.forget_listings()
        wanted = {f.relpath: f for f in fragments}
        done = {}
        for entry in [*published, *self.entries()]:
            fragment = wanted.get(entry.relpath)
            if fragment is None or entry.job != self.job_key:
                continue
            if fragment.same_as(entry.fingerprint) and self.intact(entry):
                done[entry.relpath] = entry
        return done

    def where(self, entry: Entry) -> str | None:
        """Where an entry's file is now: staged, or moved into the output by a publish."""
        for path in (f"{self.staging}/{entry.output}", f"{self.root}/{entry.output}"):
            if exists(self.fs, path):
                return path
        return None

    def intact(self, entry: Entry) -> bool:
        for path in (f"{self.staging}/{entry.output}", f"{self.root}/{entry.output}"):
            if self.holds(path, size=entry.bytes):
                return self.sha256(path) == entry.sha256
        return False

    def holds(self, path: str, *, size: int, sha256: str | None = None) -> bool:
        """``path`` exists with ``size`` bytes and, when given, that ``sha256``."""
        if not exists(self.fs, path) or self.fs.size(path) != size:
            return False
        return sha256 is None or self.sha256(path) == sha256

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def write_whole(self, path: str, data: bytes) -> None:
        """A reader sees the old bytes or the new ones, never a part (a rename on a
        local disk; an object store's put is whole already)."""
        partial = f"{path}.{uuid.uuid4().hex}.tmp"
        self.fs.pipe_file(partial, data)
        self.fs.mv(partial, path)

    def forget_listings(self) -> None:
        """Listings cached in this process may predate what other processes wrote."""
        self.fs.invalidate_cache()

    def listing(self) -> list[str]:
        """Every file of the output, relative to it."""
        if not exists(self.fs, self.root):
            return []
        return [p[len(self.root) :].lstrip("/") for p in self.fs.find(self.root)]

"""What every output format's publisher shares: the publisher protocol, the frozen
:class:`Target` a checked output returns, and functions over a run's journal.

A run checks its output with a publisher (``check_target``: is it complete already, may
it be written; the answer a :class:`Target`), resumes from what the publisher counts
done (``completed``), lets its workers write through the target's
:class:`~scoring._journal.journal.Journal`, and then ``publish``-es the journal's
entries, or, where an engine's own committer wrote the files (Spark's),
``publish_files``.  Every format records each output file's size and sha256.  The
formats: :mod:`scoring._formats.folder` (a Parquet folder, ``_SUCCESS`` last), and the
tables of :mod:`scoring._formats.table` (one commit: :mod:`scoring._formats.delta`,
:mod:`scoring._formats.iceberg`); :mod:`scoring._formats.registry` names them.

What they share lives here as functions over a journal: the record of a publication in
this process (what a command stopped by a signal says), moving files into place one
step at a time, and reading back the files an engine's committer wrote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._files import Fragment, exists
from .._journal.journal import Entry, Journal
from .._journal.manifest import FileRecord, InputRecord, Manifest
from ..errors import ConfigError, OutputError

if TYPE_CHECKING:  # pyarrow is loaded where files are read, not to name a format
    import pyarrow as pa

__all__ = [
    "FOLDER_MODES", "INCREMENTAL", "INPUTS", "TABLE_MODES", "ChangePlan", "Opening",
    "Publication", "Publisher", "Target", "begin", "engine_dir", "forget_inputs",
    "landed_meanwhile", "place", "publications_since", "recorded", "recorded_inputs",
    "recording", "table_mode", "table_settings", "take", "written",
]  # fmt: skip

#: The publishers' mode for an incremental run: a full run replaces the output (it is
#: the job's own), a later one adds (or, a table that merges, merges) what changed.
INCREMENTAL = "incremental"
#: Where a table output records a Parquet folder input's files scored to date.
INPUTS = "_scoring_inputs"
#: A table output's modes (Delta's, Iceberg's), as Spark's writers name them.
TABLE_MODES = ("error", "append", "overwrite", "overwrite_partitions")
#: A folder's modes: published whole, a new output or one replacing the last run.
FOLDER_MODES = ("error", "overwrite", INCREMENTAL)


def table_mode(kind: str, mode: str | None, *, extra: tuple[str, ...] = ()) -> str:
    """A table output's mode (default ``error``), or the one-line refusal naming them."""
    mode = mode or "error"
    if mode not in (*TABLE_MODES, *extra):
        raise ConfigError(f"{kind} output mode {mode!r}: expected one of {', '.join(TABLE_MODES)}")
    return mode


def table_settings(name: str, mode: str, opening: Opening) -> dict[str, Any]:
    """What a table run's staging records (:mod:`scoring._journal.staging`): the format,
    the mode and partition columns, and the run's own settings."""
    return {"format": name, "mode": mode, "partition_by": list(opening.partitions),
            **opening.settings}  # fmt: skip


def landed_meanwhile(
    journal: Journal, *, kind: str, mode: str, seen: str | None, now: str | None, folder: str
) -> None:  # fmt: skip
    """Refuse a commit whose mode the table no longer allows: ``seen`` is what the run
    planned against, ``now`` what the commit finds (None: no table; else the table's
    last scoring run, "" where it holds none).  Mode ``error`` writes only a new table
    and an incremental run only its own; any other mode means the same against any
    table.  The run's own ``folder`` of placed files and its staging are removed first:
    a foreign table keeps exactly what it held."""
    allowed = now is None if mode == "error" else mode != "incremental" or now == seen
    if allowed:
        return
    if exists(journal.fs, f"{journal.root}/{folder}"):
        journal.fs.rm(f"{journal.root}/{folder}", recursive=True)
    journal.clear()
    said = "another writer created it" if seen is None else "another writer committed to it"
    raise OutputError(
        f"{kind} table {journal.url!r} changed while this run scored ({said}): mode "
        f"{mode!r} {'writes a new table only' if mode == 'error' else 'follows its own runs only'}"
        "; nothing of this run was committed: rerun with mode 'append' or 'overwrite', or "
        "choose a new table"
    )


@dataclass(frozen=True)
class Opening:
    """What a run opens its output's publisher with: its ``job`` (what keys it), the
    ``mode`` asked, whether a rerun hashes published files (``verify``), the prefixes of
    files an engine's own committer leaves (``engine_files``), the ``settings`` its
    staging records (:mod:`scoring._journal.staging`), a table's ``partitions`` and
    their types, and the plan's ``on_step`` hook."""

    job: dict[str, Any]
    mode: str | None = None
    verify: bool = False
    engine_files: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    partitions: dict[str, pa.DataType] = field(default_factory=dict)
    on_step: Callable[[str], None] | None = None


class ChangePlan(Protocol):
    """What a publisher follows of an incremental run's change set
    (:class:`scoring._changes.Changes`)."""

    kind: str  # "full", "incremental" or "none"
    carried: Manifest | None  # the last run's files kept as they are
    deletes: str | None  # a staged file of the keys whose rows go (a merge's)

    @property
    def merges(self) -> bool:
        """Whether rows were updated or deleted (an output that merges merges them)."""


@dataclass(frozen=True)
class Target:
    """What checking an output found, and how the run publishes into it.

    ``journal``: what the run's workers write through (a table run's names its own
    folder).  ``complete``: the output already holds this run.  ``run``: a table run's
    id (the pending one a rerun resumes, or a new one); ``seen``: the table's state the
    run planned against (None: no table; else its last scoring run, "" for none).
    ``mode``: what the publication does (an incremental run's, once it
    :meth:`~Publisher.follow`-s its changes); ``key``, ``deletes``: a merge's key columns
    and staged deletes; ``carried``: the last run's files an incremental run keeps."""

    journal: Journal
    complete: bool = False
    mode: str = "error"
    run: str | None = None
    seen: str | None = None
    key: tuple[str, ...] = ()
    deletes: str | None = None
    carried: Manifest | None = None


class Publisher(Protocol):
    """One output format's way to check, resume and publish a run.  The publisher
    holds what it was opened with; what a run found and follows is its :class:`Target`."""

    url: str
    #: The output's staging: the run's record, before the target is checked.
    journal: Journal
    #: The output's partition columns (left to the files' ``key=value`` folders).
    partition_by: list[str]
    #: Called after each step of a publication (the plan's ``on_publish_step`` hook).
    on_step: Callable[[str], None] | None

    def check_target(self, fragments: list[Fragment]) -> Target:
        """The output's target: ``complete`` when it already holds this run; raise when
        it holds something this run must not replace.  Settles an interrupted run's
        staging."""

    def completed(self, target: Target, fragments: list[Fragment]) -> dict[str, Entry]:
        """Fragments already done for this job, by relative path (files intact)."""

    def previous(self) -> Manifest | None:
        """The output's last complete run (an incremental run follows from it)."""

    def present(self) -> dict[str, int] | None:
        """The output's files and sizes (None: a table, whose log says what it holds)."""

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse, before anything is written, files of ``schema`` the output cannot
        take (an existing table's other columns or types), naming the column."""

    def follow(self, target: Target, changes: ChangePlan, *, key: Sequence[str] = ()) -> Target:
        """The target an incremental run's changes publish into."""

    def publish(self, target: Target, entries: Iterable[Entry], *,
                extra: dict[str, Any]) -> Manifest:  # fmt: skip
        """The journal's files, published; ``extra``: ``metadata``, ``input_snapshot``."""

    def publish_files(
        self, target: Target, fragments: list[Fragment], *, prefix: str, extra: dict[str, Any]
    ) -> Manifest:
        """The ``prefix*`` files an engine's own committer wrote under
        :func:`engine_dir`, published with their sizes and sha256."""


@dataclass
class Publication:
    """How far a publication in this process got, for what a command stopped by a
    signal says: ``publishing`` (nothing published yet), ``replacing`` (a previous
    complete output is set aside and readable through the manifest), ``committing`` (a
    Delta table's files placed, its one commit not yet made), ``published``."""

    url: str
    started: float  # time.monotonic()
    phase: str = "publishing"
    #: The run plan's ``on_publish_step`` hook.
    on_step: Callable[[str], None] | None = None

    def step(self, done: str) -> None:
        """Called after each step of a publication, saying what it did: the plan's
        ``on_publish_step`` hook runs here (the fault tests stop a publication there)."""
        if self.on_step is not None:
            self.on_step(done)


_PUBLICATIONS: list[Publication] = []


def publications_since(started: float) -> list[Publication]:
    """This process's publications begun at or after ``started`` (time.monotonic())."""
    return [p for p in _PUBLICATIONS if p.started >= started]


def begin(journal: Journal, on_step: Callable[[str], None] | None = None) -> Publication:
    """A publication of ``journal``'s run starts: from here its files may be in place,
    so its record says so (a rerun with other contents then refuses).  ``on_step``: the
    plan's hook, called after each step."""
    journal.forget_listings()
    publication = Publication(journal.url, time.monotonic(), on_step=on_step)
    _PUBLICATIONS[:] = [*_PUBLICATIONS[-15:], publication]
    journal.write_record(**{**journal.extras(journal.record()), "publishing": True})
    return publication


def place(journal: Journal, publication: Publication, names: list[str]) -> None:
    """Move staged files to the same names in the output, one step each."""
    for name in names:
        target = f"{journal.root}/{name}"
        journal.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        journal.fs.mv(f"{journal.staging}/{name}", target)
        publication.step("placed a new file")


def engine_dir(journal: Journal) -> str:
    """Where an engine with its own committer writes, to be moved into place on publish."""
    return f"{journal.staging}/_engine"


def written(journal: Journal, folder: str, prefix: str) -> list[str]:
    """The ``prefix*`` files below ``folder``, at any depth (partition folders)."""
    if not exists(journal.fs, folder):
        return []
    found = journal.fs.find(folder)
    return sorted(p for p in found if p.rsplit("/", 1)[-1].startswith(prefix))


def take(journal: Journal, publication: Publication, prefix: str, *, into: str) -> None:
    """Move the ``prefix*`` files an engine's committer wrote into the output's ``into``
    folder, keeping their relative paths (Spark lays a partitioned write out in
    ``key=value`` folders)."""
    source = engine_dir(journal)
    for path in written(journal, source, prefix):
        moved = f"{into}/{path[len(source) :].lstrip('/')}".lstrip("/")
        target = f"{journal.root}/{moved}"
        journal.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        journal.fs.mv(path, target)
        publication.step("placed a new file")


def recorded(journal: Journal, paths: list[str]) -> list[FileRecord]:
    """Each published file's record: rows from its footer, its size and sha256."""
    import pyarrow.parquet as pq

    records = []
    for path in paths:
        with journal.fs.open(path, "rb") as f:
            rows = pq.ParquetFile(f).metadata.num_rows
        records.append(
            FileRecord(
                output=path[len(journal.root) :].lstrip("/"),
                rows=rows,
                sha256=journal.sha256(path),
                bytes=journal.fs.size(path),
            )
        )
    return records


# -- a table output's record of a Parquet folder input ---------------------------------


def recording(
    journal: Journal, run: str | None, carried: Manifest | None,
    fragments: Sequence[Entry | InputRecord], extra: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """``extra`` naming, for a Parquet folder input, every input file scored to date
    (the last run's that this one keeps, and its own), written beside a table output
    under ``_scoring_inputs/<run>.json`` before the commit that names it: an incremental
    run compares the folder with it (a table's log records a versioned input's version,
    not a folder's files).  An interrupted run's rerun writes it again."""
    if extra.get("input_snapshot") is not None:
        return extra
    kept: list[Entry | InputRecord] = list(carried.fragments) if carried is not None else []
    records = [asdict(InputRecord(f.relpath, f.input, f.fingerprint, f.rows))
               for f in [*kept, *fragments]]  # fmt: skip
    name = f"{INPUTS}/{run}.json"
    journal.fs.makedirs(f"{journal.root}/{INPUTS}", exist_ok=True)
    journal.write_whole(f"{journal.root}/{name}", json.dumps(records).encode())
    return {**extra, "inputs": name}


def recorded_inputs(journal: Journal, name: str | None) -> list[InputRecord]:
    """The input files a run of a Parquet folder recorded (:func:`recording`)."""
    if not name:
        return []
    path = f"{journal.root}/{name}"
    return [InputRecord(**r) for r in json.loads(journal.fs.cat_file(path))]


def forget_inputs(journal: Journal, *, keep: str | None, run: str | None = None) -> None:
    """Earlier runs' input records once the last commit names ``keep``'s; or ``run``'s
    only (an interrupted run's, never committed)."""
    for path in journal.fs.glob(f"{journal.root}/{INPUTS}/*.json"):
        name = path.rsplit("/", 1)[-1][: -len(".json")]
        if (run is not None and name == run) or (run is None and name != keep):
            journal.fs.rm_file(path)

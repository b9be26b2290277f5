"""Incremental runs: what changed in the input since the output's last complete run,
the stage between the input and the publisher.

An incremental run compares its input with what the output's publisher recorded of
its last complete run (:meth:`~scoring._formats.publication.Publisher.previous`: the job key, the
input and its version, the fragments and files) and scores only the difference:

- a **Parquet folder**: files not scored before are new (a folder output's manifest
  names the files scored; a Delta output records them beside the table, under
  ``_scoring_inputs/``, named by its commit).  A file whose size or modification time
  changed, or that is gone, is refused by name, or, with ``on_changed="rescore"``,
  rescored (its output file replaced) or dropped (a folder output's).
- a **Delta table**: the changes between the version the last run read and the one
  pinned now, from delta-rs's ``load_cdf``.  With the table's change data feed
  (``delta.enableChangeDataFeed``) inserts and update post-images are scored, deletes
  and update pre-images remove the matching output rows (a Delta output merged on the
  job's ``key`` columns).  Without it only appended rows can be followed: a version that
  removed data is refused by name.  Compaction (``OPTIMIZE``) changes no data and is
  skipped.  The rows to score are written once under the output's staging area
  (``_temporary/_changes/``) and are the run's input from there on, for every engine;
  a rerun after a kill finds them there and resumes.

A different model, other outputs or kept columns, another input, no earlier run, or an
earlier run's file that is gone makes the run a full one; :class:`Changes` says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ._files import exists
from ._formats import FORMATS, INCREMENTAL, format_named
from ._formats.dataset import InputDataset, open_input
from ._formats.delta import delta_storage_options
from ._formats.delta_cdf import changes, escaped_log
from ._formats.iceberg_catalog import appended
from ._journal.journal import Entry, Journal, job_key
from ._journal.manifest import Manifest
from .errors import READ_FIX, WRITE_FIX, ConfigError, InputError, cause_line, translated

__all__ = ["INCREMENTAL", "ON_CHANGED", "Changes", "Incremental", "change_set",
           "check_incremental", "refuse_bad_keys"]  # fmt: skip

#: What an incremental run does with an input file that changed or is gone.
ON_CHANGED = ("refuse", "rescore")
#: What a refused incremental run can do instead.
FULL_RUN = "score everything again (mode 'overwrite', without incremental)"
#: The rows a staged change file holds at most (engines spread a run over files).
CHANGE_FILE_ROWS = 1 << 20
_FEED = "delta.enableChangeDataFeed"
_UPSERT = ("insert", "update_postimage")


@dataclass(frozen=True)
class Incremental:
    """An incremental run's options: ``key``, the kept columns that identify a row (a
    Delta output merged on them follows updated and deleted rows); ``on_changed``, what
    becomes of an input file that changed or is gone (``refuse`` or ``rescore``)."""

    key: tuple[str, ...] = ()
    on_changed: str = "refuse"


@dataclass
class Changes:
    """What an incremental run scores, and what it keeps of the output's last run.

    ``kind``: ``full`` (``reason`` says why), ``incremental``, or ``none`` (nothing new
    since the last run).  ``data``: the input to score (the new files, or the staged
    change rows).  ``carried``: the last run's output files kept as they are (a Parquet
    folder's).  ``deletes``: a staged Parquet file of the ``key`` values whose output
    rows go (a Delta output's merge)."""

    kind: str
    reason: str
    data: InputDataset | None = None
    carried: Manifest | None = None
    since: int | None = None  # the Delta version the last run read
    until: int | None = None  # the one this run reads
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    input_rows: int = 0  # what a full run would score
    deletes: str | None = None
    #: Whether ``since`` and ``until`` count versions (Delta's); an Iceberg table's
    #: snapshot ids do not, so no id between them is named.
    counted: bool = True

    @property
    def rows(self) -> int:
        """The rows this run scores."""
        return self.inserted + self.updated

    @property
    def merges(self) -> bool:
        """Whether the output must be merged on the key (rows updated or deleted)."""
        return bool(self.updated or self.deleted or self.deletes)

    def to_dict(self) -> dict[str, Any]:
        """The report's part: what it is and counts (not the input and files it holds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("data", "carried", "deletes", "counted")}  # fmt: skip

    def describe(self) -> str:
        """One line for the run's summary."""
        if self.kind == "full":
            return f"full run: {self.reason}"
        versions, since, until = "", self.since, self.until
        if since is not None and until is not None and not self.counted:
            versions = (f" (input snapshot {until}" +
                        (f", after snapshot {since})" if until != since else ")"))  # fmt: skip
        elif since is not None and until is not None:
            versions = f" (input versions {since + 1}-{until})" if until > since else (
                f" (input version {until})")  # fmt: skip
        if self.kind == "none":
            return f"incremental: nothing changed since the last run{versions}"
        return (f"incremental{versions}: {self.inserted:,} rows inserted, {self.updated:,} "
                f"updated, {self.deleted:,} deleted; {self.input_rows:,} rows in the "
                "input")  # fmt: skip


def check_incremental(
    *, output_format: str, mode: str | None, key: Sequence[str], keep: Sequence[str],
    on_changed: str,
) -> None:  # fmt: skip
    """Refuse, before anything is opened, options an incremental run cannot take."""
    if on_changed not in ON_CHANGED:
        raise ConfigError(f"on_changed {on_changed!r}: expected one of {', '.join(ON_CHANGED)}")
    if mode not in (None, "incremental"):
        raise ConfigError(
            f"an incremental run chooses its output mode itself (a full run replaces the "
            f"output, a later one adds or merges what changed); drop mode {mode!r}"
        )
    for column in key:
        if column not in keep:
            raise ConfigError(f"key column {column!r} must be a kept column (add it to keep)")
    if key and not format_named(output_format).merges:
        raise ConfigError(
            "key columns merge a Delta output (format delta); a Parquet output takes new "
            "input files only: drop key, or write a Delta table"
        )


def change_set(
    data: InputDataset, previous: Manifest | None, *, job: dict[str, Any], journal: Journal | None,
    output_format: str, on_changed: str, key: Sequence[str], columns: Sequence[str],
    present: dict[str, int] | None,
) -> Changes:  # fmt: skip
    """The run's :class:`Changes`: ``previous`` is the output's last complete run (None:
    none), ``columns`` what scoring reads, ``present`` the output's files and sizes (a
    Parquet folder's; None for a table, whose log is its own).  ``journal``: the run's,
    under whose staging a Delta table's change rows are written; None counts them only
    (a plan's preview: nothing is written)."""
    rows = data.rows
    why = _full_reason(data, previous, job=job)
    if why:
        if key:  # the merges of later runs follow a key only if it names one row
            refuse_bad_keys(data, key=key)
        return Changes("full", why, data=data, input_rows=rows, inserted=rows)
    assert previous is not None
    lost = [f.output for f in previous.published()
            if present is not None and present.get(f.output) != f.bytes]  # fmt: skip
    # Rows of a table's version, or of a file Spark's committer wrote, are not one input
    # file's: which to score again cannot be told, so everything is.
    if lost and (data.snapshot is not None or previous.files is not None):
        return Changes("full", f"the last run's output file {lost[0]!r} is gone or changed",
                       data=data, input_rows=rows, inserted=rows)  # fmt: skip
    if data.snapshot is not None and FORMATS[data.snapshot["format"]].changes == "appends":
        return _appended_changes(data, previous)
    if data.snapshot is not None:
        return _table_changes(data, previous, journal=journal, output_format=output_format,
                              key=key, columns=columns)  # fmt: skip
    return _folder_changes(data, previous, on_changed=on_changed, lost=set(lost))


def _full_reason(data: InputDataset, previous: Manifest | None, *, job: dict[str, Any]) -> str:
    """Why this run must score everything, or "" when it can follow the changes."""
    if previous is None:
        return "the output holds no earlier run"
    if previous.job_key != job_key(job):
        was = previous.job.get("model_sha256")
        if was and was != job["model_sha256"]:
            named = (previous.metadata or {}).get("scoring._model")
            return (f"a new model: the last run's was {named or 'another'} (sha256 "
                    f"{was[:12]}), this one's sha256 is {job['model_sha256'][:12]}")  # fmt: skip
        return "the outputs or the kept columns differ from the last run's"
    if previous.input is not None and previous.input.rstrip("/") != data.url.rstrip("/"):
        return f"the last run read another input ({previous.input!r})"
    had = (previous.input_snapshot or {}).get("version")
    if (data.snapshot is None) != (had is None):
        return "the last run read the input as another kind (a Delta table or a folder)"
    if data.snapshot is None and not previous.fragments:
        return "the last run recorded no input files (an earlier version wrote it)"
    return ""


# -- a Parquet folder ----------------------------------------------------------------


def _folder_changes(
    data: InputDataset, previous: Manifest, *, on_changed: str, lost: set[str]
) -> Changes:
    """New files scored; changed or deleted ones refused by name, or rescored/dropped."""
    now = {f.relpath: f for f in data.fragments}
    before = {f.relpath: f for f in previous.fragments}
    outputs = _outputs_of(previous)
    changed = [r for r, f in now.items() if r in before and not f.same_as(before[r].fingerprint)]
    gone = [r for r in before if r not in now]
    if (changed or gone) and on_changed != "rescore":
        name, what = (changed[0], "changed") if changed else (gone[0], "is gone")
        raise InputError(
            f"input file {name!r} {what} since the last run scored it"
            + (f" (and {len(changed) + len(gone) - 1} more)" if len(changed) + len(gone) > 1
               else "")
            + "; an incremental run scores new files only: set on_changed = 'rescore' "
            f"(--on-changed rescore) to rescore it, or {FULL_RUN}"
        )  # fmt: skip
    if (changed or gone) and previous.files is not None:
        raise InputError(
            f"input file {(changed or gone)[0]!r} changed since the last run, whose output "
            "files each hold rows of many input files (a Delta table's, or Spark's "
            f"committer's), so its rows cannot be replaced alone: {FULL_RUN}"
        )
    # An output file gone or rewritten since: its input file is scored again.
    redo = {r for r, f in before.items() if r in now and outputs.get(r) in lost}
    new = [r for r in now if r not in before]
    todo = set(new) | set(changed) | redo
    carried = [f for f in previous.fragments if f.relpath in now and f.relpath not in todo]
    kept = replace(
        previous,
        fragments=carried,  # type: ignore[arg-type]
        files=None if previous.files is None else [f for f in previous.files
                                                   if f.output not in lost],
    )  # fmt: skip
    changes = Changes(
        "incremental" if todo or gone else "none",
        "",
        data=data.subset([r for r in now if r in todo]) if todo else None,
        carried=kept,
        inserted=sum(now[r].rows for r in new) + sum(now[r].rows for r in redo),
        updated=sum(now[r].rows for r in changed),
        deleted=sum(before[r].rows for r in gone),
        input_rows=data.rows,
    )
    return changes


def _outputs_of(previous: Manifest) -> dict[str, str]:
    """Each input fragment's output file, where the product wrote one per fragment."""
    return {e.relpath: e.output for e in previous.fragments if isinstance(e, Entry)}


# -- an Iceberg table ---------------------------------------------------------------------


def _appended_changes(data: InputDataset, previous: Manifest) -> Changes:
    """The data files the snapshots after the one the last run read appended; any other
    kind of snapshot between is refused by name
    (:func:`scoring._formats.iceberg_catalog.appended`)."""
    since = int((previous.input_snapshot or {})["version"])
    until = int((data.snapshot or {})["version"])
    base = Changes("none", "", carried=previous, since=since, until=until, input_rows=data.rows,
                   counted=False)  # fmt: skip
    if since == until:
        return base
    added = set(appended(data.url, since=since, until=until, fix=FULL_RUN))
    new = [f for f in data.fragments if data.fs.unstrip_protocol(f.path) in added
           or f.path in added]  # fmt: skip
    if not new:
        return base
    return replace(base, kind="incremental", data=data.subset([f.relpath for f in new]),
                   inserted=sum(f.rows for f in new))  # fmt: skip


# -- a Delta table ----------------------------------------------------------------------


def _table_changes(
    data: InputDataset, previous: Manifest, *, journal: Journal | None, output_format: str,
    key: Sequence[str], columns: Sequence[str],
) -> Changes:  # fmt: skip
    """The rows changed between the version the last run read and the pinned one
    (staged under ``journal``'s staging, or only counted)."""
    since = int((previous.input_snapshot or {})["version"])
    until = int((data.snapshot or {})["version"])
    base = Changes("none", "", carried=previous, since=since, until=until,
                   input_rows=data.rows)  # fmt: skip
    if until < since:
        raise InputError(
            f"input {data.url!r} version {until} is older than version {since}, which the "
            f"last run read; ask for a later version, or {FULL_RUN}"
        )
    if until == since:
        return base
    if journal is None:  # counted only
        rows = _read_changes(data, since=since, until=until, key=key, columns=key or columns[:1])
        if key:
            refuse_bad_keys(data, key=key, changed=rows)
        counts = _last_change(rows, key=key, url=data.url)[2]
        _refuse_unfollowed(counts, key=key, url=data.url, output_format=output_format)
        kind = "incremental" if any(counts.values()) else "none"
        return replace(base, kind=kind, inserted=counts["insert"], updated=counts["update"],
                       deleted=counts["delete"])  # fmt: skip
    folder = f"{journal.staging}/_changes/delta-v{since + 1}-v{until}"
    staged = _staged(journal, folder)
    if staged is None:
        rows = _read_changes(data, since=since, until=until, key=key, columns=columns)
        if key:
            refuse_bad_keys(data, key=key, changed=rows)
        staged = _stage(journal, folder, rows, key=key, partitions=data.partition_columns,
                        url=data.url, output_format=output_format)  # fmt: skip
    counts = staged["counts"]
    if not any(counts.values()) and not staged.get("deletes"):
        return base  # no row changed (a compaction, a row added and removed again)
    changes = replace(base, kind="incremental", inserted=counts["insert"],
                      updated=counts["update"], deleted=counts["delete"])  # fmt: skip
    if staged.get("deletes"):
        changes.deletes = f"{folder}/_deleted.parquet"
    if counts["insert"] + counts["update"]:
        scored = open_input(journal.fs.unstrip_protocol(f"{folder}/rows"))
        scored.url, scored.snapshot = data.url, data.snapshot
        scored.requested_version = data.requested_version
        changes.data = scored
    return changes


def _read_changes(
    data: InputDataset, *, since: int, until: int, key: Sequence[str], columns: Sequence[str]
) -> pa.Table:
    """The change feed's rows of versions ``since + 1 .. until``: each key's last change."""
    said = f"cannot read the changes of Delta table {data.url!r} from version {since}"
    with translated("table read", f"{said} to {until}", fix=READ_FIX):
        return _changed_rows(data, since=since, until=until, key=key, columns=columns)


def _changed_rows(
    data: InputDataset, *, since: int, until: int, key: Sequence[str], columns: Sequence[str]
) -> pa.Table:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    table = DeltaTable(data.url, version=until, storage_options=delta_storage_options(data.url))
    wanted = list(dict.fromkeys([*key, *columns, "_change_type", "_commit_version"]))
    try:
        log = escaped_log(data.url, since=since + 1, until=until)
        if log is not None:  # delta-rs cannot read these (its bug): the log's own reader
            rows = changes(data.url, schema=pa.schema(table.schema().to_arrow()),
                           partitions=table.metadata().partition_columns, since=since + 1,
                           until=until, columns=wanted, log=log)  # fmt: skip
        else:
            rows = pa.table(table.load_cdf(starting_version=since + 1, ending_version=until,
                                           columns=wanted))  # fmt: skip
    except (DeltaError, OSError, pa.ArrowException) as exc:  # a change file unreadable
        raise InputError(
            f"cannot read the changes of Delta table {data.url!r} between versions {since} "
            f"and {until}: {cause_line(exc)}; {FULL_RUN}"
        ) from None
    rows = rows.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in rows.schema]))
    kinds = set(rows.column("_change_type").to_pylist()) if rows.num_rows else set()
    if kinds - {"insert"} and table.metadata().configuration.get(_FEED) != "true":
        first = min(v for v, k in zip(rows.column("_commit_version").to_pylist(),
                                      rows.column("_change_type").to_pylist(),
                                      strict=True) if k != "insert")  # fmt: skip
        raise InputError(
            f"Delta table {data.url!r} version {first} removed or rewrote rows "
            f"({_operation(table, first)}); without the table's change data feed an "
            f"incremental run follows appends only: set the table property {_FEED} = true "
            f"(changes after it are followed), or {FULL_RUN}"
        )
    return rows


def _operation(table: Any, version: int) -> str:
    for commit in table.history():
        if int(commit.get("version", -1)) == version:
            return str(commit.get("operation", "?"))
    return "?"


def _plain(kind: pa.DataType) -> pa.DataType:
    """View types (delta-rs's strings) as the plain ones every reader takes."""
    if kind == pa.string_view():
        return pa.string()
    if kind == pa.binary_view():
        return pa.binary()
    return kind


def _stage(
    journal: Journal, folder: str, rows: pa.Table, *, key: Sequence[str],
    partitions: Sequence[str], url: str, output_format: str,
) -> dict[str, Any]:  # fmt: skip
    """Write the rows to score (and the keys whose rows go) under ``folder``, its
    record last: a rerun trusts a folder with its record only."""
    upserts, deleted, counts = _last_change(rows, key=key, url=url)
    _refuse_unfollowed(counts, key=key, url=url, output_format=output_format)
    meta = ["_change_type", "_commit_version"]
    upserts = upserts.drop_columns([c for c in meta if c in upserts.column_names])
    with translated("table write", f"cannot stage the changed rows in {folder!r}",
                    fix=WRITE_FIX):  # fmt: skip
        _write_staged(journal, folder, upserts, deleted, partitions=partitions)
    record = {"counts": counts, "deletes": deleted.num_rows}
    journal.write_whole(f"{folder}/_staged.json", json.dumps(record).encode())
    return record


def _write_staged(
    journal: Journal, folder: str, upserts: pa.Table, deleted: pa.Table, *,
    partitions: Sequence[str],
) -> None:  # fmt: skip
    fs = journal.fs
    if exists(fs, folder):
        fs.rm(folder, recursive=True)
    fs.makedirs(f"{folder}/rows", exist_ok=True)
    if upserts.num_rows:
        pads.write_dataset(
            upserts, f"{folder}/rows", format=pads.ParquetFileFormat(), filesystem=fs,
            partitioning=list(partitions) or None, partitioning_flavor="hive" if partitions
            else None, basename_template=f"{folder.rsplit('/', 1)[-1]}-part-{{i}}.parquet",
            max_rows_per_file=CHANGE_FILE_ROWS, max_rows_per_group=CHANGE_FILE_ROWS,
            existing_data_behavior="overwrite_or_ignore",
        )  # fmt: skip
    if deleted.num_rows:
        with fs.open(f"{folder}/_deleted.parquet", "wb") as f:
            pq.write_table(deleted, f)


def _refuse_unfollowed(
    counts: dict[str, int], *, key: Sequence[str], url: str, output_format: str
) -> None:
    """Updated or deleted rows need a Delta output merged on key columns."""
    if not (counts["delete"] or counts["update"]):
        return
    if not format_named(output_format).merges:
        raise InputError(
            f"Delta table {url!r} updated or deleted rows since the last run; an output that "
            "follows them is a Delta table merged on key columns: write format delta with "
            f"key = [...], or {FULL_RUN}"
        )
    if not key:
        raise ConfigError(
            f"Delta table {url!r} updated or deleted rows since the last run: name the key "
            "columns that identify a row (key = [...], --key), so that its output rows are "
            "replaced or removed"
        )


def _staged(journal: Journal, folder: str) -> dict[str, Any] | None:
    """The record of change rows an interrupted run of these versions staged."""
    path = f"{folder}/_staged.json"
    if not exists(journal.fs, path):
        return None
    return dict(json.loads(journal.fs.cat_file(path)))


def _last_change(
    rows: pa.Table, *, key: Sequence[str], url: str
) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    """Each key's last change over the versions read: the rows to score (inserted or
    updated), the keys whose output rows go, and counts (a key first inserted in these
    versions is new; any other that ends inserted or updated replaces its output row).
    Within a version a post-image or insert comes after a pre-image or delete.  Without
    key columns only inserts are scored (and any other change refused by the caller)."""
    kinds = rows.column("_change_type")
    if not key:  # followed only where every change is an insert (_refuse_unfollowed)
        counts = {"insert": _true(pc.equal(kinds, "insert")),
                  "update": _true(pc.equal(kinds, "update_postimage")),
                  "delete": _true(pc.equal(kinds, "delete"))}  # fmt: skip
        return rows.filter(pc.equal(kinds, "insert")), pa.table({}), counts
    upsert = pc.is_in(kinds, pa.array(_UPSERT))
    ranked = rows.append_column("_order", pc.if_else(upsert, 1, 0)).sort_by(
        [*((k, "ascending") for k in key), ("_commit_version", "ascending"),
         ("_order", "ascending")]
    )  # fmt: skip
    _refuse_duplicates(ranked, key=key, url=url)
    ranked = ranked.append_column("_rank", pa.array(range(ranked.num_rows), pa.int64()))
    ends = ranked.group_by(list(key), use_threads=False).aggregate(
        [("_rank", "min"), ("_rank", "max")]
    )
    starts = ranked.take(ends.column("_rank_min")).column("_change_type")
    final = ranked.take(ends.column("_rank_max"))
    new = pc.equal(starts, "insert")
    up = pc.is_in(final.column("_change_type"), pa.array(_UPSERT))
    counts = {
        "insert": _true(pc.and_(up, new)),
        "update": _true(pc.and_(up, pc.invert(new))),
        "delete": _true(pc.and_(pc.invert(up), pc.invert(new))),
    }
    gone = final.filter(pc.invert(up)).select(list(key))
    return final.filter(up).drop_columns(["_order", "_rank"]), gone, counts


def _true(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _refuse_duplicates(ranked: pa.Table, *, key: Sequence[str], url: str) -> None:
    """Two rows of one key inserted (or updated) in one version: the key is no row's."""
    up = ranked.filter(pc.is_in(ranked.column("_change_type"), pa.array(_UPSERT)))
    if not up.num_rows:
        return
    counted = up.group_by([*key, "_commit_version"]).aggregate([([], "count_all")])
    twice = counted.filter(pc.greater(counted.column("count_all"), 1))
    if twice.num_rows:
        row = twice.slice(0, 1).to_pylist()[0]
        value = {k: row[k] for k in key}
        raise InputError(
            f"Delta table {url!r} version {row['_commit_version']} holds {row['count_all']} "
            f"rows of key {value}; key columns {list(key)} must identify one row: name "
            "columns that do"
        )


def refuse_bad_keys(
    data: InputDataset, *, key: Sequence[str], changed: pa.Table | None = None
) -> None:
    """Refuse key columns that do not name one row: a null key (which no merge
    matches) or a key two rows hold (whose output rows a merge would replace or delete
    together).  The whole input is checked, or, given the ``changed`` rows, the input's
    rows of their keys (a later run checks what it merges)."""
    if changed is not None:
        nulls = [c for c in key if changed.column(c).null_count]
        if nulls:
            raise _bad_key(data.url, key, f"a changed row with a null {nulls[0]!r}")
        if not changed.num_rows:
            return
    held = data.dataset.to_table(columns=list(key))  # (pyarrow filters no string views)
    held = held.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in held.schema]))
    if changed is not None:  # the rows of the changed keys only
        held = held.filter(pc.is_in(held.column(key[0]), pc.unique(changed.column(key[0]))))
    nulls = [c for c in key if held.column(c).null_count]
    if nulls:
        raise _bad_key(data.url, key, f"a row with a null {nulls[0]!r}")
    counted = held.group_by(list(key), use_threads=False).aggregate([([], "count_all")])
    twice = counted.filter(pc.greater(counted.column("count_all"), 1))
    if twice.num_rows:
        row = twice.slice(0, 1).to_pylist()[0]
        value = {k: row[k] for k in key}
        raise _bad_key(data.url, key, f"{row['count_all']} rows of key {value}")


def _bad_key(url: str, key: Sequence[str], found: str) -> InputError:
    return InputError(
        f"input {url!r} holds {found}; key columns {list(key)} must identify one row and "
        "never be null, as the output is merged on them: name columns that do (or run "
        "without key, which follows appends only)"
    )

"""Apache Iceberg tables as inputs, through pyiceberg (the ``iceberg`` extra).

A table is named ``iceberg:CATALOG.NAMESPACE.TABLE``, the catalog configured as
pyiceberg configures it (``.pyiceberg.yaml``, or ``PYICEBERG_CATALOG__<NAME>__URI``
and the like in the environment, read again for every table so that a process can
change them); an input may also be named by a metadata file
(``iceberg:s3://bucket/t/metadata/00003-....metadata.json``), read without a catalog.

The snapshot is pinned when the input is opened (the current one, a snapshot id, or
the one current at an ISO 8601 time) and recorded as the dataset's
:attr:`~scoring._formats.dataset.InputDataset.snapshot`, ``{"format": "iceberg", "version":
SNAPSHOT_ID}``, as a Delta table's version is.  The snapshot's data files are the
input's files, read by pyarrow as any Parquet file (Iceberg keeps the partition source
columns in the files, so partition values are columns already).  Position delete
files are applied: the rows they name are skipped as each file is read
(:attr:`~scoring._formats.dataset.InputDataset.deleted`).  Equality deletes, files that are not
Parquet, and files whose column names are not the table's (a column renamed after
they were written) are refused by name: pyarrow would read them wrong.

pyiceberg is imported only here, and only when an Iceberg table is named.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import (
    READ_FIX,
    ConfigError,
    DependencyError,
    InputError,
    InputFileError,
    ScoringError,
    cause_line,
    translated,
)

__all__ = [
    "ICEBERG", "PinnedScan", "TableRef", "appended", "catalog_of", "data_files", "is_iceberg",
    "kept_rows", "load_table", "parse", "pinned_scan", "pyiceberg", "refuse_renamed",
    "snapshot_time", "storage_url", "table_location",
]  # fmt: skip

#: The prefix that names an Iceberg table: ``iceberg:lake.sales.orders``.
ICEBERG = "iceberg:"
_EXTRA = "pip install 'scoring[iceberg]'"


@dataclass(frozen=True)
class TableRef:
    """An Iceberg table as named: through a catalog, or by its metadata file."""

    text: str  # as given, ``iceberg:`` included
    catalog: str | None = None
    identifier: tuple[str, ...] = ()  # namespace parts, then the table
    metadata: str | None = None  # a metadata file's location (read only)

    @property
    def name(self) -> str:
        return ".".join(self.identifier) if self.identifier else str(self.metadata)


def is_iceberg(url: Any) -> bool:
    return str(url).startswith(ICEBERG)


def parse(url: str) -> TableRef:
    """``iceberg:CATALOG.NS.TABLE`` or ``iceberg:<metadata file>``; refused by name
    otherwise."""
    text = str(url)
    rest = text[len(ICEBERG) :] if is_iceberg(text) else text
    if "/" in rest or rest.endswith(".metadata.json"):
        return TableRef(text, metadata=rest)
    parts = tuple(rest.split("."))
    if len(parts) < 3 or not all(parts):
        raise ConfigError(
            f"Iceberg table {text!r}: name it iceberg:CATALOG.NAMESPACE.TABLE (the catalog "
            "as configured in .pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__* variables), or "
            "give its metadata file's location"
        )
    return TableRef(text, catalog=parts[0], identifier=parts[1:])


def pyiceberg() -> Any:
    """The pyiceberg package, or the one-line error that says how to install it."""
    try:
        import pyiceberg.catalog
        import pyiceberg.exceptions
        import pyiceberg.table
    except ImportError:
        raise DependencyError(f"Iceberg tables need pyiceberg: {_EXTRA}") from None
    return pyiceberg


def catalog_of(ref: TableRef) -> Any:
    """The catalog ``ref`` names, its configuration read now (pyiceberg reads the
    environment once, when imported)."""
    module = pyiceberg()
    from pyiceberg.utils.config import Config

    name = str(ref.catalog)
    conf = Config().get_catalog_config(name.lower()) or {}
    if not conf:
        raise ConfigError(
            f"Iceberg catalog {name!r} is not configured: add it to .pyiceberg.yaml or set "
            f"PYICEBERG_CATALOG__{name.upper()}__URI (and __WAREHOUSE) in the environment"
        )
    try:  # a catalog that does not answer (its service, its database): a rerun may work
        with translated("table read", f"cannot open Iceberg catalog {name!r}", fix=READ_FIX):
            return module.catalog.load_catalog(name, **{k: str(v) for k, v in conf.items()})
    except ScoringError:
        raise
    except Exception as exc:  # its configuration: ValueError, ImportError (a driver), ...
        raise ConfigError(f"cannot open Iceberg catalog {name!r}: {cause_line(exc)}") from exc


def load_table(ref: TableRef) -> Any:
    """The table ``ref`` names, or None when its catalog has no such table."""
    module = pyiceberg()
    if ref.metadata is not None:
        try:
            return module.table.StaticTable.from_metadata(ref.metadata)
        except (OSError, ValueError) as exc:
            raise InputFileError(
                f"cannot read Iceberg metadata file {ref.metadata!r}: {cause_line(exc)}"
            ) from None
    try:
        return catalog_of(ref).load_table(ref.identifier)
    except module.exceptions.NoSuchTableError:
        return None
    except module.exceptions.NoSuchNamespaceError:
        return None


def table_location(ref: TableRef) -> str:
    """Where the table's files are: its own location, or where its catalog will put
    it when a run creates it (that is where the run stages its files)."""
    table = load_table(ref)
    if table is not None:
        return str(table.location()).rstrip("/")
    catalog = catalog_of(ref)
    namespace, name = ".".join(ref.identifier[:-1]), ref.identifier[-1]
    resolve = getattr(catalog, "_resolve_table_location", None)
    try:
        if resolve is not None:
            return str(resolve(None, namespace, name)).rstrip("/")
    except Exception:  # no namespace yet, no namespace location: the warehouse decides
        pass
    warehouse = catalog.properties.get("warehouse")
    if not warehouse:
        raise ConfigError(
            f"Iceberg table {ref.text!r} does not exist and catalog {ref.catalog!r} has no "
            "warehouse to create it in: set its warehouse property, or create the table first"
        )
    return f"{str(warehouse).rstrip('/')}/{namespace.replace('.', '/')}/{name}"


def storage_url(url: Any) -> str:
    """Where an input's or output's files are: an Iceberg table's location; any other
    location as given (a ``delta:`` prefix is the caller's to strip)."""
    text = str(url)
    if not is_iceberg(text):
        return text
    with translated("table read", f"cannot read Iceberg table {text!r}", fix=READ_FIX):
        return table_location(parse(text))


def appended(url: str, *, since: int, until: int, fix: str) -> list[str]:
    """The locations of the data files that the snapshots after ``since`` up to ``until``
    appended.  Each of those snapshots must be an append, and ``since`` an ancestor of
    ``until``; anything else (a delete, an overwrite, a rollback) is refused naming the
    snapshot and ``fix``."""
    with translated("table read", f"cannot read the snapshots of Iceberg table {url!r}",
                    fix=READ_FIX):  # fmt: skip
        return _appended(url, since=since, until=until, fix=fix)


def _appended(url: str, *, since: int, until: int, fix: str) -> list[str]:
    from pyiceberg.table.snapshots import Operation, ancestors_of

    ref = parse(url)
    table = load_table(ref)
    start, end = table.snapshot_by_id(since), table.snapshot_by_id(until)
    if start is None or end is None:
        raise InputError(
            f"input {ref.text!r} no longer has snapshot {since}, which the last run read "
            f"(expired or rolled back); {fix}"
        )
    chain = []  # newest first, ``since`` left out
    for snapshot in ancestors_of(end, table.metadata):
        if snapshot.snapshot_id == since:
            break
        chain.append(snapshot)
    else:
        raise InputError(
            f"input {ref.text!r}: snapshot {since}, which the last run read, is not an "
            f"ancestor of snapshot {until} (the table was rolled back or replaced); {fix}"
        )
    for snapshot in chain:
        operation = snapshot.summary.operation if snapshot.summary else None
        if operation != Operation.APPEND:
            said = operation.value if operation is not None else "unknown"
            raise InputError(
                f"input {ref.text!r}: snapshot {snapshot.snapshot_id} ({said}) changed rows "
                f"an earlier run scored; an incremental run follows appended snapshots "
                f"only; {fix}"
            )
    before = {f.file_path for f in data_files(table, since)}
    return [f.file_path for f in data_files(table, until) if f.file_path not in before]


def snapshot_time(snapshot: Any) -> str:
    return datetime.fromtimestamp(snapshot.timestamp_ms / 1000, timezone.utc).isoformat()


# -- input ------------------------------------------------------------------------------


@dataclass
class PinnedScan:
    """A table's snapshot as the Parquet input reads it
    (:func:`scoring._formats.dataset.open_input`)."""

    ref: TableRef
    table: Any
    snapshot_id: int
    location: str  # the table's, as a URL
    schema: pa.Schema  # the snapshot's, as the files hold it
    paths: list[str]  # its data files' locations, sorted
    #: A data file's location -> the positions its position delete files remove.
    deleted: dict[str, np.ndarray]
    #: Columns every partition spec of the table partitions by identity (each data
    #: file holds one value of each).
    identity: list[str]


def pinned_scan(url: str, *, version: int | str | None = None) -> PinnedScan:
    """The table's snapshot ``version`` (see :func:`_pinned`), its data files listed and
    their position deletes read; what cannot be read right is refused by name."""
    with translated("table read", f"cannot read Iceberg table {url!r}", fix=READ_FIX):
        return _pinned_scan(url, version=version)


def _pinned_scan(url: str, *, version: int | str | None) -> PinnedScan:
    ref = parse(url)
    table = load_table(ref)
    if table is None:
        raise InputFileError(f"input {ref.text!r}: catalog {ref.catalog!r} has no such table")
    snapshot = _pinned(table, version, ref)
    location = str(table.location()).rstrip("/")
    fs = fsspec.core.url_to_fs(location)[0]
    tasks = sorted(table.scan(snapshot_id=snapshot.snapshot_id).plan_files(),
                   key=lambda t: str(t.file.file_path))  # fmt: skip
    for task in tasks:
        _refuse_unread(task, ref)
    schemas = table.schemas()  # by id
    schema = schemas.get(snapshot.schema_id, table.schema()).as_arrow()
    deleted = {str(t.file.file_path): _deleted(t, fs) for t in tasks if t.delete_files}
    return PinnedScan(
        ref, table, int(snapshot.snapshot_id), location,
        pa.schema([pa.field(f.name, _plain(f.type)) for f in schema]),
        [str(t.file.file_path) for t in tasks],
        {path: rows for path, rows in deleted.items() if len(rows)},
        _identity(table, {t.file.spec_id for t in tasks}),
    )  # fmt: skip


def _identity(table: Any, spec_ids: set[int]) -> list[str]:
    """The columns that every partition spec among ``spec_ids`` (those of the
    snapshot's files) partitions by identity."""
    from pyiceberg.transforms import IdentityTransform

    schema, common, specs = table.schema(), None, table.specs()
    for spec in (specs[i] for i in spec_ids):
        names = {schema.find_column_name(f.source_id) for f in spec.fields
                 if isinstance(f.transform, IdentityTransform)}  # fmt: skip
        common = names if common is None else common & names
    return sorted(n for n in common or () if n)


def _pinned(table: Any, version: int | str | None, ref: TableRef) -> Any:
    """The snapshot asked for: the current one, a snapshot id, or the one current at an
    ISO 8601 time (naive means UTC)."""
    if version is None:
        snapshot = table.current_snapshot()
        if snapshot is None:
            raise InputError(f"input {ref.text!r} has no snapshot yet: nothing to score")
        return snapshot
    if isinstance(version, int) or str(version).lstrip("-").isdigit():
        snapshot = table.snapshot_by_id(int(version))
        if snapshot is None:
            known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-3:])
            raise InputFileError(
                f"Iceberg table {ref.text!r} has no snapshot {version} (its latest: "
                f"{known or 'none'}); ask for one of its snapshots or a time"
            )
        return snapshot
    try:
        at = datetime.fromisoformat(str(version))
    except ValueError:
        raise ConfigError(
            f"input version {version!r}: expected an Iceberg snapshot id or an ISO 8601 time"
        ) from None
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    snapshot = table.snapshot_as_of_timestamp(int(at.timestamp() * 1000))
    if snapshot is None:
        first = min(table.snapshots(), key=lambda s: s.timestamp_ms, default=None)
        since = f"its first was committed at {snapshot_time(first)}" if first else "it has none"
        raise InputFileError(
            f"Iceberg table {ref.text!r} has no snapshot at {version}: {since}; ask for a "
            "later time or a snapshot id"
        )
    return snapshot


def _refuse_unread(task: Any, ref: TableRef) -> None:
    """What pyarrow would read wrong: equality deletes, other formats, renamed columns."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    path = task.file.file_path
    if task.file.file_format != FileFormat.PARQUET:
        raise InputFileError(
            f"Iceberg table {ref.text!r}: data file {path!r} is {task.file.file_format.name}; "
            "only Parquet data files are read: rewrite the table's files as Parquet"
        )
    for delete in task.delete_files:
        if delete.content == DataFileContent.EQUALITY_DELETES:
            raise InputFileError(
                f"Iceberg table {ref.text!r} has equality deletes ({delete.file_path!r}), "
                "which are not applied here: rewrite the table's data files (e.g. Spark's "
                "rewrite_data_files) to fold them in, then score it"
            )


def refuse_renamed(scan: PinnedScan, pieces: Iterable[Any]) -> None:
    """A file whose columns carry Iceberg field ids under other names than the table's
    (renamed since it was written): pyarrow reads by name, so it would read it wrong."""
    with translated("table read", f"cannot read Iceberg table {scan.ref.text!r}", fix=READ_FIX):
        _refuse_renamed(scan, pieces)


def _refuse_renamed(scan: PinnedScan, pieces: Iterable[Any]) -> None:
    schema = scan.table.schema()
    for piece in pieces:
        for field in piece.physical_schema:
            field_id = (field.metadata or {}).get(b"PARQUET:field_id")
            if field_id is None:
                continue
            try:
                now = schema.find_field(int(field_id)).name
            except ValueError:  # a column dropped from the table since
                continue
            if now != field.name:
                raise InputFileError(
                    f"Iceberg table {scan.ref.text!r}: data file {piece.path!r} holds column "
                    f"{now!r} under its earlier name {field.name!r}; rewrite the table's "
                    "files (e.g. Spark's rewrite_data_files) to read it under its new name"
                )


def _deleted(task: Any, fs: Any) -> np.ndarray:
    """The positions a data file's position delete files remove, sorted."""
    path = str(task.file.file_path)
    found: list[np.ndarray] = []
    for delete in task.delete_files:
        with fs.open(delete.file_path, "rb") as f:
            rows = pq.read_table(f, columns=["file_path", "pos"])
        mine = rows.filter(pc.equal(rows.column("file_path"), path))
        found.append(mine.column("pos").to_numpy())
    return np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)


def kept_rows(batch: pa.RecordBatch, start: int, deleted: np.ndarray) -> pa.RecordBatch:
    """``batch`` (rows ``start``... of its file) without the rows at ``deleted``."""
    end = start + batch.num_rows
    lo, hi = np.searchsorted(deleted, [start, end])
    if lo == hi:
        return batch
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[deleted[lo:hi] - start] = False
    return batch.filter(pa.array(keep))


def _plain(kind: pa.DataType) -> pa.DataType:
    """pyiceberg's large types as the plain ones the files hold."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    return kind


def data_files(table: Any, snapshot_id: int | None = None) -> Iterable[Any]:
    """The data files of a snapshot (the current one by default)."""
    if snapshot_id is None and table.current_snapshot() is None:
        return []
    return [t.file for t in table.scan(snapshot_id=snapshot_id).plan_files()]

"""Where a run writes: the publisher for its output's format, a table output's
partition columns, the input version an interrupted run pinned, and the output's own
filesystem failures as one line.  :func:`~scoring._engines.base.plan_run` checks all of
this before a byte is written."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import fsspec
import pyarrow as pa

from .._formats import FORMATS, Opening, Publisher, format_named
from .._formats.dataset import InputDataset, glob_base, open_input
from .._formats.iceberg_catalog import storage_url
from ..errors import ConfigError, OutputError, ScoringError

__all__ = ["check_apart", "output_failures", "partitions_of", "pinned", "publisher_for"]


def publisher_for(output: str, *, output_format: str, opening: Opening) -> Publisher:
    """The output's publisher, by its format, opened as the run's :class:`Opening` says."""
    return format_named(output_format).open(output, opening)


def partitions_of(
    data: InputDataset, columns: list[str], *, keep: Sequence[str], output_format: str,
    own_committer: bool, mode: str | None,
) -> dict[str, pa.DataType]:  # fmt: skip
    """A table output's partition columns and their types.  Each must be a kept column;
    where the product writes the files, one that partitions the input (its ``key=value``
    folders or Delta partitions), so that each input file, hence each output file, lies
    in one partition (an engine with its own committer, Spark's, partitions by value)."""
    if mode == "overwrite_partitions" and not columns:
        raise ConfigError(
            "mode 'overwrite_partitions' replaces the partitions a run writes: name the "
            "output's partition columns (partition_by)"
        )
    if not columns:
        return {}
    kind = format_named(output_format)
    if not kind.partitions:
        tables = " or ".join(f.name for f in FORMATS.values() if f.partitions)
        raise ConfigError(
            f"partition_by needs a table output (format {tables}): a {kind.label} output "
            "keeps its input's key=value folders as they are"
        )
    if own_committer and not kind.mixed_partitions:
        raise ConfigError(
            f"partition_by of an {kind.label} output: the Spark engine's files mix partitions, "
            f"which an {kind.label} partition cannot hold; use the local or Ray engine, or drop "
            "partition_by"
        )
    for column in columns:
        if column not in keep:
            raise ConfigError(f"partition_by {column!r} must be a kept column (add it to keep)")
        if own_committer:  # Spark partitions its write by value: any kept column will do
            continue
        if column in data.file_partitions:  # one value per file: an Iceberg partition's
            continue
        if column not in data.partition_columns:
            raise ConfigError(
                f"partition_by {column!r} must partition the input (key=value folders, or "
                "a Delta or Iceberg table's identity partitions; the input's are "
                f"{[*data.partition_columns, *data.file_partitions] or 'none'})"
            )
        unnamed = [f.relpath for f in data.fragments if f"{column}=" not in f.relpath]
        if unnamed:
            raise ConfigError(
                f"partition_by {column!r}: input file {unnamed[0]!r} is not in a "
                f"{column}=... folder, which names its output's partition"
            )
    return {c: data.schema.field(c).type for c in columns}


def pinned(data: InputDataset, publisher: Publisher) -> InputDataset:
    """A versioned input (a Delta table) at the version an interrupted run of this job
    read (its journal holds files of that version), else as opened.  Only a rerun
    asking for the same version (or, both, the latest) resumes that snapshot: one
    asking for another reads what it asked for, and the staged files are discarded."""
    pinned = publisher.journal.pinned_input() if data.snapshot is not None else None
    if pinned is None or pinned.pop("requested", None) != data.requested_version:
        return data
    if data.snapshot != pinned:
        reopened = open_input(data.url, version=int(pinned["version"]), empty=True)
        reopened.requested_version = data.requested_version
        return reopened
    return data


@contextmanager
def output_failures(output: str) -> Iterator[None]:
    """An OSError on the output's own files (a full disk, no permission, a file where a
    folder must be) as one line naming the output, the path and the fix."""
    try:
        yield
    except OSError as exc:
        path = str(exc.filename or "")
        root = fsspec.core.url_to_fs(storage_url(output))[1].rstrip("/")
        if isinstance(exc, ScoringError) or not path or not path.startswith(root):
            raise
        raise OutputError(
            f"output {output!r} cannot be written ({exc.strerror or exc}: {path}); free "
            "space or grant permission there, or choose another output"
        ) from exc


def check_apart(input_url: str, output_url: str) -> None:
    """An output inside the input (or the reverse) would be read back as input: compared
    as the filesystem sees them (relative, ``./``, ``file://``; a glob by its folder)."""
    urls = (storage_url(u) for u in (input_url, output_url))  # an Iceberg table's location
    (fs_a, a), (fs_b, b) = (fsspec.core.url_to_fs(u) for u in urls)
    a, b = (glob_base(p).rstrip("/") + "/" for p in (a, b))
    if fs_a.protocol == fs_b.protocol and (a.startswith(b) or b.startswith(a)):
        raise ConfigError(
            f"output {output_url!r} and input {input_url!r} overlap; write the scores "
            "outside the input"
        )

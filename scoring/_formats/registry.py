"""Every output format by the name a job gives it, with what it can do.

A format is one module (:mod:`~scoring._formats.folder`, :mod:`~scoring._formats.delta`,
:mod:`~scoring._formats.iceberg`) and one :class:`Format` here: its publisher and its
capabilities.  The engines, the job file, the CLI and the docs ask this registry what a
format can do instead of naming formats; adding a format is its module and its entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .publication import FOLDER_MODES, INCREMENTAL, TABLE_MODES, Opening, Publisher

__all__ = ["DEFAULT_FORMAT", "FORMATS", "Format", "format_named", "format_of"]


@dataclass(frozen=True)
class Format:
    """An output format: ``name`` (a job's ``format``), ``label`` (how messages name it:
    "a Parquet output"), its publisher (``open``) and ``modes``, and what it can do."""

    name: str
    label: str
    #: The prefix a location names it by (``delta:``); "" for none.
    prefix: str
    #: Its module in this package and the functions there opening its publisher and
    #: (a table's) reading it as an input: the module is imported when a table of the
    #: format is opened, not to name it.  A folder is read by :mod:`.dataset` itself.
    publisher: str
    reader: str
    modes: tuple[str, ...]
    #: Published as one commit to a table (else a folder, ``_SUCCESS`` last).
    table: bool
    #: ``partition_by``: the output's partitions follow the kept columns named.
    partitions: bool
    #: The files leave their partition columns to ``key=value`` folders.
    folder_partitions: bool
    #: A partition may take files holding several of its values (an engine's own
    #: committer's, Spark's, which partitions by value).
    mixed_partitions: bool
    #: An incremental run merges updated and deleted rows on its key columns.
    merges: bool
    #: Read at a version or a time (``input_version``), and followed by an incremental run
    #: through what changed since: a change data feed (``feed``) or appended snapshots
    #: (``appends``); a folder's by its new files (``files``).
    time_travel: bool
    changes: str

    def open(self, output: str, opening: Opening) -> Publisher:
        """The output's publisher, opened as the run's :class:`Opening` says."""
        opened: Publisher = _function(self.publisher)(output, opening)
        return opened

    def read(self, url: str, *, version: int | str | None, empty: bool) -> Any:
        """A table of this format as an input (an
        :class:`~scoring._formats.dataset.InputDataset`, which reads through this
        registry), at ``version`` (None: its latest)."""
        return _function(self.reader)(url, version=version, empty=empty)


def _function(name: str) -> Any:
    """``module:function`` of this package, the module imported now."""
    module, function = name.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


_TABLE_MODES = (*TABLE_MODES, INCREMENTAL)
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("parquet", "Parquet", prefix="", publisher="folder:open_folder", reader="",
           modes=FOLDER_MODES, table=False, partitions=False, folder_partitions=False,
           mixed_partitions=False, merges=False, time_travel=False, changes="files"),
    Format("delta", "Delta", prefix="delta:", publisher="delta:open_delta",
           reader="delta:read_delta", modes=_TABLE_MODES, table=True, partitions=True,
           folder_partitions=True, mixed_partitions=True, merges=True, time_travel=True,
           changes="feed"),
    Format("iceberg", "Iceberg", prefix="iceberg:", publisher="iceberg:open_iceberg",
           reader="iceberg:read_iceberg", modes=_TABLE_MODES, table=True, partitions=True,
           folder_partitions=False, mixed_partitions=False, merges=False, time_travel=True,
           changes="appends"),
)}  # fmt: skip
#: The format of an output named by a path alone.
DEFAULT_FORMAT = "parquet"


def format_named(name: str) -> Format:
    """The format a job names, or the one-line refusal naming them all."""
    if name not in FORMATS:
        raise ConfigError(f"output format {name!r}: expected {' or '.join(FORMATS)}")
    return FORMATS[name]


def format_of(location: Any) -> str:
    """The format a location names by its prefix (``delta:URL``,
    ``iceberg:CATALOG.NAMESPACE.TABLE``), else the default, a Parquet folder."""
    text = str(location)
    return next((f.name for f in FORMATS.values() if f.prefix and text.startswith(f.prefix)),
                DEFAULT_FORMAT)  # fmt: skip

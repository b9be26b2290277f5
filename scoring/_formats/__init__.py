"""The formats a run reads and writes: Parquet folders, Delta tables and Iceberg tables.

A format is one module: :mod:`.folder`, or a table's (:mod:`.delta`, :mod:`.iceberg`)
holding what reads a snapshot as an input and what commits a run, the lifecycle they
share being :mod:`.table`'s.  :mod:`.registry` names each with what it can do; the rest
of the product asks it.  :mod:`.dataset` opens any input (a folder itself, a table
through its format's reader); :mod:`.publication` is the publisher protocol.
"""

from .publication import INCREMENTAL, Opening, Publisher, Target
from .registry import DEFAULT_FORMAT, FORMATS, Format, format_named, format_of

__all__ = [
    "DEFAULT_FORMAT", "FORMATS", "INCREMENTAL", "Format", "Opening", "Publisher", "Target",
    "format_named", "format_of",
]  # fmt: skip

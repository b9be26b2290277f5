"""The formats a run reads and writes: Parquet folders, Delta tables and Iceberg tables.

Reading: :mod:`.dataset` opens any input as its files (a Delta or Iceberg table's at a
pinned snapshot, :mod:`.iceberg_catalog` and :mod:`.delta_cdf` the tables' own reads).
Writing: a format's publisher (:mod:`.publication`): :mod:`.folder` (``_SUCCESS``
last), and the one commit of :mod:`.table` over :mod:`.delta` or :mod:`.iceberg`.
:mod:`.registry` names each with what it can do; the rest of the product asks it.
"""

from .publication import INCREMENTAL, Opening, Publisher, Target
from .registry import DEFAULT_FORMAT, FORMATS, Format, format_named, format_of

__all__ = [
    "DEFAULT_FORMAT", "FORMATS", "INCREMENTAL", "Format", "Opening", "Publisher", "Target",
    "format_named", "format_of",
]  # fmt: skip

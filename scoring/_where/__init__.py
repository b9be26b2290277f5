"""Row filters: SQL over an input's columns with Spark SQL's meaning, applied per batch.

:mod:`.filter` parses a filter with sqlglot and binds it to a schema (``RowFilter``);
:mod:`.translate` turns it into one Arrow expression (logic, comparisons, IN, BETWEEN,
ANSI failures), over :mod:`.functions` (functions, casts, arithmetic, CASE) and
:mod:`.types` (Spark's types), with :mod:`.udfs` where Arrow's functions differ.
"""

from .filter import SUPPORTED, RowFilter

__all__ = ["SUPPORTED", "RowFilter"]

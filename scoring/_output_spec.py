"""``scoring.Output``: where a run writes and how, in one value.

The location, the format (a Parquet folder or a Delta table), the mode and a Delta
table's partition columns used to be four loose parameters of ``score_parquet`` (five,
with ``overwrite``), two of them saying the same thing twice.  They are one record now;
the loose spellings still work for a release and warn, naming this one.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._dataset import without_delta_prefix
from .errors import ConfigError

__all__ = ["DEPRECATED", "Output", "output_of"]


@dataclass(frozen=True)
class Output:
    """Where and how a run writes.  ``format``: ``"parquet"`` (a folder, published with
    ``_SUCCESS`` last) or ``"delta"`` (one commit to a Delta table); by default a
    ``delta:`` location is a Delta table, any other a folder.  ``mode``: ``"error"``
    (the default: refuse an output holding another run), ``"overwrite"``, and for a
    Delta table also ``"append"`` and ``"overwrite_partitions"`` (only the partitions
    this run writes are replaced).  ``partition_by``: a Delta table's partition columns,
    kept columns that partition the input."""

    location: str | os.PathLike[str]
    format: str | None = None  # "parquet" or "delta" (refused by name otherwise)
    mode: str | None = None
    partition_by: Sequence[str] = ()

    @property
    def url(self) -> str:
        """The location without a ``delta:`` prefix."""
        return without_delta_prefix(str(self.location))[0]

    @property
    def kind(self) -> str:
        """The format, as asked or as the location says."""
        return self.format or (
            "delta" if without_delta_prefix(str(self.location))[1] else "parquet"
        )


#: The loose spellings of ``score_parquet`` and what each is now.
DEPRECATED = {
    "overwrite": "mode='overwrite'",
    "output_format": "format=...",
    "mode": "mode=...",
    "partition_by": "partition_by=[...]",
}


def output_of(output: str | os.PathLike[str] | Output, loose: Mapping[str, Any]) -> Output:
    """``output`` as an :class:`Output`, with the loose spellings ``loose`` (each warned
    about once, naming its new one); a keyword that is none of them is refused as Python
    refuses one."""
    unknown = sorted(set(loose) - set(DEPRECATED))
    if unknown:
        raise TypeError(f"score_parquet() got an unexpected keyword argument {unknown[0]!r}")
    for name in loose:
        warnings.warn(
            f"score_parquet({name}=...) is deprecated; pass "
            f"output=scoring.Output(location, {DEPRECATED[name]}) instead",
            DeprecationWarning,
            stacklevel=3,
        )
    if not loose:
        return output if isinstance(output, Output) else Output(output)
    if isinstance(output, Output):
        raise ConfigError(
            f"score_parquet: {', '.join(sorted(loose))} given beside output=scoring.Output(...); "
            "give them in the Output only"
        )
    mode = loose.get("mode") or ("overwrite" if loose.get("overwrite") else None)
    return Output(output, format=loose.get("output_format"), mode=mode,
                  partition_by=tuple(loose.get("partition_by") or ()))  # fmt: skip

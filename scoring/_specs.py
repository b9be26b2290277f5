"""``scoring.Input``, ``scoring.Output`` and ``scoring.RunOptions``: a run's parameters
grouped by what they are about, one value each.

``score_parquet`` once took twenty loose parameters, two pairs of them saying the same
thing twice (``overwrite=True`` and ``mode="overwrite"``, ``output_format="delta"`` and a
``delta:`` prefix).  What is read (location, pinned version), what is written (location,
format, mode, partition columns) and how the run is watched (verify, drift monitor,
callbacks) are one record each now, as delta-rs groups ``write_deltalake``'s properties.
The loose spellings still work for a release and warn, naming the new one.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from pydantic import InstanceOf, StrictBool, StrictInt, StrictStr, TypeAdapter, ValidationError

from ._drift import Profile
from ._formats import format_of
from ._formats.dataset import InputDataset, without_delta_prefix
from .errors import ConfigError

__all__ = ["DEPRECATED", "Input", "Output", "RunOptions", "specs_of", "validated"]

_Spec = TypeVar("_Spec", "Input", "Output", "RunOptions")
_T = TypeVar("_T")


class _Located:
    """A record naming a location, which may carry a ``delta:`` prefix."""

    location: StrictStr | os.PathLike[str] | InstanceOf[InputDataset]

    @property
    def url(self) -> str:
        """The location without a ``delta:`` prefix."""
        if isinstance(self.location, InputDataset):
            return self.location.url
        return without_delta_prefix(str(self.location))[0]


@dataclass(frozen=True)
class Input(_Located):
    """What a run reads.  ``location``: a Parquet file, folder or glob, or a Delta table
    (a folder holding ``_delta_log``, or ``delta:URL``); or an input already opened (a
    job's planner opens it once).  ``version``: a Delta table's version to read, or an
    ISO 8601 time (the version current then); by default its latest.  The version read
    is recorded in the manifest and the commit.

    ``incremental``: score only what changed since the output's last complete run of
    this job (new files of a folder; a Delta table's changes between the version that
    run read and this one), adding to that output; a run with another model, outputs or
    kept columns, or no earlier run, scores everything and replaces it (see
    :mod:`scoring._changes`).  ``on_changed``: an input file that changed or is gone
    since that run is refused by name (``"refuse"``) or rescored (``"rescore"``).

    ``filter``: a SQL condition on input columns (``"region IN ('EU', 'CH') AND signup
    >= DATE '2026-01-01'"``, see :mod:`scoring._where`): only the rows where it holds are
    read, scored and written.  The Parquet reader skips the row groups whose statistics
    rule it out."""

    location: StrictStr | os.PathLike[str] | InstanceOf[InputDataset]
    version: StrictInt | StrictStr | None = None
    incremental: StrictBool = False
    on_changed: StrictStr = "refuse"  # ON_CHANGED (refused by name otherwise)
    filter: StrictStr | None = None


@dataclass(frozen=True)
class Output(_Located):
    """Where and how a run writes.  ``format``: ``"parquet"`` (a folder, published with
    ``_SUCCESS`` last) or ``"delta"`` (one commit to a Delta table); by default a
    ``delta:`` location is a Delta table, any other a folder.  ``mode``: ``"error"``
    (the default: refuse an output holding another run), ``"overwrite"``, and for a
    Delta table also ``"append"`` and ``"overwrite_partitions"`` (only the partitions
    this run writes are replaced).  ``partition_by``: a Delta table's partition columns,
    kept columns that partition the input.  ``key``: kept columns that identify a row:
    an incremental run merges a Delta table on them, replacing the rows of updated
    input rows and removing those of deleted ones."""

    location: StrictStr | os.PathLike[str]
    format: StrictStr | None = None  # the publishers' names (refused by name otherwise)
    mode: StrictStr | None = None  # each publisher's modes (likewise)
    partition_by: Sequence[StrictStr] = ()
    key: Sequence[StrictStr] = ()

    @property
    def kind(self) -> str:
        """The format, as asked or as the location says."""
        return self.format or format_of(self.location)


@dataclass(frozen=True)
class RunOptions:
    """How a run is checked and watched.  ``verify``: a rerun into a complete output
    hashes its files against the manifest's sha256 (else sizes are compared) and
    rescores those that differ.  ``monitor``: a reference profile
    (:mod:`scoring._drift`); each file's rows are counted into its bins, and the
    report's ``drift_counts`` sums them.  ``on_progress(seconds, rows)`` is called as
    rows are written.  ``before_publish(report)`` sees the run's report once every file
    is written, before anything is published: an error it raises publishes nothing (the
    files stay journaled for a rerun)."""

    verify: StrictBool = False
    monitor: Profile | None = None
    on_progress: Callable[[float, int], None] | None = None
    # given the run's ScoreReport (the engines sit above this module: Any here)
    before_publish: Callable[[Any], None] | None = None


#: The loose spellings of ``score_parquet``: the record each now belongs to, its field
#: there, and how the warning spells the new way.
DEPRECATED: dict[str, tuple[str, str, str]] = {
    "overwrite": ("output", "mode", "output=scoring.Output(location, mode='overwrite')"),
    "output_format": ("output", "format", "output=scoring.Output(location, format=...)"),
    "mode": ("output", "mode", "output=scoring.Output(location, mode=...)"),
    "partition_by": ("output", "partition_by",
                     "output=scoring.Output(location, partition_by=[...])"),
    "input_version": ("input", "version", "input=scoring.Input(location, version=...)"),
    "verify": ("run", "verify", "run=scoring.RunOptions(verify=...)"),
    "monitor": ("run", "monitor", "run=scoring.RunOptions(monitor=...)"),
    "on_progress": ("run", "on_progress", "run=scoring.RunOptions(on_progress=...)"),
    "before_publish": ("run", "before_publish",
                       "run=scoring.RunOptions(before_publish=...)"),
}  # fmt: skip


def specs_of(
    input: Any, output: str | os.PathLike[str] | Output, run: RunOptions | None,
    loose: Mapping[str, Any],
) -> tuple[Input, Output, RunOptions]:  # fmt: skip
    """``input`` (a location, an opened input or an :class:`Input`), ``output`` and ``run`` as
    records, with the loose spellings ``loose`` folded in (each warned about, naming its
    new one).  A keyword that is none of them is refused as Python refuses one; a loose
    spelling beside the record it belongs to is refused by name."""
    unknown = sorted(set(loose) - set(DEPRECATED))
    if unknown:
        raise TypeError(f"score_parquet() got an unexpected keyword argument {unknown[0]!r}")
    for name in loose:
        warnings.warn(f"score_parquet({name}=...) is deprecated; pass {DEPRECATED[name][2]} "
                      "instead", DeprecationWarning, stacklevel=3)  # fmt: skip
    given = {"input": input, "output": output, "run": run}
    clash = sorted(
        n for n in loose if isinstance(given[DEPRECATED[n][0]], _RECORDS[DEPRECATED[n][0]])
    )
    if clash:
        record = DEPRECATED[clash[0]][0]
        kind = _RECORDS[record].__name__
        raise ConfigError(f"score_parquet: {', '.join(clash)} given beside {record}="
                          f"scoring.{kind}(...); give them in the {kind} only")  # fmt: skip
    return (
        _checked(_folded(input, "input", loose)),
        _checked(_folded(output, "output", loose)),
        _checked(_folded(run or RunOptions(), "run", loose)),
    )


def _checked(spec: _Spec) -> _Spec:
    """``spec`` with its fields' types checked by pydantic, as every option is (the
    engines' options, a job file): one line naming the record, the field and the value.
    Which format, mode or partition column is valid is the publisher's to say."""
    values = {f.name: getattr(spec, f.name) for f in fields(spec)}

    def said(key: str, why: str) -> str:
        return f"scoring.{type(spec).__name__}({key}={values.get(key)!r}): {why}"

    validated(_ADAPTERS[type(spec)].validate_python, values, said=said)
    return spec


def validated(validate: Callable[[Any], _T], values: Mapping[str, Any], *,
              said: Callable[[str, str], str]) -> _T:  # fmt: skip
    """``validate(values)`` (a pydantic model's or adapter's); its first error as one
    :class:`ConfigError` line, ``said(key, why)``."""
    try:
        return validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(said(str(error["loc"][0]), error["msg"])) from None


def _folded(value: Any, name: str, loose: Mapping[str, Any]) -> Any:
    """``value`` as the record ``name`` names, with the loose spellings that belong to it
    set."""
    record = _RECORDS[name]
    spec: Any = value if isinstance(value, record) else record(value)
    changes = {DEPRECATED[k][1]: v for k, v in loose.items()
              if DEPRECATED[k][0] == name and k != "overwrite"}  # fmt: skip
    if name == "output" and loose.get("overwrite") and not loose.get("mode"):
        changes["mode"] = "overwrite"  # overwrite=True was mode="overwrite"
    if "partition_by" in changes:
        changes["partition_by"] = tuple(changes["partition_by"] or ())
    return replace(spec, **changes) if changes else spec


#: The records, by the parameter of ``score_parquet`` that takes each.
_RECORDS: dict[str, type] = {"input": Input, "output": Output, "run": RunOptions}
_ADAPTERS: dict[type, TypeAdapter[Any]] = {kind: TypeAdapter(kind) for kind in _RECORDS.values()}

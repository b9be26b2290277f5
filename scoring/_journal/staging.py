"""What a run was given, kept beside its staged files, and what a rerun given something
else does with them.

``_temporary/_scoring_run.json`` is written when a run plans its output, before any file
is staged.  It names the job key (model sha256, kept columns, outputs), the output
format, the input and the version asked of it, the Delta mode, the engine and its
options, ``verify``, a Delta run's id, and whether publication began.  It is also what
proves the staging folder scoring's: a ``_temporary`` holding neither it nor a journal
was written by someone else (Spark's own committer uses that name) and is never removed.

A rerun compares what it is given with the record, setting by setting:

- all the same: it resumes from the journal, as always;
- a setting that changes what the files hold (:data:`CONTENT`) differs: the staged files
  are discarded and the run scores afresh, saying which setting changed; once the
  interrupted run began publishing, some of its files may already be in place, so it is
  refused by name instead (finish it with its own settings first);
- any other setting differs (mode, engine, options, verify): the staged files are what
  this run writes too, so they are kept, the new value applies, and the message says so.

A rerun never silently takes the interrupted run's value of anything.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OutputError

__all__ = ["CONTENT", "RECORD", "Rerun", "compare", "owned", "refuse_publishing", "say"]

RECORD = "_scoring_run.json"
#: The record of earlier versions' Delta runs (run id, mode, job key).
LEGACY_RECORDS = ("_delta_run.json",)
#: Settings that change what a staged file holds: a rerun differing in one rescores.
CONTENT = ("job_key", "format", "input", "input_version", "partition_by")
#: What each setting is called in a message.
NAMES = {"job_key": "model, kept columns or outputs", "format": "output format",
         "input": "input", "input_version": "input version", "mode": "mode",
         "partition_by": "partition columns",
         "engine": "engine", "engine_options": "engine options", "verify": "verify"}  # fmt: skip

log = logging.getLogger("scoring.output")


@dataclass(frozen=True)
class Rerun:
    """What a rerun does with an interrupted run's staging: ``discard`` it (and why), or
    keep it with ``changed`` settings taking their new values."""

    discard: list[str]
    changed: list[str]


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> Rerun:
    """The settings in which ``new`` differs from the record ``old`` (a setting the
    record lacks, written by an earlier version, is taken as unchanged)."""
    differ = [k for k in new if k in old and _plain(old[k]) != _plain(new[k])]
    return Rerun(discard=[k for k in differ if k in CONTENT],
                 changed=[k for k in differ if k not in CONTENT])  # fmt: skip


def _plain(value: Any) -> Any:
    """A value as its record holds it (JSON), so a tuple equals the list read back."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def describe(keys: list[str], old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    return ", ".join(f"{NAMES.get(k, k)} {_shown(k, old)} -> {_shown(k, new)}" for k in keys)


def _shown(key: str, values: Mapping[str, Any]) -> str:
    value = values.get(key)
    if key == "job_key":
        return f"job {value}"
    return "latest" if value is None and key == "input_version" else json.dumps(value, default=str)


def refuse_publishing(url: str, keys: list[str], old: Mapping[str, Any],
                      new: Mapping[str, Any]) -> OutputError:  # fmt: skip
    return OutputError(
        f"output {url!r}: an interrupted run was publishing with other settings "
        f"({describe(keys, old, new)}); finish it first by rerunning it with its own "
        "settings, then run this one"
    )


#: What a rerun says it does with the staged files, by whether it discards them.
_SAID = {
    True: "output %s: discarding %d file(s) staged by an interrupted run with other "
    "settings (%s); this run scores afresh",
    False: "output %s: resuming an interrupted run's %d staged file(s) with this run's "
    "settings (%s)",
}


def say(url: str, keys: list[str], old: Mapping[str, Any], new: Mapping[str, Any],
        files: int, *, discarded: bool) -> None:  # fmt: skip
    log.warning(_SAID[discarded], url, files, describe(keys, old, new))


def owned(names: list[str]) -> bool:
    """A staging folder's top-level names prove it scoring's: its record (or an earlier
    version's), or a journal."""
    return any(n in (RECORD, *LEGACY_RECORDS, "_journal") for n in names) or not names

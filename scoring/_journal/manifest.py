"""``_scoring_manifest.json``: what a published output holds, as typed records.

A manifest names the job (its key: model sha256, kept columns, outputs), the rows, the
input fragments read and the output files with their size and sha256.  Where the
product wrote the files, each fragment's journal entry (:class:`~scoring._journal.journal.Entry`)
names its own file; where an engine's own committer wrote them (Spark's), the fragments
are :class:`InputRecord` and the files are listed apart (``files``).  The JSON keeps one
key order, so the same run writes the same bytes (but for ``committed_at``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .journal import Entry

__all__ = ["FORMAT_VERSION", "MANIFEST", "PREVIOUS", "SUCCESS", "FileRecord", "InputRecord",
           "Manifest"]  # fmt: skip

MANIFEST = "_scoring_manifest.json"
SUCCESS = "_SUCCESS"
FORMAT_VERSION = 1
#: Where the files of a previous output wait while a new one is published over it.
PREVIOUS = "_temporary/_previous"


@dataclass(frozen=True)
class InputRecord:
    """An input fragment an engine's own committer scored (its files listed apart)."""

    relpath: str
    input: str
    fingerprint: str
    rows: int


@dataclass(frozen=True)
class FileRecord:
    """An output file: its name in the output, rows, sha256 and size."""

    output: str
    rows: int
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Manifest:
    job_key: str
    job: dict[str, Any]
    committed_at: str
    rows: int
    fragments: list[Entry] | list[InputRecord]
    #: The files an engine's own committer wrote (None: each fragment names its file).
    files: list[FileRecord] | None = None
    metadata: dict[str, str] | None = None
    #: The input version read (a Delta table's), where the input has versions.
    input_snapshot: dict[str, Any] | None = None
    format_version: int = FORMAT_VERSION
    #: The input it read (an incremental run follows the same input only).
    input: str | None = None
    #: A Delta run's id and mode (its manifest is the table's log; this one is returned).
    run: str | None = None
    mode: str | None = None
    #: Keys an earlier or later version wrote, kept as they were.
    other: dict[str, Any] = field(default_factory=dict)

    def published(self) -> list[FileRecord]:
        """The output files this manifest records."""
        if self.files is not None:
            return list(self.files)
        return [FileRecord(e.output, e.rows, e.sha256, e.bytes)
                for e in self.fragments if isinstance(e, Entry)]  # fmt: skip

    def names(self) -> list[str]:
        """The files it records, by the name each has in the output: a file set aside
        under ``_previous/`` by its own."""
        return [f.output.removeprefix(f"{PREVIOUS}/") for f in self.published()]

    def set_aside(self, names: set[str]) -> Manifest:
        """This manifest with the files ``names`` read from ``_previous/``."""

        def moved(output: str) -> str:
            return f"{PREVIOUS}/{output}" if output in names else output

        if self.files is not None:
            return replace(self, files=[replace(f, output=moved(f.output)) for f in self.files])
        entries = [e for e in self.fragments if isinstance(e, Entry)]
        return replace(self, fragments=[replace(e, output=moved(e.output)) for e in entries])

    def restored(self, names: set[str]) -> Manifest:
        """This manifest with the files ``names`` read from their own names again (the
        inverse of :meth:`set_aside`)."""

        def back(output: str) -> str:
            name = output.removeprefix(f"{PREVIOUS}/")
            return name if name in names else output

        if self.files is not None:
            return replace(self, files=[replace(f, output=back(f.output)) for f in self.files])
        entries = [e for e in self.fragments if isinstance(e, Entry)]
        return replace(self, fragments=[replace(e, output=back(e.output)) for e in entries])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format_version": self.format_version,
            "job_key": self.job_key,
            "job": self.job,
            "committed_at": self.committed_at,
            "rows": self.rows,
            "fragments": [asdict(f) for f in self.fragments],
        }
        optional = {"files": None if self.files is None else [asdict(f) for f in self.files],
                    "metadata": self.metadata, "input_snapshot": self.input_snapshot,
                    "input": self.input, "run": self.run, "mode": self.mode}  # fmt: skip
        out.update({k: v for k, v in optional.items() if v is not None})
        return {**out, **self.other}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Manifest:
        raw = dict(json.loads(data))
        files = raw.pop("files", None)
        fragments = raw.pop("fragments", [])
        kind: type[Entry] | type[InputRecord] = InputRecord if files is not None else Entry
        known = {k: raw.pop(k) for k in list(raw) if k in _SCALARS}
        return cls(
            fragments=[_record(kind, f) for f in fragments],
            files=None if files is None else [_record(FileRecord, f) for f in files],
            **known, other=raw,
        )  # fmt: skip


_SCALARS = ("job_key", "job", "committed_at", "rows", "metadata", "input_snapshot",
            "input", "format_version", "run", "mode")  # fmt: skip


def _record(kind: type[Any], values: dict[str, Any]) -> Any:
    """A record from its JSON (keys it does not have, from another version, dropped)."""
    return kind(**{k: v for k, v in values.items() if k in kind.__dataclass_fields__})

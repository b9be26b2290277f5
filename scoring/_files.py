"""A run's files: the input file a run scores (:class:`Fragment`), and questions about
files that never swallow an interruption (:func:`exists`).

fsspec's ``exists`` answers False for *any* exception raised while it asks, a bare
``except:`` that also takes KeyboardInterrupt and the SIGTERM a command raises where
Ctrl-C would: a signal landing there was lost, and the run went on believing a staged
or published file gone (the report: a SIGTERM during publication ended in "Bad file
descriptor" instead of the stop it asked for).  Here only "not found" means no.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FINGERPRINT", "Fragment", "exists"]

#: What marks a fingerprint holding evidence of the file's content.
FINGERPRINT = "c-"


def exists(fs: Any, path: str) -> bool:
    """Whether ``path`` exists; errors other than "not found" are raised, as are
    KeyboardInterrupt and the signals a command turns into exceptions."""
    try:
        fs.info(path)
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class Fragment:
    """One input file: its rows (from the footer) and where its output goes."""

    index: int
    path: str
    relpath: str  # relative to the input's base directory; names the output file
    rows: int
    #: Path, size, modification time and evidence of the content (the Parquet footer,
    #: an object store's ETag, a local file's change time): a changed file is rescored,
    #: even one rewritten at its old size with its old mtime restored (``cp -p``).
    fingerprint: str
    size: int = 0  # bytes
    #: The fingerprint an earlier version recorded (path, size and mtime alone).
    legacy: str = ""

    def same_as(self, fingerprint: str) -> bool:
        """Whether a recorded ``fingerprint`` is this file's (either form)."""
        return fingerprint == self.fingerprint or (
            not fingerprint.startswith(FINGERPRINT) and fingerprint == self.legacy
        )

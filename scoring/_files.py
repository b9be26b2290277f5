"""Questions about an output's files that never swallow an interruption.

fsspec's ``exists`` answers False for *any* exception raised while it asks, a bare
``except:`` that also takes KeyboardInterrupt and the SIGTERM a command raises where
Ctrl-C would: a signal landing there was lost, and the run went on believing a staged
or published file gone (the report: a SIGTERM during publication ended in "Bad file
descriptor" instead of the stop it asked for).  Here only "not found" means no.
"""

from __future__ import annotations

from typing import Any

__all__ = ["exists"]


def exists(fs: Any, path: str) -> bool:
    """Whether ``path`` exists; errors other than "not found" are raised, as are
    KeyboardInterrupt and the signals a command turns into exceptions."""
    try:
        fs.info(path)
    except FileNotFoundError:
        return False
    return True

"""The folder of native code built on this machine: the shared kernel's library
(:mod:`.generic`) and the per-model ahead-of-time packages (:mod:`.packages`).

One rule for everything in it:

* **Where.** ``$SCORING_COMPILE_CACHE``, else the user's cache
  (``~/.cache/scoring/compiled``).  Native code is loaded only from a folder that the user
  alone can write to (:func:`private`); what each kind does otherwise is its own.
* **Names.** A file's name carries a digest of everything that decides its code
  (:func:`digest`), so a changed source, setting or machine never loads a stale file.
* **One builder per name.** An exclusive ``flock`` on the name's lock file, held for the
  whole build (:func:`build_lock`), also by a child process that builds after its
  parent has moved on.  The kernel drops a lock with the last process holding it, so a
  builder that crashed never blocks the next one.
* **Files appear whole.** A build writes beside its target and renames over it
  (:func:`publishing`): a reader finds the old file, the new one, or none.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["build_lock", "cache_root", "digest", "private", "publishing"]


def cache_root() -> Path:
    """``$SCORING_COMPILE_CACHE`` where it names a folder, else the user's cache (what
    ``off`` turns off is per-model packages, not this folder)."""
    setting = os.environ.get("SCORING_COMPILE_CACHE", "")
    if setting and setting.lower() != "off":
        return Path(setting)
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache_home / "scoring" / "compiled"


def private(root: Path) -> bool:
    """Whether ``root`` is a folder of this user's that no one else can write to."""
    status = root.stat()
    return root.is_dir() and status.st_uid == os.getuid() and not status.st_mode & 0o022


def digest(*parts: str | bytes) -> str:
    """The name-part of a build: sha256 over ``parts``, each one ended by a NUL (so that
    moving a boundary between parts changes it)."""
    h = hashlib.sha256()
    for part in parts:
        h.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return h.hexdigest()[:32]


@contextlib.contextmanager
def build_lock(root: Path, name: str, *, wait: bool = True) -> Iterator[int | None]:
    """Hold the build lock of ``name`` in ``root`` for the block; yields the lock's file
    descriptor (hand it to a child process to keep the lock while the child builds), or
    None when another process holds it and ``wait`` is false."""
    locks = root / "locks"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)  # native code: the user's alone
    locks.mkdir(exist_ok=True, mode=0o700)
    fd = os.open(locks / f"{name}.lock", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)  # the lock goes with the last descriptor: ours, or a child's


@contextlib.contextmanager
def publishing(target: Path) -> Iterator[Path]:
    """A path beside ``target`` for the block to write; renamed over ``target`` when the
    block ends without an error, removed in any case otherwise."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial{target.suffix}")
    try:
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)

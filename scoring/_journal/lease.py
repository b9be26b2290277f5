"""An exclusive lease on an output, so that two runs never write one output at once.

The lease is ``_scoring_lease.json`` in the output directory, created exclusively and
naming its holder: user, host, pid, start and a heartbeat that a thread renews while
the run lasts.  The file is never seen part written: on a local disk it is created
whole (written aside, then linked into place, which fails when one exists) and renewed
whole (written aside, then renamed over); on an object store it is one put (mode
``"xb"`` through fsspec), whole already.  A second run is refused with one line naming
the holder.  A lease whose holder is gone is taken over: at once when the holder was a
process on this host that no longer exists, else once its heartbeat is older than
:data:`STALE_AFTER_S`.  A lease file that cannot be read (an earlier version's, created
empty and filled after) counts as live until the file itself is that old.  Before
publishing, the holder checks the lease is still its own (a run paused past the stale
time may have lost it) and refuses to publish if not.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import OutputError

__all__ = ["LEASE", "OutputLease"]

LEASE = "_scoring_lease.json"
#: How often the holder renews its heartbeat, and when another host's lease is stale.
HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0


class OutputLease:
    """``acquire()`` before reading the output's state, ``check()`` before publishing,
    ``release()`` at the end (safe to call when never acquired)."""

    def __init__(
        self, url: str, *, location: str | None = None, stale_after: float = STALE_AFTER_S
    ):
        """``url``: the output as named; ``location``: where its files are, when that is
        not ``url`` (an Iceberg table's, named through its catalog)."""
        self.fs, root = fsspec.core.url_to_fs(str(location or url))
        self.url = str(url)
        self.path = f"{root.rstrip('/')}/{LEASE}"
        self.stale_after = stale_after
        self.token = uuid.uuid4().hex
        self._started = time.time()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> None:
        self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)
        if not self._create():
            holder = self._read()
            if holder is not None and not self._stale(holder):
                raise OutputError(
                    f"output {self.url!r} is being written by another run ({_who(holder)}); "
                    "wait for it, or stop it and rerun"
                )
            self.fs.rm_file(self.path)  # its holder is gone: take it over
            if not self._create():
                raise OutputError(f"output {self.url!r} was just taken by another run; rerun")
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="lease")
        self._beat.start()

    def check(self) -> None:
        """Refuse to publish when the lease is no longer this run's."""
        holder = self._read()
        if holder is None or holder.get("token") != self.token:
            taken = f" (now {_who(holder)})" if holder else ""
            raise OutputError(
                f"this run lost its lease on output {self.url!r}{taken}, so it publishes "
                "nothing; rerun when the other run is done"
            )

    def release(self) -> None:
        if self._beat is None:
            return
        self._stop.set()
        self._beat.join()
        self._beat = None
        holder = self._read()
        if holder is not None and holder.get("token") == self.token:
            self.fs.rm_file(self.path)

    # -- internals ----------------------------------------------------------------------

    def _record(self) -> dict[str, Any]:
        return {"token": self.token, "user": getpass.getuser(), "host": socket.gethostname(),
                "pid": os.getpid(), "started": self._started, "heartbeat": time.time()}  # fmt: skip

    def _create(self) -> bool:
        self._started = time.time()
        data = json.dumps(self._record()).encode()
        if not isinstance(self.fs, LocalFileSystem):  # one put: whole, never partial
            try:
                with self.fs.open(self.path, "xb") as f:
                    f.write(data)
            except FileExistsError:
                return False
            return True
        aside = self._aside(data)
        try:
            os.link(aside, self.path)  # fails when a lease exists: exclusive, and whole
        except FileExistsError:
            return False
        finally:
            os.unlink(aside)
        return True

    def _renew(self) -> None:
        data = json.dumps(self._record()).encode()
        if not isinstance(self.fs, LocalFileSystem):
            self.fs.pipe_file(self.path, data)
            return
        os.replace(self._aside(data), self.path)

    def _aside(self, data: bytes) -> str:
        """``data`` written whole beside the lease file, to be linked or renamed over it."""
        aside = f"{self.path}.{self.token}.tmp"
        self.fs.pipe_file(aside, data)
        return aside

    def _read(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.fs.cat_file(self.path)))
        except FileNotFoundError:
            return None
        except ValueError:  # not a record: live until the file is as old as a stale one
            return {"heartbeat": self._written(), "unreadable": True}

    def _written(self) -> float:
        """When the lease file was last written (seconds since the epoch)."""
        try:
            return float(self.fs.modified(self.path).timestamp())
        except (OSError, NotImplementedError, AttributeError):
            return time.time()  # unknown: as if just written

    def _stale(self, holder: dict[str, Any]) -> bool:
        mine = holder.get("host") == socket.gethostname()
        if mine and "pid" in holder and not _alive(int(holder["pid"])):
            return True
        return time.time() - float(holder.get("heartbeat", 0.0)) > self.stale_after

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            holder = self._read()
            if holder is None or holder.get("token") != self.token:
                return  # taken over: check() will refuse to publish
            self._renew()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _who(holder: dict[str, Any]) -> str:
    if holder.get("unreadable"):
        return f"its {LEASE} cannot be read yet: being written, or left damaged"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, user "
        f"{holder.get('user', '?')}, since {started}"
    )

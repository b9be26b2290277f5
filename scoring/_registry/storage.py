"""Artifact storage on any fsspec filesystem: content-addressed, written atomically.

An artifact's path is derived from its sha256, so a crash between writing the bytes and
recording the version leaves at most an unreferenced file that the next registration of
the same bytes reuses; a recorded version never points at a half-written file.
"""

from __future__ import annotations

import re
import uuid

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .._bundle import sha256_hex
from ..errors import DependencyError, IntegrityError, RegistryAccessError

__all__ = ["ArtifactStore"]


class ArtifactStore:
    """Bytes under ``<root>/artifacts/<sha[:2]>/<sha>/<filename>``, addressed by key."""

    def __init__(self, root: str):
        try:
            self.fs, self.root = fsspec.core.url_to_fs(root)
        except ImportError as exc:
            raise DependencyError(
                f"registry root {root!r}: {exc}; install the fsspec package for its scheme "
                "(s3fs, gcsfs, adlfs) or use a local directory"
            ) from exc
        except ValueError as exc:
            raise RegistryAccessError(
                f"registry root {root!r}: {exc}; use a local directory or an fsspec URL"
            ) from exc
        self.url = root
        self.root = self.root.rstrip("/")

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def ensure_writable(self) -> None:
        """Create the root and prove a file can be written there, or say why not."""
        probe = f"{self.root}/.write-probe-{uuid.uuid4().hex}"
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except OSError as exc:
            raise RegistryAccessError(
                f"registry root {self.url!r} is not writable ({exc.__class__.__name__}: {exc}); "
                "point --registry or SCORING_HOME at a directory you can write"
            ) from exc
        except Exception as exc:  # an object store's client: no credentials, no endpoint
            if self.is_local:
                raise
            raise RegistryAccessError(
                f"registry root {self.url!r} cannot be reached ({exc.__class__.__name__}: "
                f"{exc}); give the store's endpoint and credentials with --storage-option "
                "(or the store's own environment variables)"
            ) from exc

    @staticmethod
    def key_for(sha256: str, filename: str) -> str:
        """Where bytes with this digest live, relative to the root (so a root can move)."""
        return _contained(f"artifacts/{sha256[:2]}/{sha256}/{filename}")

    def uri(self, key: str) -> str:
        path = f"{self.root}/{key}"
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return path if self.is_local else f"{protocol}://{path.lstrip('/')}"

    def put(self, data: bytes, filename: str) -> str:
        """Store ``data`` (idempotent) and return its key, relative to the root, whether
        the bytes were there already or not."""
        sha = sha256_hex(data)
        key = self.key_for(sha, filename)
        path = f"{self.root}/{key}"
        if self.fs.exists(path) and sha256_hex(self.fs.cat_file(path)) == sha:
            return key
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, path)
        except OSError as exc:
            raise RegistryAccessError(f"cannot write artifact {path!r}: {exc}") from exc
        return key

    def get(self, key: str, *, sha256: str) -> bytes:
        """The bytes under ``key``, refused unless they still hash to ``sha256``."""
        try:
            data: bytes = self.fs.cat_file(f"{self.root}/{_contained(key)}")
        except FileNotFoundError as exc:
            raise IntegrityError(
                f"artifact {self.uri(key)!r} is missing from the registry root"
            ) from exc
        found = sha256_hex(data)
        if found != sha256:
            raise IntegrityError(
                f"artifact {self.uri(key)!r} has sha256 {found}, but {sha256} was registered: "
                "the stored model was modified or corrupted; register the model again"
            )
        return data

    def delete(self, key: str) -> None:
        parent = f"{self.root}/{_contained(key)}".rsplit("/", 1)[0]
        if self.fs.exists(parent):
            self.fs.rm(parent, recursive=True)


#: A storage key as :meth:`ArtifactStore.key_for` makes it; nothing else is read or
#: deleted, so a key edited in the database cannot reach outside the root.
_KEY = re.compile(r"^artifacts/([0-9a-f]{2})/(\1[0-9a-f]{62})/[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _contained(key: str) -> str:
    if not _KEY.match(key) or ".." in key:
        raise IntegrityError(
            f"registry storage key {key!r} is not one the registry writes "
            "(artifacts/<sha[:2]>/<sha256>/<file name>); the registry database was edited: "
            "register the model again"
        )
    return key

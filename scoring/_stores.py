"""Options for the object stores a command touches (endpoint, profile, credentials).

They are fsspec's own filesystem options, given as ``KEY=VALUE`` (``--storage-option``),
a job file's ``[storage_options]`` table or ``storage_options=`` in Python.  A key
applies to every object store among the command's URLs; ``PROTOCOL.KEY`` (e.g.
``s3.endpoint_url``) to that protocol only.  They become fsspec's configuration
(:data:`fsspec.config.conf`, the same that ``FSSPEC_S3_ENDPOINT_URL`` sets) for the
length of the command, so every filesystem opened on the way sees them, and Ray actors
get them with the run (:func:`install`, in each actor).  Spark reads and writes through
Hadoop, whose settings are its own (``spark.hadoop.fs.s3a.*``).  Nothing of them is
written to outputs, manifests or the job key: credentials may be among them.

fsspec's configuration is the process's: two runs with different options at once in
one process (threads) would see each other's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import fsspec
import fsspec.config

from .errors import ConfigError

__all__ = ["StoreConfig", "configured", "install", "is_remote", "store_config"]

#: fsspec's configuration per protocol: ``{"s3": {"endpoint_url": ...}}``.
StoreConfig = dict[str, dict[str, Any]]

#: Protocols that take no options: this machine's disks, this process's memory.
_NO_OPTIONS = {"file", "local", "memory"}


def is_remote(url: str) -> bool:
    """Whether ``url`` is on an object store (not this machine's disks or memory)."""
    return fsspec.utils.get_protocol(str(url)) not in _NO_OPTIONS


def store_config(options: Mapping[str, Any] | None, urls: Iterable[str]) -> StoreConfig:
    """``options`` per protocol: a plain key for each object store among ``urls``, a
    ``PROTOCOL.KEY`` for its protocol."""
    remote = sorted({fsspec.utils.get_protocol(str(u)) for u in urls if is_remote(u)})
    config: StoreConfig = {}
    for key, value in (options or {}).items():
        protocol, dot, name = key.partition(".")
        if dot and protocol in fsspec.available_protocols():
            config.setdefault(protocol, {})[name] = value
            continue
        if not remote:
            raise ConfigError(
                f"storage option {key!r}: no URL of this command is on an object store; "
                "name the protocol (e.g. s3.endpoint_url) or leave the option out"
            )
        for protocol in remote:
            config.setdefault(protocol, {})[key] = value
    return config


def install(config: StoreConfig) -> None:
    """fsspec's configuration with ``config`` added, for good (a worker of one run)."""
    for protocol, options in config.items():
        fsspec.config.conf[protocol] = {**fsspec.config.conf.get(protocol, {}), **options}


@contextmanager
def configured(config: StoreConfig) -> Iterator[None]:
    """fsspec's configuration with ``config`` added, restored on the way out."""
    saved = {p: fsspec.config.conf.get(p) for p in config}
    install(config)
    try:
        yield
    finally:
        for protocol, before in saved.items():
            if before is None:
                fsspec.config.conf.pop(protocol, None)
            else:
                fsspec.config.conf[protocol] = before

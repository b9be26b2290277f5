"""What every scoring actor does first: fetch the bundle, verify it, compile once."""

from __future__ import annotations

import os
import socket
from typing import Any

from ..model import CompiledModel
from ..registry import Bundle, compile_bundle

__all__ = ["load_bundle", "worker_name"]


def load_bundle(ref: tuple[Any], *, device: str, backend: str, threads: int) -> CompiledModel:
    """The model from the object store, checksum verified, compiled once per process.

    ``ref`` is a 1-tuple so that Ray hands the actor the reference, not the value: the
    bytes are fetched (and checked) here, once per actor, even after a restart.
    """
    import ray
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    bundle = Bundle.from_bytes(ray.get(ref[0]))  # raises IntegrityError on a bad payload
    return compile_bundle(bundle, device=device, backend=backend)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"

"""Executor side: the broadcast bundle, the task's device, one compile per worker."""

from __future__ import annotations

import os
from typing import Any

from ..model import CompiledModel
from ..registry import Bundle, compile_bundle

__all__ = ["task_device", "worker_model"]


def task_device(requested: str) -> str:
    """``requested`` unless it is "auto": then the GPU Spark gave this task (as a device
    index among ``CUDA_VISIBLE_DEVICES`` when that is set), else the CPU."""
    if requested != "auto":
        return requested
    from pyspark import TaskContext

    context = TaskContext.get()
    gpus = context.resources().get("gpu") if context is not None else None
    if gpus is None or not gpus.addresses:
        return "cpu"
    address = gpus.addresses[0]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    index = visible.index(address) if address in visible else int(address)
    return f"cuda:{index}"


def worker_model(payload: Any, *, device: str, backend: str) -> CompiledModel:
    """The broadcast bundle, checksum verified, compiled once per Python worker for each
    (model sha256, backend, device)."""
    bundle = Bundle.from_bytes(payload.value)  # raises IntegrityError on a bad payload
    return compile_bundle(bundle, device=task_device(device), backend=backend)

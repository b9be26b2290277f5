"""Compiled models cached per process, bounded by count and by device memory.

A Ray actor or Spark Python worker compiles each (model sha256, backend, strategy,
device) once however many batches or files it scores; the least recently used model is
dropped when the cache holds more than ``max_models`` or its compiled tensors take more
than ``max_bytes`` on one device (default: a quarter of a GPU's memory, 4 GiB on CPU).

A stored version's payload names the choices its registry record verified, per device
type (``verified`` in its manifest).  A worker whose own choice (its device, the
strategy ``auto`` picked there) is not among them holds it to the native predictor on
probe rows before scoring with it, and refuses it when it differs: the gate verifies
what the workers run, not only what the driver would.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ._bundle import Bundle
from ._model import CompiledModel, held_to_native
from ._modelset import BundleSet, Scoring, compile_payload
from .errors import VerificationError

__all__ = ["CompiledCache", "check_choice", "compiled"]

MAX_MODELS = 8
CPU_MAX_BYTES = 4 << 30

_Key = tuple[str, str, str, str]


def _budget(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory // 4)
    return CPU_MAX_BYTES


class CompiledCache:
    """LRU of compiled models; see the module docstring."""

    def __init__(self, *, max_models: int = MAX_MODELS, max_bytes: int | None = None):
        self.max_models = max_models
        self.max_bytes = max_bytes
        self._entries: OrderedDict[_Key, tuple[Scoring, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self,
        bundle: Bundle | BundleSet,
        *,
        device: str = "auto",
        backend: str = "auto",
        strategy: str = "auto",
    ) -> Scoring:
        key = (bundle.sha256, backend, strategy, device)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            cm = compile_payload(bundle, device=device, backend=backend, strategy=strategy,
                                 check=check_choice)  # fmt: skip
            self._entries[key] = (cm, cm.device_bytes())
            self._evict(cm.device)
            return cm

    def _evict(self, device: torch.device) -> None:
        """Drop the least recently used until both bounds hold (the newest always stays)."""
        while len(self._entries) > self.max_models:
            self._entries.popitem(last=False)
        budget = self.max_bytes if self.max_bytes is not None else _budget(device)
        here = [k for k, (cm, _) in self._entries.items() if cm.device == device]
        used = sum(self._entries[k][1] for k in here)
        for key in here[:-1]:  # oldest first; the newest always stays
            if used <= budget:
                return
            used -= self._entries.pop(key)[1]


_PROCESS_CACHE = CompiledCache()


def check_choice(bundle: Bundle, cm: CompiledModel) -> None:
    """Hold ``cm``'s choice to native here when the version's record does not cover it
    (see the module docstring); a choice that passes is remembered for this process."""
    verified = bundle.manifest.get("verified")
    if verified is None or cm.backend != "tensor":
        return  # not a stored version, or the native predictor: the reference itself
    device_type, strategy = cm.device.type, str(cm.strategy)
    if strategy in verified.get(device_type, ()):
        return
    model, forest = bundle.restore()
    check = held_to_native(model, forest, {device_type: [strategy]}, device=cm.device)[device_type]
    if not check.passed:
        raise VerificationError(
            f"{bundle.ref} fails parity on this worker's {device_type} (tensor/{strategy}: "
            f"max error {check.max_error:.1e}{'; ' + check.detail if check.detail else ''}), "
            "which its registry record never verified; score it with backend='native'"
        )
    verified.setdefault(device_type, []).append(strategy)


def compiled(
    bundle: Bundle | BundleSet,
    *,
    device: str = "auto",
    backend: str = "auto",
    strategy: str = "auto",
) -> Scoring:
    """The bundle (or a set's) compiled once per process (see :class:`CompiledCache`)."""
    return _PROCESS_CACHE.get(bundle, device=device, backend=backend, strategy=strategy)

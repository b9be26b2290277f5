"""Backends: how a compiled model computes its outputs, behind one protocol.

:class:`scoring._model.CompiledModel` is the public face; the Scorer calls a backend
only through :class:`Backend`: ``score`` for a batch of already validated rows,
``submit`` for one whose result may come later (batches in flight on a GPU),
``batch_rows`` for the batch size that suits its device, and ``for_parallel_calls``
for a variant whose calls may run side by side on CPU threads.  Device concerns (pinned
host memory, splitting a batch that runs out of device memory) stay inside the backend.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import torch

from .._inputs import Columns

__all__ = ["CPU_BATCH_ROWS", "Backend", "as_rows", "module_bytes"]

#: Rows per batch on CPU: big enough to amortise per-call costs.
CPU_BATCH_ROWS = 131_072


class Backend(Protocol):
    name: str
    device: torch.device
    strategy: str | None
    strategy_reason: str
    #: Whether :meth:`predict_contributions` explains every row ``score`` takes; where
    #: not, a run computes contributions from the model's trees instead.
    explains: bool
    #: Whether ``score`` and ``submit`` take a batch feature-major as it was read
    #: (:class:`~scoring._inputs.Columns`) rather than a row-major matrix.
    takes_columns: bool

    @property
    def batch_rows(self) -> int:
        """Rows per batch that suit this backend's device."""

    def score(
        self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *, raw: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """One batch: ``features`` as read (for predictors that want names and
        categories) and ``mat``, the validated matrix in feature order (columns where
        the backend :attr:`takes_columns`).  Returns
        ``predict_proba`` for classifiers, else the transformed values, and the raw
        margins when ``raw`` (an anomaly model's raw score is its decision_function)."""

    def submit(self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *,
               raw: bool, stop: threading.Event | None = None) -> Any:  # fmt: skip
        """``score`` as a pending result (:class:`.staged.Pending`): its ``result()``
        returns what ``score`` would.  Backends that score on the host score now.  A
        call waiting for room on the device gives up once ``stop`` is set."""

    def for_parallel_calls(self) -> Backend | None:
        """A backend whose ``score`` calls may run side by side, each on one thread;
        None where one call should have the machine (torch threads, a GPU)."""

    def predict(self, X: Any) -> np.ndarray: ...
    def predict_proba(self, X: Any) -> Any: ...
    def predict_raw(self, X: Any) -> np.ndarray: ...
    def predict_leaf(self, X: Any) -> np.ndarray: ...
    def predict_contributions(self, X: Any) -> np.ndarray:
        """Path-dependent TreeSHAP contributions ``[rows, outputs, features + 1]``."""


def as_rows(mat: np.ndarray | torch.Tensor | Columns) -> np.ndarray | torch.Tensor:
    """A batch as a row-major matrix, for a backend that reads rows."""
    return mat.rows() if isinstance(mat, Columns) else mat


def module_bytes(backend: object) -> int:
    """Bytes a backend's compiled tensors take on its device (0: no torch module)."""
    module = getattr(backend, "module", None)
    if not isinstance(module, torch.nn.Module):
        return 0
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)

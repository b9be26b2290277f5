"""``scoring.compile``: a fitted model or model file -> a :class:`CompiledModel`.

The backend is picked, checked and recorded here:

* ``tensor``: our compiler (the default on CUDA);
* ``native``: the framework's own predictor (the reference, often fastest on CPU);
* ``hummingbird``: hummingbird-ml, verified against native unless ``verify=False``;
* ``auto``: tensor on CUDA; on CPU whichever of tensor and native scores a probe batch
  faster, with both timings kept in :attr:`CompiledModel.selection`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from .backends.hummingbird import HummingbirdBackend
from .backends.native import NativeBackend
from .backends.tensor import TensorBackend
from .errors import CompileError
from .importers import import_model, load_model_file
from .inputs import prepare
from .ir import Forest
from .probes import probe_rows

__all__ = ["CompiledModel", "compile_imported", "compile_model", "resolve_device"]

BACKENDS = ("auto", "tensor", "hummingbird", "native")


class _Backend(Protocol):
    name: str
    device: torch.device

    def predict(self, X: Any) -> np.ndarray: ...
    def predict_proba(self, X: Any) -> np.ndarray: ...
    def predict_raw(self, X: Any) -> np.ndarray: ...


@dataclass
class CompiledModel:
    """A model ready to score: ``predict``, ``predict_proba``, ``predict_raw``.

    Inputs may be numpy arrays, pandas DataFrames (matched by feature name when the
    model has names), pyarrow Tables/RecordBatches, or torch tensors on any device.
    """

    forest: Forest
    backend: str
    device: torch.device
    strategy: str | None
    strategy_reason: str
    selection: dict[str, float] = field(default_factory=dict)
    #: Where the model came from when loaded from the registry: name, version, sha256.
    origin: dict[str, Any] = field(default_factory=dict)
    _impl: Any = field(default=None, repr=False)

    @property
    def framework(self) -> str:
        return self.forest.framework

    @property
    def model_kind(self) -> str:
        return self.forest.model_kind

    def _input(self, X: Any) -> Any:
        mat = prepare(X, self.forest)  # typed errors for anything native would refuse
        return X if self.backend == "native" else mat

    def predict(self, X: Any) -> np.ndarray:
        """What the native model's ``predict`` returns (class labels or values)."""
        return self._impl.predict(self._input(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``[rows, n_classes]``, as scikit-learn returns them."""
        return self._impl.predict_proba(self._input(X))

    def predict_raw(self, X: Any) -> np.ndarray:
        """Raw margins before the link function (IsolationForest: decision_function)."""
        return self._impl.predict_raw(self._input(X))

    def predict_leaf(self, X: Any) -> np.ndarray:
        """The native predictor's leaf id for every row and tree, ``[rows, n_trees]``."""
        if not hasattr(self._impl, "predict_leaf"):
            raise CompileError(f"backend {self.backend!r} does not report leaves")
        return self._impl.predict_leaf(self._input(X))


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise CompileError(
            f"unknown device {device!r}: expected auto, cpu, cuda or cuda:N"
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CompileError(f"device {device!r} requested but no CUDA device is available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise CompileError(
                f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s)"
            )
    elif dev.type != "cpu":
        raise CompileError(f"device {device!r} is not supported: expected cpu or cuda")
    return dev


def compile_model(
    model: Any,
    backend: str = "auto",
    device: str | torch.device = "auto",
    strategy: str = "auto",
    *,
    verify: bool = True,
    trusted: bool = False,
    batch_size: int | None = None,
) -> CompiledModel:
    """Compile a fitted scikit-learn/XGBoost/LightGBM model or a model file."""
    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if isinstance(model, (str, os.PathLike)):
        model = load_model_file(model, trusted=trusted)
    return compile_imported(
        model,
        import_model(model),
        backend=backend,
        device=device,
        strategy=strategy,
        verify=verify,
        batch_size=batch_size,
    )


def compile_imported(
    model: Any,
    forest: Forest,
    *,
    backend: str = "auto",
    device: str | torch.device = "auto",
    strategy: str = "auto",
    verify: bool = True,
    batch_size: int | None = None,
) -> CompiledModel:
    """Compile a model already imported into ``forest`` (the registry restores both)."""
    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    dev = resolve_device(device)
    if backend == "native":
        return _wrap(forest, NativeBackend(model, forest), None, "native predictor")
    if backend == "hummingbird":
        hb = HummingbirdBackend(model, forest, device=dev, strategy=strategy, verify=verify)
        return _wrap(forest, hb, strategy, "requested")
    tensor = TensorBackend(forest, device=dev, strategy=strategy, batch_size=batch_size)
    if backend == "tensor" or dev.type == "cuda":
        return _wrap(forest, tensor, tensor.choice.name, tensor.choice.reason)
    return _fastest_on_cpu(forest, tensor, NativeBackend(model, forest))


def _wrap(forest: Forest, impl: Any, strategy: str | None, reason: str) -> CompiledModel:
    return CompiledModel(
        forest=forest,
        backend=impl.name,
        device=impl.device,
        strategy=strategy,
        strategy_reason=reason,
        _impl=impl,
    )


def _fastest_on_cpu(forest: Forest, tensor: TensorBackend, native: NativeBackend) -> CompiledModel:
    """Time both on the same probe rows (after a warm-up) and keep the faster."""
    rows = probe_rows(forest, n_rows=4096, special=False)
    rows = rows.astype(np.float32 if forest.input_dtype == "float32" else np.float64)
    timings = {}
    for impl in (tensor, native):
        impl.predict_raw(rows[:64])
        start = time.perf_counter()
        impl.predict_raw(rows)
        timings[impl.name] = time.perf_counter() - start
    best = min(timings, key=timings.__getitem__)
    chosen = _wrap(
        forest,
        tensor if best == "tensor" else native,
        tensor.choice.name if best == "tensor" else None,
        tensor.choice.reason if best == "tensor" else "native measured faster on CPU",
    )
    chosen.selection = timings
    return chosen

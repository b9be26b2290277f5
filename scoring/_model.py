"""``scoring.compile``: a fitted model, model file or Bundle -> a :class:`CompiledModel`.

The backend is picked, checked and recorded here:

* ``tensor``: our compiler (the default on CUDA);
* ``native``: the framework's own predictor (the reference, often fastest on CPU);
* ``hummingbird``: hummingbird-ml, verified against native unless ``verify=False``;
* ``auto``: tensor on CUDA; on CPU whichever of tensor (``fused``) and native scores
  probe batches faster as a job runs them (one thread per call, in alternation over
  rounds: :func:`_fastest_on_cpu`), with both medians kept in
  :attr:`CompiledModel.selection`.

Every compiled model knows the sha256 of its canonical bytes (:attr:`CompiledModel.sha256`),
whatever form it came in: that is what jobs, caches and reports are keyed by.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._backends import Backend, module_bytes
from ._backends.hummingbird import HummingbirdBackend
from ._backends.native import NativeBackend
from ._backends.tensor import TensorBackend
from ._bundle import Bundle, sha256_hex
from ._frameworks import (
    dump_model,
    framework_named,
    import_model,
    library_versions,
    model_object,
)
from ._inputs import model_columns, prepare
from ._ir import Forest
from ._parity import Verification, as_frame, probe_rows, verify
from ._version import __version__
from .errors import CompileError

__all__ = [
    "BACKENDS", "CompiledModel", "bundle_origin", "compile_imported", "compile_model",
    "held_to_native", "resolve_device",
]  # fmt: skip

BACKENDS = ("auto", "tensor", "hummingbird", "native")


@dataclass
class CompiledModel:
    """A model ready to score: ``predict``, ``predict_proba``, ``predict_raw``.

    Inputs may be numpy arrays, pandas DataFrames (matched by feature name when the
    model has names), pyarrow Tables/RecordBatches, or torch tensors on any device.
    ``implementation`` is the backend object (:class:`scoring._backends.Backend`).
    """

    forest: Forest
    implementation: Backend = field(repr=False)
    #: ``auto`` on CPU: each candidate's seconds on the probe rows (``native``,
    #: ``tensor:<strategy>``); ``fused`` on CPU: its schedule (``fused.top_depth``,
    #: ``fused.uniform``, ``fused.block``, ``fused.vector``), measured for this model.
    selection: dict[str, float] = field(default_factory=dict)
    #: Where the model came from: name and version when it came from a registry or a
    #: Bundle, and the sha256 of its canonical bytes (computed on first use otherwise).
    origin: dict[str, Any] = field(default_factory=dict)
    #: What the registry's parity record says of the choice it scores with (a stored
    #: version run by an engine; :func:`scoring._catalog.ensure_verified`), else "".
    verified: str = ""
    _source: Any = field(default=None, repr=False)

    @property
    def backend(self) -> str:
        return self.implementation.name

    @property
    def device(self) -> torch.device:
        return self.implementation.device

    @property
    def strategy(self) -> str | None:
        return self.implementation.strategy

    @property
    def strategy_reason(self) -> str:
        return self.implementation.strategy_reason

    @property
    def framework(self) -> str:
        return self.forest.framework

    @property
    def model_kind(self) -> str:
        return self.forest.model_kind

    @property
    def sha256(self) -> str:
        """The sha256 of the model's canonical bytes (what the registry would store)."""
        if "sha256" not in self.origin:
            if self._source is None:
                raise CompileError("this compiled model has no source model to identify it by")
            self.origin["sha256"] = sha256_hex(dump_model(self._source))
        return str(self.origin["sha256"])

    @property
    def ref(self) -> str:
        """``name@version`` for registered models, else the model kind."""
        if "name" in self.origin:
            return f"{self.origin['name']}@{self.origin['version']}"
        return self.forest.model_kind

    def output_metadata(self) -> dict[str, str]:
        """What a scored output's schema records of the model that scored it."""
        return {
            "scoring.version": __version__,
            "scoring._model": self.ref,
            "scoring._model.name": str(self.origin.get("name", "")),
            "scoring._model.version": str(self.origin.get("version", "")),
            "scoring._model.sha256": self.sha256,
            "scoring._model.kind": self.forest.model_kind,
            "scoring.backend": self.backend,
            "scoring.strategy": self.strategy or "",
            "scoring.device": str(self.device),
        }

    def device_bytes(self) -> int:
        """Bytes its compiled tensors take on its device (0 for a native predictor)."""
        return module_bytes(self.implementation)

    def _input(self, X: Any, *, leaves: bool = False, columns: bool = False) -> Any:
        """``X`` validated (typed errors for what native refuses); with ``columns``, a
        frame or Arrow table feature-major where the backend's kernel reads it so."""
        columns = columns and self.implementation.takes_columns
        mat = prepare(X, self.forest, leaves=leaves, columns=columns)
        # The native predictor reads the user's own rows, matched by name as ours are.
        return model_columns(X, self.forest) if self.backend == "native" else mat

    def predict(self, X: Any) -> np.ndarray:
        """What the native model's ``predict`` returns (class labels or values)."""
        return self.implementation.predict(self._input(X, columns=True))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``[rows, n_classes]``, as scikit-learn returns them (for
        a classifier of several targets, a list of each target's ``[rows, n_classes_k]``)."""
        return self.implementation.predict_proba(self._input(X, columns=True))

    def predict_raw(self, X: Any) -> np.ndarray:
        """Raw margins before the link function (IsolationForest: decision_function)."""
        return self.implementation.predict_raw(self._input(X, columns=True))

    def predict_leaf(self, X: Any) -> np.ndarray:
        """The native predictor's leaf id for every row and tree, ``[rows, n_trees]``."""
        return self.implementation.predict_leaf(self._input(X, leaves=True))

    def predict_contributions(self, X: Any) -> np.ndarray:
        """Each feature's contribution to the margin (path-dependent TreeSHAP), the last
        column the bias (the expected margin): ``[rows, features + 1]``, or
        ``[rows, outputs, features + 1]`` for several outputs (a multiclass model's
        classes), as XGBoost's ``pred_contribs`` lays them out.  A row sums to
        :meth:`predict_raw` (an averaging forest's: its averaged class fractions).
        ``backend="native"`` asks the framework's own TreeSHAP."""
        values = self.implementation.predict_contributions(self._input(X))
        return values[:, 0, :] if values.shape[1] == 1 else values


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
    """Compile a fitted scikit-learn/XGBoost/LightGBM model, a model file or a Bundle."""
    origin: dict[str, Any] = {}
    if isinstance(model, Bundle):
        origin = bundle_origin(model)
        model, forest = model.restore(trusted=trusted)
        if "name" in origin:  # errors name the model as the user registered it
            forest.registered_as = f"{origin['name']}@{origin['version']}"
    else:
        model = model_object(model, trusted=trusted)
        forest = import_model(model)
    cm = compile_imported(model, forest, backend=backend, device=device, strategy=strategy,
                          verify=verify, batch_size=batch_size)  # fmt: skip
    cm.origin = origin
    return cm


def held_to_native(
    model: Any,
    forest: Forest,
    plan: Mapping[str, Sequence[str]],
    *,
    sample: Any = None,
    candidate: Forest | None = None,
    device: str | torch.device | None = None,
) -> dict[str, Verification]:
    """The tensor backend on each device type of ``plan`` and each of its strategies,
    compiled from ``candidate`` (default ``forest``) on ``device`` (default the device
    type), held to ``model``'s own predictor (:func:`scoring._parity.verify`)."""
    reference = compile_imported(model, forest, backend="native")
    compiled = candidate or forest

    def build(device_type: str, strategy: str) -> CompiledModel:
        return compile_imported(None, compiled, backend="tensor", device=device or device_type,
                                strategy=strategy)  # fmt: skip

    return verify(reference, build, strategies=plan, sample=sample,
                  versions=library_versions(forest.framework))  # fmt: skip


def bundle_origin(bundle: Bundle) -> dict[str, Any]:
    """What a model compiled from ``bundle`` records as its origin."""
    if bundle.manifest["version"] == 0:  # an unregistered model: identified by its bytes
        return {"sha256": bundle.sha256}
    return {k: bundle.manifest[k] for k in ("name", "version", "sha256")}


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
    """Compile a model already imported into ``forest``."""
    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "native" and strategy != "auto":  # never silently another backend
        raise CompileError(
            f"strategy {strategy!r} is the tensor backend's, and backend 'native' is the "
            "framework's own predictor; name backend 'tensor' (or 'auto') with it, or "
            "leave the strategy out"
        )
    dev = resolve_device(device)
    impl: Backend
    timings: dict[str, float] = {}
    if backend == "native":
        impl = NativeBackend(model, forest)
    elif backend == "hummingbird":
        impl = HummingbirdBackend(model, forest, device=dev, strategy=strategy, verify=verify)
    else:
        # On CPU the tensor candidate is what ``auto`` picks there, ``fused``: the eager
        # strategies walk the same trees 5-14x slower.  A strategy asked for by name is
        # what runs: it names the tensor backend.
        on_cpu = backend == "auto" and dev.type == "cpu" and strategy == "auto"
        try:
            impl = TensorBackend(forest, device=dev, strategy=strategy, batch_size=batch_size)
        except CompileError as exc:
            if not on_cpu:
                raise
            # auto on CPU: the native predictor is a right answer too; say why it runs.
            native = NativeBackend(model, forest)
            native.strategy_reason = f"native predictor: the tensor backend failed ({exc})"
            return CompiledModel(forest=forest, implementation=native, _source=model)
        # A predictor outside this process (Spark's JVM) is no candidate for a call.
        if on_cpu and framework_named(forest.framework).in_process:
            candidates: list[Backend] = [impl, NativeBackend(model, forest)]
            impl, timings = _fastest_on_cpu(forest, candidates)
    timings.update(_schedule_of(impl))
    return CompiledModel(forest=forest, implementation=impl, selection=timings, _source=model)


def _schedule_of(impl: Backend) -> dict[str, float]:
    """What the tensor backend's kernel measured for this model (``fused``: its layout
    and schedule), as numbers."""
    kernel = getattr(getattr(impl, "module", None), "kernel", None)
    return {} if kernel is None else kernel.selection()


#: Rows per probe call, and rounds: a close call (within :data:`_CLOSE`) gets more.
_PROBE_ROWS = 2048
_ROUNDS, _MORE_ROUNDS, _CLOSE = 3, 4, 0.2


def _fastest_on_cpu(forest: Forest, candidates: list[Backend]) -> tuple[Backend, dict[str, float]]:
    """Each candidate timed as a job runs it on CPU (one thread per call where native
    has such calls: :meth:`Backend.for_parallel_calls`), on the same probe rows, in
    alternation over rounds; the lowest median wins.  One timing each at one moment let
    the machine's load decide (a busy core flipped the pick to a backend 2.5x slower);
    in alternation the load falls on every candidate alike.  Timings: each one's median
    seconds per call, keyed ``native`` or ``tensor:<strategy>``, and the rounds run."""
    rows = probe_rows(forest, n_rows=_PROBE_ROWS, special=False)
    rows = rows.astype(np.float32 if forest.input_dtype == "float32" else np.float64)
    # Backends take validated matrices, where an encoded column holds codes; the native
    # predictor reads what the user passed, where it holds labels (an encoder's, or
    # HistGradientBoosting's own categories, which may be text).
    labelled = as_frame(rows, forest) if forest.encoded or forest.recode_categories else rows
    # One thread per call where every candidate has such calls (the engine then runs
    # them side by side); else each with its own threads, one call at a time.
    single = all(impl.for_parallel_calls() is not None for impl in candidates
                 if isinstance(impl, NativeBackend))  # fmt: skip
    calls = [_call(impl, labelled if isinstance(impl, NativeBackend) else rows, single=single)
             for impl in candidates]  # fmt: skip
    medians, rounds = medians_in_alternation(calls)
    best = candidates[int(np.argmin(medians))]
    timings = {_selection_key(impl): m for impl, m in zip(candidates, medians, strict=True)}
    return best, {**timings, "auto.rounds": float(rounds)}


def medians_in_alternation(calls: Sequence[Callable[[], Any]]) -> tuple[list[float], int]:
    """Each call's median seconds over rounds that run every call once, in turn, after
    one warm-up each (where ``fused`` measures its schedule); :data:`_ROUNDS` rounds,
    :data:`_MORE_ROUNDS` more when the two fastest are within :data:`_CLOSE`.  Also
    the rounds run."""
    seconds: list[list[float]] = [[] for _ in calls]
    for call in calls:
        call()
    for round_ in range(_ROUNDS + _MORE_ROUNDS):
        if round_ == _ROUNDS and not _close(seconds):
            break
        for call, taken in zip(calls, seconds, strict=True):
            start = time.perf_counter()
            call()
            taken.append(time.perf_counter() - start)
    return [float(np.median(taken)) for taken in seconds], len(seconds[0])


def _close(seconds: list[list[float]]) -> bool:
    medians = sorted(float(np.median(taken)) for taken in seconds)
    return len(medians) > 1 and medians[1] < medians[0] * (1 + _CLOSE)


def _call(impl: Backend, X: Any, *, single: bool) -> Callable[[], Any]:
    """``predict_raw(X)`` as the engine calls it on CPU: with ``single``, on one thread
    (native through its one-thread copy, tensor with torch's count set to one)."""
    if not single:
        return lambda: impl.predict_raw(X)
    if isinstance(impl, NativeBackend):
        one = impl.for_parallel_calls() or impl
        return lambda: one.predict_raw(X)

    def call() -> None:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            impl.predict_raw(X)
        finally:
            torch.set_num_threads(before)

    return call


def _selection_key(impl: Backend) -> str:
    return impl.name if impl.strategy is None else f"{impl.name}:{impl.strategy}"

"""Batches in flight on an accelerator: submit a batch, get a pending result.

A batch goes through three steps on the device: its rows copied in, the kernel, its
outputs copied out.  One batch at a time leaves the device idle while the host prepares
the next and the host idle while the device works.  Here each batch takes a *slot*, a
set of host buffers (pinned on CUDA) and a device input buffer, from a small pool; the
steps are queued on the device (:class:`CudaDevice`: copies on a copy stream, the kernel
on a compute stream, joined by events) and :meth:`Stager.submit` returns at once with a
:class:`Pending`, whose :meth:`~Pending.result` waits for that batch alone.

* Back-pressure: with every slot in flight, ``submit`` waits for one to come back.
* Reuse: a slot is refilled only after the result of its last batch was read (or the
  batch was cancelled), and that read waits for the batch's last device step.
* Failures: a step that fails fails its own batch's ``result``; the slot comes back.
* Cancellation: a ``submit`` waiting for a slot gives up with :class:`Stopped` once its
  ``stop`` event is set (a run stopping) or the stager is closed; :meth:`Pending.cancel`
  gives a slot back unread.
* Layout: a slot's input buffers are flat; a batch sits in them row-major, or
  feature-major (:class:`Layout`), where a batch of :class:`~scoring._inputs.Columns`
  is one copy per feature into the pinned block and one contiguous copy to the device,
  transposed nowhere.

The device is a small protocol, so a fake one (threads and random delays, in the tests)
proves the ordering, back-pressure, reuse, failure and cancellation rules on a machine
without CUDA; :class:`CudaDevice` is the real one, measured by the GPU suite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import torch

from .._inputs import Columns
from ..errors import EngineError
from . import as_rows

__all__ = [
    "CudaDevice", "Device", "Layout", "OnHost", "Pending", "Ready", "Slot", "Stager", "Stopped",
    "torch_dtype",
]  # fmt: skip

#: How often a ``submit`` waiting for a slot looks at its stop event.
_POLL_S = 0.1


class Stopped(EngineError):
    """A batch was not started: the run is stopping (or the stager was closed)."""


#: What the kernel step computes from the rows on the device: the output tensors, each
#: ``[rows, ...]``, in the dtypes they are written in.
Compute = Callable[[torch.Tensor], Sequence[torch.Tensor]]


class Pending(Protocol):
    """A batch's outputs, once the device is done with it."""

    def result(self) -> Any: ...

    def cancel(self) -> None: ...


@dataclass
class Ready:
    """A result computed when the batch was submitted (the CPU, a native predictor)."""

    value: Any

    def result(self) -> Any:
        return self.value

    def cancel(self) -> None:
        return None


class OnHost:
    """A backend that scores on the host: what it is submitted it scores now."""

    def score(
        self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *, raw: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def submit(self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *,
               raw: bool, stop: threading.Event | None = None) -> Ready:  # fmt: skip
        """Scored now, on the host (see :meth:`~scoring._backends.Backend.submit`)."""
        return Ready(self.score(features, mat, raw=raw))


@dataclass
class Slot:
    """Buffers of one batch in flight: flat host and device input buffers of ``rows``
    rows' values, host outputs (allocated the first time an output of that shape is
    fetched), and the slot's number."""

    number: int
    rows: int
    host_in: torch.Tensor
    device_in: torch.Tensor
    host_out: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class Layout:
    """Where a batch of ``rows`` rows sits in a slot's flat input buffer: its first
    ``rows * features`` values, row-major or feature-major."""

    rows: int
    features: int
    feature_major: bool

    def block(self, flat: torch.Tensor) -> torch.Tensor:
        """The batch's contiguous block (what is filled and copied): ``[features, rows]``
        feature-major, else ``[rows, features]``."""
        shape = (self.features, self.rows) if self.feature_major else (self.rows, self.features)
        return flat[: self.rows * self.features].view(shape)

    def matrix(self, flat: torch.Tensor) -> torch.Tensor:
        """The block as rows ``[rows, features]`` (a transposed view when feature-major)."""
        block = self.block(flat)
        return block.t() if self.feature_major else block


class Device(Protocol):
    """Where the three steps of a batch run, in order, without blocking the caller."""

    def slot(self, number: int, rows: int, features: int, dtype: torch.dtype) -> Slot:
        """A new slot's buffers for up to ``rows`` rows."""

    def start(self, slot: Slot, layout: Layout, compute: Compute) -> Any:
        """Queue copy-in of ``slot``'s batch (``layout``), ``compute`` on its rows and
        copy-out; returns a marker of the last step (raises only for a failure at
        queueing)."""

    def wait(self, marker: Any) -> None:
        """Block until the steps behind ``marker`` are done; raise the error of one
        that failed."""

    def settle(self, slot: Slot) -> None:
        """Block until no step queued on ``slot``'s buffers still runs: a ``start``
        that failed may have queued its copy-in, which reads the host rows later."""


class Stager:
    """A pool of slots on one device; see the module docstring."""

    def __init__(self, device: Device, *, slots: int, rows: int, features: int,
                 dtype: torch.dtype, feature_major: bool = False):  # fmt: skip
        if slots < 2:
            raise ValueError("a stager needs at least two slots: one filling, one in flight")
        self.device = device
        self.rows, self.features, self.dtype = rows, features, dtype
        self.feature_major = feature_major
        self.size = slots
        self._free: list[Slot] = []
        self._made = 0
        self._closed = False
        self._cond = threading.Condition()

    def submit(self, rows: np.ndarray | torch.Tensor | Columns, compute: Compute, *,
               stop: threading.Event | None = None) -> _InFlight:  # fmt: skip
        """Copy ``rows`` into a free slot (waiting for one, unless ``stop`` is set) and
        queue its steps."""
        n, features = rows.shape
        dtype = torch_dtype(rows)
        if n > self.rows or features != self.features or dtype != self.dtype:
            raise ValueError(f"a slot holds {self.rows} rows of {self.features} {self.dtype}, "
                             f"not {n} of {features} {dtype}")  # fmt: skip
        layout = Layout(n, features, self.feature_major)
        slot = self._take(stop)
        try:
            if isinstance(rows, Columns) and self.feature_major:
                rows.into(layout.block(slot.host_in).numpy())  # one copy per feature
            else:
                layout.matrix(slot.host_in).copy_(torch.as_tensor(as_rows(rows)))
            marker = self.device.start(slot, layout, compute)
        except BaseException:
            try:  # refilled only once nothing queued reads it
                self.device.settle(slot)
            finally:
                self._give_back(slot)
            raise
        return _InFlight(self, slot, n, marker)

    def close(self) -> None:
        """Wake every ``submit`` waiting for a slot, with :class:`Stopped`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._made - len(self._free)

    def _take(self, stop: threading.Event | None) -> Slot:
        with self._cond:
            while True:
                if self._closed or (stop is not None and stop.is_set()):
                    raise Stopped("the run is stopping: no batch is started")
                if self._free or self._made < self.size:
                    break
                self._cond.wait(_POLL_S)
            if self._free:
                return self._free.pop()
            self._made += 1
            number = self._made - 1
        try:
            return self.device.slot(number, self.rows, self.features, self.dtype)
        except BaseException:  # no memory for it: the slot was never made
            with self._cond:
                self._made -= 1
                self._cond.notify()
            raise

    def _give_back(self, slot: Slot) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()


class _InFlight:
    """One submitted batch: :meth:`result` once, or :meth:`cancel`."""

    def __init__(self, stager: Stager, slot: Slot, rows: int, marker: Any):
        self._stager, self._slot, self._rows, self._marker = stager, slot, rows, marker
        self._lock = threading.Lock()
        self._done = False

    def result(self) -> list[np.ndarray]:
        """The outputs of this batch, copied out of the slot (which then goes back)."""
        with self._lock:
            if self._done:
                raise EngineError("a batch's result was read twice")
            self._done = True
            try:
                self._stager.device.wait(self._marker)
                return [
                    np.array(out[: self._rows].numpy(), copy=True) for out in self._slot.host_out
                ]
            finally:
                self._stager._give_back(self._slot)

    def cancel(self) -> None:
        """Give the slot back unread, once the device is done with it."""
        with self._lock:
            if self._done:
                return
            self._done = True
            try:
                self._stager.device.wait(self._marker)
            except Exception:  # a batch nobody reads: its failure is nobody's to raise
                pass
            finally:
                self._stager._give_back(self._slot)


def torch_dtype(rows: np.ndarray | torch.Tensor | Columns) -> torch.dtype:
    """The torch dtype of a batch's values."""
    if isinstance(rows, torch.Tensor):
        return rows.dtype
    return torch.from_numpy(np.empty(0, dtype=rows.dtype)).dtype


class CudaDevice:
    """The steps on a CUDA device: copy-in on a copy stream, the kernel and the copies
    out on a compute stream that waits for the copy-in's event; the marker is the
    compute stream's event after the copies out."""

    def __init__(self, device: torch.device):
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)
        self.compute_stream = torch.cuda.Stream(device)

    def slot(self, number: int, rows: int, features: int, dtype: torch.dtype) -> Slot:
        host = torch.empty(rows * features, dtype=dtype, pin_memory=True)
        device_in = torch.empty(rows * features, dtype=dtype, device=self.device)
        # Made on the current stream, used on these two: when a slot is dropped, the
        # allocator reuses its memory only after their queued work has run.
        device_in.record_stream(self.copy_stream)
        device_in.record_stream(self.compute_stream)
        return Slot(number, rows, host, device_in)

    def start(self, slot: Slot, layout: Layout, compute: Compute) -> Any:
        with torch.cuda.stream(self.copy_stream):  # one contiguous copy, either layout
            layout.block(slot.device_in).copy_(layout.block(slot.host_in), non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        self.compute_stream.wait_event(copied)
        with torch.cuda.stream(self.compute_stream), torch.inference_mode():
            outputs = compute(layout.matrix(slot.device_in))
            _fit_outputs(slot, outputs, pinned=True)
            for out, host in zip(outputs, slot.host_out, strict=True):
                host[: layout.rows].copy_(out, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.compute_stream)
        return done

    def wait(self, marker: Any) -> None:
        marker.synchronize()

    def settle(self, slot: Slot) -> None:
        self.copy_stream.synchronize()
        self.compute_stream.synchronize()


def _fit_outputs(slot: Slot, outputs: Sequence[torch.Tensor], *, pinned: bool) -> None:
    """Host output buffers of the slot's capacity for ``outputs`` (kept while their
    shapes and dtypes stay the same: every batch of a run has the same outputs)."""
    want = [((slot.rows, *o.shape[1:]), o.dtype) for o in outputs]
    have = [(tuple(h.shape), h.dtype) for h in slot.host_out]
    if want != have:
        slot.host_out = [torch.empty(shape, dtype=dtype, pin_memory=pinned)
                         for shape, dtype in want]  # fmt: skip

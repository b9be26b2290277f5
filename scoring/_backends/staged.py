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
import torch

from ..errors import EngineError

__all__ = ["CudaDevice", "Device", "Pending", "Ready", "Slot", "Stager", "Stopped"]

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


@dataclass
class Slot:
    """Buffers of one batch in flight: host rows, device rows, host outputs (allocated
    the first time an output of that shape is fetched), and the slot's number."""

    number: int
    host_in: torch.Tensor
    device_in: torch.Tensor
    host_out: list[torch.Tensor] = field(default_factory=list)


class Device(Protocol):
    """Where the three steps of a batch run, in order, without blocking the caller."""

    def slot(self, number: int, rows: int, features: int, dtype: torch.dtype) -> Slot:
        """A new slot's buffers for up to ``rows`` rows."""

    def start(self, slot: Slot, rows: int, compute: Compute) -> Any:
        """Queue copy-in, ``compute`` and copy-out of ``slot``'s first ``rows`` rows;
        returns a marker of the last step (raises only for a failure at queueing)."""

    def wait(self, marker: Any) -> None:
        """Block until the steps behind ``marker`` are done; raise the error of one
        that failed."""


class Stager:
    """A pool of slots on one device; see the module docstring."""

    def __init__(self, device: Device, *, slots: int, rows: int, features: int,
                 dtype: torch.dtype):  # fmt: skip
        if slots < 2:
            raise ValueError("a stager needs at least two slots: one filling, one in flight")
        self.device = device
        self.rows, self.features, self.dtype = rows, features, dtype
        self.size = slots
        self._free: list[Slot] = []
        self._made = 0
        self._closed = False
        self._cond = threading.Condition()

    def submit(self, rows: np.ndarray | torch.Tensor, compute: Compute, *,
               stop: threading.Event | None = None) -> _InFlight:  # fmt: skip
        """Copy ``rows`` into a free slot (waiting for one, unless ``stop`` is set) and
        queue its steps."""
        host = torch.as_tensor(rows)
        if host.shape[0] > self.rows or host.dtype != self.dtype:
            raise ValueError(f"a slot holds {self.rows} rows of {self.dtype}, not {host.shape[0]} "
                             f"of {host.dtype}")  # fmt: skip
        slot = self._take(stop)
        try:
            n = host.shape[0]
            slot.host_in[:n].copy_(host)
            marker = self.device.start(slot, n, compute)
        except BaseException:
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


class CudaDevice:
    """The steps on a CUDA device: copy-in on a copy stream, the kernel and the copies
    out on a compute stream that waits for the copy-in's event; the marker is the
    compute stream's event after the copies out."""

    def __init__(self, device: torch.device):
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)
        self.compute_stream = torch.cuda.Stream(device)

    def slot(self, number: int, rows: int, features: int, dtype: torch.dtype) -> Slot:
        host = torch.empty((rows, features), dtype=dtype, pin_memory=True)
        return Slot(number, host, torch.empty((rows, features), dtype=dtype, device=self.device))

    def start(self, slot: Slot, rows: int, compute: Compute) -> Any:
        with torch.cuda.stream(self.copy_stream):
            device_in = slot.device_in[:rows]
            device_in.copy_(slot.host_in[:rows], non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        self.compute_stream.wait_event(copied)
        with torch.cuda.stream(self.compute_stream), torch.inference_mode():
            outputs = compute(device_in)
            _fit_outputs(slot, outputs, pinned=True)
            for out, host in zip(outputs, slot.host_out, strict=True):
                host[:rows].copy_(out, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.compute_stream)
        return done

    def wait(self, marker: Any) -> None:
        marker.synchronize()


def _fit_outputs(slot: Slot, outputs: Sequence[torch.Tensor], *, pinned: bool) -> None:
    """Host output buffers of the slot's capacity for ``outputs`` (kept while their
    shapes and dtypes stay the same: every batch of a run has the same outputs)."""
    rows = slot.host_in.shape[0]
    want = [((rows, *o.shape[1:]), o.dtype) for o in outputs]
    have = [(tuple(h.shape), h.dtype) for h in slot.host_out]
    if want != have:
        slot.host_out = [torch.empty(shape, dtype=dtype, pin_memory=pinned)
                         for shape, dtype in want]  # fmt: skip

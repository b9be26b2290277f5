"""What the GPUs did while a job ran, sampled through NVML (nvidia-ml-py).

Once a second, for every visible GPU: its utilisation, the memory used on it, its power
draw, and the memory this process holds on it.  :meth:`GpuSampler.result` gives the
run report and the metrics each device's summary and the samples (for the report's
plot); without NVML, its driver or a GPU it says why in one line
(``{"absent": "..."}``), which the report prints as it is.  On a cluster, the NVIDIA
DCGM exporter's per-container metrics are the node's own view of the same GPUs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuSample", "GpuSampler"]

_MIB = 2**20


@dataclass(frozen=True)
class GpuSample:
    seconds: float  # since the sampler started
    device: int
    utilisation_pct: float
    memory_mib: float
    power_w: float | None  # None where the board does not report it
    process_mib: float  # this process's memory on the device


class GpuSampler:
    """Samples every visible GPU every ``every`` seconds while entered.  ``nvml``: the
    NVML binding (``pynvml``; a test passes a fake)."""

    def __init__(self, every: float = 1.0, *, nvml: Any = None):
        self.every = every
        self.samples: list[GpuSample] = []
        self.absent: str | None = None  # why nothing is sampled
        self.names: dict[int, str] = {}
        self._nvml = nvml
        self._handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()
        self._open()

    def _open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                self.absent = "not sampled: NVML's binding is not installed (nvidia-ml-py)"
                return
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.names = {i: _text(nvml.nvmlDeviceGetName(h)) for i, h in enumerate(self._handles)}
        except nvml.NVMLError as exc:
            self.absent = f"not sampled: no NVIDIA driver answered NVML ({exc})"
            self._handles = []
            return
        if not self._handles:
            self.absent = "none: NVML sees no GPU on this host"

    def __enter__(self) -> GpuSampler:
        self._started = time.monotonic()
        if self._handles:
            self.sample()  # one at the start, however short the run
            self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-sampler")
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.sample()  # and one at the end

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        """One sample of every device (a device that stops answering is skipped)."""
        nvml, now = self._nvml, time.monotonic() - self._started
        for index, handle in enumerate(self._handles):
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle).used / _MIB
                processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                mine = sum(p.usedGpuMemory or 0 for p in processes if p.pid == os.getpid())
            except nvml.NVMLError:
                continue
            self.samples.append(
                GpuSample(now, index, util, memory, _power(nvml, handle), mine / _MIB)
            )

    def result(self) -> dict[str, Any]:
        """``{"absent": why}``, or each device's summary and every sample."""
        if self.absent is not None:
            return {"absent": self.absent}
        devices = []
        for index, name in self.names.items():
            mine = [s for s in self.samples if s.device == index]
            if not mine:
                continue
            power = [s.power_w for s in mine if s.power_w is not None]
            devices.append({
                "device": index, "name": name,
                "utilisation_mean_pct": sum(s.utilisation_pct for s in mine) / len(mine),
                "utilisation_max_pct": max(s.utilisation_pct for s in mine),
                "memory_max_mib": max(s.memory_mib for s in mine),
                "process_memory_max_mib": max(s.process_mib for s in mine),
                "power_mean_w": sum(power) / len(power) if power else None,
                "power_max_w": max(power) if power else None,
            })  # fmt: skip
        series = [[round(s.seconds, 3), s.device, s.utilisation_pct, round(s.memory_mib, 1),
                   s.power_w, round(s.process_mib, 1)] for s in self.samples]  # fmt: skip
        return {"devices": devices, "series": series, "every_seconds": self.every}


def _power(nvml: Any, handle: Any) -> float | None:
    try:
        return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # milliwatts
    except nvml.NVMLError:  # not every board reports it
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

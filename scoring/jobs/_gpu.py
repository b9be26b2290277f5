"""GPU utilisation and memory while a job runs, from NVML (absent without a GPU)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["GpuSampler"]


class GpuSampler:
    """Samples every visible GPU once a second; ``result()`` is None without NVML."""

    def __init__(self, every: float = 1.0):
        self.every = every
        self.samples: list[tuple[float, float]] = []  # (utilisation %, memory MiB)
        self._stop = threading.Event()
        self._handles: list[Any] = []
        self._thread: threading.Thread | None = None
        try:
            import pynvml
        except ImportError:  # no library: nothing to sample
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError:  # no driver or no GPU: nothing to sample
            self._handles = []

    def __enter__(self) -> GpuSampler:
        if self._handles:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        import pynvml

        while not self._stop.wait(self.every):
            for handle in self._handles:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
                self.samples.append((float(util), float(memory)))

    def result(self) -> dict[str, float] | None:
        if not self._handles:
            return None
        utils = [u for u, _ in self.samples] or [0.0]
        memory = [m for _, m in self.samples] or [0.0]
        return {
            "gpus": len(self._handles),
            "utilisation_mean_pct": sum(utils) / len(utils),
            "utilisation_max_pct": max(utils),
            "memory_max_mib": max(memory),
        }

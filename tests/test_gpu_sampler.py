"""The GPU sampler of a job's run, against a fake NVML: what it samples per device
(utilisation, memory, power, this process's memory), how the report and the metrics
show it, and the one line it gives where there is no NVML, driver or GPU."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from scoring._registry import RunRecord
from scoring.jobs._gpu import GpuSampler
from scoring.jobs._report_html import _resources


class FakeNVML:
    """NVML's calls the sampler makes, for ``devices`` GPUs; device 1 reports no power.
    Each sample of a device steps its utilisation through ``utils``."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices: int = 2, *, fail_init: bool = False):
        self.devices, self.fail_init = devices, fail_init
        self.utils = [10.0, 90.0, 50.0]
        self.calls = {i: 0 for i in range(devices)}

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        util = self.utils[self.calls[h] % len(self.utils)]
        self.calls[h] += 1
        return SimpleNamespace(gpu=util)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=(1000 + 100 * self.calls[h]) * 2**20)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 300_000  # milliwatts

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 2**20),
                SimpleNamespace(pid=-7, usedGpuMemory=4096 * 2**20)]  # fmt: skip


def test_each_device_is_summarised_from_its_samples() -> None:
    nvml = FakeNVML()
    sampler = GpuSampler(nvml=nvml)
    for _ in range(3):
        sampler.sample()
    result = sampler.result()
    assert [d["device"] for d in result["devices"]] == [0, 1]
    first, second = result["devices"]
    assert first["name"] == "Fake H200"
    assert first["utilisation_mean_pct"] == pytest.approx(50.0)
    assert first["utilisation_max_pct"] == 90.0
    assert first["memory_max_mib"] == pytest.approx(1300.0)
    assert first["process_memory_max_mib"] == pytest.approx(512.0)  # its own process only
    assert first["power_mean_w"] == pytest.approx(300.0)
    assert second["power_mean_w"] is None and second["power_max_w"] is None
    assert len(result["series"]) == 6 and result["series"][0][1:3] == [0, 10.0]


def test_a_run_is_sampled_at_its_start_and_end_however_short() -> None:
    with GpuSampler(every=3600.0, nvml=FakeNVML(devices=1)) as sampler:
        pass
    assert [s.device for s in sampler.samples] == [0, 0]


def test_no_nvml_no_driver_or_no_gpu_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the binding not installed
    said = GpuSampler().result()["absent"]
    assert said == "not sampled: NVML's binding is not installed (nvidia-ml-py)"
    said = GpuSampler(nvml=FakeNVML(fail_init=True)).result()["absent"]
    assert said == "not sampled: no NVIDIA driver answered NVML (Driver Not Loaded)"
    said = GpuSampler(nvml=FakeNVML(devices=0)).result()["absent"]
    assert said == "none: NVML sees no GPU on this host"
    with GpuSampler(nvml=FakeNVML(devices=0)) as sampler:
        pass
    assert sampler.samples == []
    for why in ("none: NVML sees no GPU on this host", None):
        html = _resources(
            {
                "resources": {"cpu_seconds": 1.0, "max_rss_mb": 10.0},
                "wall_seconds": 1.0,
                "gpu": {"absent": why} if why else None,
            }
        )
        assert f"<td>{why or 'none'}</td>" in html, html


def test_the_report_plots_and_the_metrics_label_each_device() -> None:
    sampler = GpuSampler(nvml=FakeNVML())
    for _ in range(3):
        sampler.sample()
    gpu = sampler.result()
    html = _resources({"resources": {"cpu_seconds": 1.0, "max_rss_mb": 10.0},
                       "wall_seconds": 1.0, "gpu": gpu})  # fmt: skip
    assert "GPU 0 (Fake H200)" in html and "utilisation 50% mean, 90% max" in html
    assert "this process 512 MiB" in html and "power 300 W mean" in html
    assert "<svg" in html  # utilisation and memory over the run
    prom = pytest.importorskip("prometheus_client")
    from scoring.jobs._metrics import _gauges

    started = datetime(2026, 11, 28, 0, 30, tzinfo=timezone.utc)
    summary = {k: v for k, v in gpu.items() if k != "series"}
    record = RunRecord(job="nightly", started_at=started, finished_at=started, outcome="ok",
                       exit_code=0, gpu=summary)  # fmt: skip
    text = prom.generate_latest(_gauges(record)).decode()
    run = started.isoformat()
    for device in ("0", "1"):
        labels = f'device="{device}",job="nightly",run="{run}"'
        assert f"scoring_job_gpu_utilisation_mean_percent{{{labels}}} 50.0" in text
        assert f"scoring_job_gpu_process_memory_max_mebibytes{{{labels}}} 512.0" in text
    assert 'scoring_job_gpu_power_mean_watts{device="0"' in text
    assert 'scoring_job_gpu_power_mean_watts{device="1"' not in text  # not reported

"""The GPU suite (benchmarks/gpu/suite.py) runs here with tiny sizes on the CPU, so that
the one call a lent GPU gets cannot fail on code nobody ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

SUITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "suite.py"


def test_dry_run_writes_every_section(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SUITE), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = {"walk", "parity", "throughput", "e2e", "job", "oom", "hypothesis", "packages",
             "explain"}  # fmt: skip
    reports = {"gpu_job.html", "gpu_job.json"}  # the job's own report, beside the tables
    assert {p.name for p in tmp_path.iterdir()} == {f"gpu_{n}.md" for n in names} | reports
    job = (tmp_path / "gpu_job.md").read_text()
    said = json.loads((tmp_path / "gpu_job.json").read_text())
    assert said["rows"] > 0 and f"{said['rows']:,} rows" in job and "failed" not in job
    gpu = said["gpu"]  # on a GPU host its samples; here the sampler's one line, as said
    assert ("| device |" in job) == ("devices" in gpu) and ("absent" in gpu) != ("devices" in gpu)
    if "absent" in gpu:
        assert f"GPU: {gpu['absent']}" in job
    walk = (tmp_path / "gpu_walk.md").read_text()
    rows = [line for line in walk.splitlines() if line.startswith("| ") and "| model" not in line]
    assert len(rows) == 4 and "Error" not in walk
    assert all(row.split(" | ")[1] == "0" for row in rows)  # no margin differs
    parity = (tmp_path / "gpu_parity.md").read_text()
    assert "| fused |" in parity and "DIFFER" not in parity and "Error" not in parity
    throughput = (tmp_path / "gpu_throughput.md").read_text()
    # Each fused row names the schedule it measured; the last column, what the machine
    # code predicts (the tiny models have no prediction).
    assert throughput.count("| tensor fused (") == 3 and "Error" not in throughput
    assert "| predicted rows/s |" in throughput
    assert all("compile" in row.split(" | ")[9] for row in rows)  # first rows, broken down
    assert "1 passed" in (tmp_path / "gpu_hypothesis.md").read_text()
    packages = (tmp_path / "gpu_packages.md").read_text()
    assert "| no | 0.0e+00 |" in packages  # loaded without Dynamo, the same outputs
    explain = (tmp_path / "gpu_explain.md").read_text()
    assert explain.count("| tensor |") == 3 and "Error" not in explain
    oom = (tmp_path / "gpu_oom.md").read_text()
    assert ("Skipped" in oom) != torch.cuda.is_available()

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
    assert len(rows) == 3 and "Error" not in walk
    assert all(row.split(" | ")[1] == "0" for row in rows)  # no margin differs
    parity = (tmp_path / "gpu_parity.md").read_text()
    assert "| fused |" in parity and "DIFFER" not in parity and "Error" not in parity
    throughput = (tmp_path / "gpu_throughput.md").read_text()
    # Each fused row names the schedule it measured; the last column, what the machine
    # code predicts (the tiny models have no prediction).
    assert throughput.count("| tensor fused (") == 3 and "Error" not in throughput
    assert "| predicted rows/s |" in throughput
    assert all("compile" in row.split(" | ")[-1] for row in rows)  # first rows, broken down
    assert "1 passed" in (tmp_path / "gpu_hypothesis.md").read_text()
    packages = (tmp_path / "gpu_packages.md").read_text()
    assert "| no | 0.0e+00 |" in packages  # loaded without Dynamo, the same outputs
    explain = (tmp_path / "gpu_explain.md").read_text()
    assert explain.count("| tensor |") == 3 and "Error" not in explain
    oom = (tmp_path / "gpu_oom.md").read_text()
    assert ("Skipped" in oom) != torch.cuda.is_available()


def _probe_wheel(folder: Path, log: Path) -> Path:
    """A wheel holding only a ``sitecustomize`` that records each Python process that
    starts with the wheels' folder on its path, as the GPU machine's carried packages
    are found: by ``PYTHONPATH`` alone."""
    import zipfile

    name = "scoring_rehearsal_probe-1.0"
    line = "f'{os.getpid()} {sys.argv[:1]}\\n'"  # one line per process: its id
    code = f"import os, sys\nopen({str(log)!r}, 'a').write({line})\n"
    meta = "Metadata-Version: 2.1\nName: scoring-rehearsal-probe\nVersion: 1.0\n"
    wheel = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    path = folder / f"{name}-py3-none-any.whl"
    info = "scoring_rehearsal_probe-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sitecustomize.py", code)
        archive.writestr(f"{info}/METADATA", meta)
        archive.writestr(f"{info}/WHEEL", wheel)
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_the_prepared_call_as_the_gpu_machine_runs_it(tmp_path: Path) -> None:
    """call.sh exactly as the README gives it, with a ``python3`` of its own on PATH, the
    wheels installed into a folder found through PYTHONPATH alone, and $OUT set: every
    table lands under $OUT with numbers, and every Python process the suite starts (a new
    model's first rows) still finds the carried wheels."""
    wheels, out, log = tmp_path / "wheels", tmp_path / "out", tmp_path / "started.log"
    wheels.mkdir()
    out.mkdir()
    _probe_wheel(wheels, log)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(out),
           "WHEELS": str(wheels), "SITE": str(tmp_path / "site"), "SECTIONS": "walk,job",
           "TMPDIR": str(tmp_path)}  # fmt: skip
    call = SUITE.parent / "call.sh"
    done = subprocess.run([str(call), "--dry-run"], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = {p.name for p in out.iterdir()}
    assert written == {"gpu_walk.md", "gpu_job.md", "gpu_job.html", "gpu_job.json", "gpu_log.txt"}
    walk = (out / "gpu_walk.md").read_text()
    rows = [line for line in walk.splitlines() if line.startswith("| ") and "| model" not in line]
    assert len(rows) == 3 and all("compile" in row for row in rows), walk  # first rows timed
    assert "Error" not in walk and "failed" not in (out / "gpu_job.md").read_text()
    started = log.read_text().splitlines()
    # The suite itself, and each recipe's first-rows child: all found the carried folder.
    assert len({line.split()[0] for line in started}) >= 1 + len(rows), started

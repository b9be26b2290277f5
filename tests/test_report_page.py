"""The job report as a person sees it: rendered by headless Chromium (Debian's
``chromium`` package), its screenshot not blank, the key numbers in its DOM, nothing
fetched from a network.  Skips where Chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb

import scoring
from scoring.jobs import load_job, run_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)"
)
FEATURES = 6
#: As root (containers, CI) Chromium runs only without its sandbox.
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def _chromium(*args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run([CHROMIUM, *HEADLESS, *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of one job (history), the model registered with a sample (drift), one
    feature shifted (a breached check, as a warning), and a run that failed."""
    root = tmp_path_factory.mktemp("page")
    rng = np.random.default_rng(7)
    X = rng.normal(size=(8_000, FEATURES)).astype(np.float32)
    model = xgb.XGBClassifier(n_estimators=30, max_depth=4).fit(X, X[:, 0] > X[:, 1])
    registry = scoring.Registry(root / "registry")
    names = [f"f{j}" for j in range(FEATURES)]
    registry.register("churn", model, sample=pd.DataFrame(X[:4_000], columns=names))
    (root / "in").mkdir()
    for i in range(3):
        Z = rng.normal(size=(10_000, FEATURES)).astype(np.float32)
        Z[:, 2] += 1.0
        columns = {
            "id": np.arange(i * 10_000, (i + 1) * 10_000),
            **dict(zip(names, Z.T, strict=True)),
        }
        pq.write_table(pa.table(columns), root / "in" / f"part-{i}.parquet")
    for run, model_ref in [("a", "churn@1"), ("b", "churn@1"), ("failed", "churn@2")]:
        job = root / f"{run}.toml"
        job.write_text(
            f'name = "nightly"\nmodel = "{model_ref}"\nregistry = "registry"\ninput = "in"\n'
            f'output = "out-{run}"\ndeadline = "30m"\nkeep = ["id"]\n'
            "[checks]\nmax_psi = 0.2\nmin_rows = 1000\n"
        )
        try:
            run_job(load_job(job), progress=False)
        except scoring.errors.ScoringError:
            assert run == "failed"
    return root


def test_the_report_renders_with_its_key_numbers(reports: Path) -> None:
    page = reports / "out-b" / "_scoring_report.html"
    data = json.loads((reports / "out-b" / "_scoring_report.json").read_text())
    assert not re.search(r"(src|href)=['\"]?https?:", page.read_text())  # no network
    dom = _chromium("--dump-dom", page.as_uri())
    assert "finished in time" in dom and "30,000" in dom and data["sha256"] in dom
    assert "rows out = rows in" in dom and "churn@1" in dom
    assert "feature 'f2' drifted" in dom  # the breached check, on the page and in the JSON
    assert data["checks"]["breaches"] and "f2" in data["checks"]["breaches"][0]
    assert "History against the window" in dom and "2 run(s) recorded" in dom
    assert len(re.findall(r"<svg", dom)) >= 3  # timeline, score histogram, history
    assert "Files (3)" in dom and "part-2.parquet" in dom
    assert "Workers" not in dom  # one local worker: no per-worker section

    shot = reports / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 100 and float(pixels.std()) > 0.05  # text, tables, plots: not blank


def test_a_failed_run_renders_what_a_rerun_does(reports: Path) -> None:
    page = reports / "out-failed" / "_scoring_report.html"
    dom = _chromium("--dump-dom", page.as_uri())
    assert "FAILED: nothing was published" in dom
    assert "has no version 2" in dom and "a rerun fails the same way" in dom

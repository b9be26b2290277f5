"""The job report as a person sees it: rendered by headless Chromium (Debian's
``chromium`` package), its screenshot not blank, the key numbers in its DOM, nothing
fetched from a network.  Skips where Chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb

import scoring
from scoring.jobs import load_job, run_job
from scoring.jobs._report import DEADLINE_WARNING
from scoring.jobs._report_html import render_html

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
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    runs = [("a", "churn@1", "30m", 0.2), ("refused", "churn@1", passed, 0.2),
            ("b", "churn@1", "30m", 0.2), ("failed", "churn@2", "30m", 0.2),
            ("clean", "churn@1", "30m", 100.0)]  # fmt: skip
    for run, model_ref, deadline, psi in runs:
        job = root / f"{run}.toml"
        name = "nightly" if run != "clean" else "clean"
        job.write_text(
            f'name = "{name}"\nmodel = "{model_ref}"\nregistry = "registry"\ninput = "in"\n'
            f'output = "out-{run}"\ndeadline = "{deadline}"\nkeep = ["id"]\n'
            f"[checks]\nmax_psi = {psi}\nmin_rows = 1000\n"
        )
        try:
            run_job(load_job(job), progress=False)
        except scoring.errors.ScoringError:
            assert run in ("failed", "refused")
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
    assert "History against the window" in dom and "3 run(s) recorded" in dom
    for outcome in ("run ok", "run refused", "window"):  # every bar's colour in the legend
        assert f">{outcome}</text>" in dom, outcome
    assert "every check passed" not in dom and 'class="note"' in dom  # a breach: amber
    # Times to the second; the score histogram's axis in score values, not bin numbers.
    started = re.search(r"<th>started</th><td>([^<]+)</td>", dom)
    assert started and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", started[1])
    assert not re.search(r"T\d\d:\d\d:\d\d\.\d", dom)
    edges = data["checks"]["histograms"][0]["edges"]
    assert f">{edges[0]:.3g}</text>" in dom and ">null</text>" in dom
    assert "bin (reference deciles" not in dom
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


def test_passed_checks_and_resolved_warnings_read_as_such(reports: Path) -> None:
    """A run whose checks all passed shows them in the success style; a deadline warning
    from early in a run that then met its deadline is shown resolved, not as a warning."""
    page = reports / "out-clean" / "_scoring_report.html"
    dom = _chromium("--dump-dom", page.as_uri())
    assert re.search(r"<ul class=\"pass\"><li>every check passed</li></ul>", dom), dom[-3000:]
    data = json.loads((reports / "out-clean" / "_scoring_report.json").read_text())
    early = f"{DEADLINE_WARNING}: projected finish 2026-11-25T01:50:00+00:00"
    data["resolved_warnings"] = [early]
    (reports / "resolved.html").write_text(render_html(data))
    dom = _chromium("--dump-dom", (reports / "resolved.html").as_uri())
    assert re.search(r"<li class=\"resolved\"><code>job will miss its deadline[^<]*</code> "
                     r"resolved: the run met its deadline</li>", dom)  # fmt: skip
    shot = reports / "resolved.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,3000",
              (reports / "resolved.html").as_uri())  # fmt: skip
    assert shot.stat().st_size > 10_000


def test_a_refused_run_renders_why_and_what_a_rerun_does(reports: Path) -> None:
    dom = _chromium("--dump-dom", (reports / "out-refused" / "_scoring_report.html").as_uri())
    assert "REFUSED: the plan misses the deadline; nothing was scored" in dom
    assert "NOT feasible" in dom and "a rerun is planned again" in dom
    assert not list((reports / "out-refused").glob("*.parquet"))


def test_input_files_an_engine_s_own_committer_wrote_render_without_outputs(
    reports: Path,
) -> None:
    """Spark's committer writes part files of its own: the manifest records each input
    file's rows, with no output file or bytes of its own (this crashed the report)."""
    data = json.loads((reports / "out-clean" / "_scoring_report.json").read_text())
    data["files"] = [{"relpath": "part-0.parquet", "rows": 1200, "bytes": None, "output": None}]
    page = render_html(data)
    assert "<td>part-0.parquet</td><td class='n'>1,200</td><td>-</td><td>-</td>" in page

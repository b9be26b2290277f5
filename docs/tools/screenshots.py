"""``make screenshots``: the job report pictures in docs/, made again from real runs.

- ``demo_report.png``: the report of ``scoring demo`` (200,000 rows);
- ``report_checks_history.png``: a nightly job's third run, with a feature shifted (a
  breached drift check, as a warning) and a history holding a refused run;
- ``report_passed_resolved.png``: a run whose checks all passed, with a deadline warning
  raised early and resolved (added to that run's report data to show how one reads).

Each page is rendered by headless Chromium (Debian's ``chromium`` package), as a browser
shows it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import xgboost as xgb

import scoring
from scoring.jobs import load_job, run_job
from scoring.jobs._report import DEADLINE_WARNING
from scoring.jobs._report_html import render_html

DOCS = Path(__file__).parents[1]
FEATURES = 6


def shoot(page: Path, png: Path, *, height: int) -> None:
    """``page`` as Chromium renders it, 1280 pixels wide."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("make screenshots needs headless Chromium: apt-get install chromium")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size=1280,{height}", page.as_uri()],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    print(f"wrote {png.relative_to(DOCS.parent)}")


def demo(work: Path) -> Path:
    scoring_cli = Path(sys.executable).with_name("scoring")
    subprocess.run([str(scoring_cli), "demo", "--rows", "200000", "--registry", str(work)],
                   check=True, cwd=work)  # fmt: skip
    (report,) = work.rglob("_scoring_report.html")
    return report


def nightly(root: Path) -> tuple[Path, Path]:
    """Runs of one job: two on time, one refused (its deadline passed), the third with
    a feature shifted; and a clean job whose checks pass."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(8_000, FEATURES)).astype(np.float32)
    model = xgb.XGBClassifier(n_estimators=30, max_depth=4).fit(X, X[:, 0] > X[:, 1])
    names = [f"f{j}" for j in range(FEATURES)]
    registry = scoring.Registry(root / "registry")
    registry.register("churn", model, sample=pd.DataFrame(X[:4_000], columns=names))
    registry.set_alias("churn", "production", 1)
    (root / "in").mkdir()
    for i in range(3):
        Z = rng.normal(size=(50_000, FEATURES)).astype(np.float32)
        Z[:, 2] += 1.0
        columns = {"customer_id": np.arange(i * 50_000, (i + 1) * 50_000),
                   **dict(zip(names, Z.T, strict=True))}  # fmt: skip
        pq.write_table(pa.table(columns), root / "in" / f"part-{i}.parquet")
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%H:%M")
    runs = [("a", "nightly", "30m", 0.2), ("refused", "nightly", passed, 0.2),
            ("b", "nightly", "30m", 0.2), ("clean", "clean", "30m", 100.0)]  # fmt: skip
    for run, name, deadline, psi in runs:
        job = root / f"{run}.toml"
        job.write_text(
            f'name = "{name}"\nmodel = "churn@production"\nregistry = "registry"\n'
            f'input = "in"\noutput = "out-{run}"\ndeadline = "{deadline}"\n'
            f'keep = ["customer_id"]\n[checks]\nmax_psi = {psi}\nmin_rows = 1000\n'
        )
        # The refused run raises; its report and its place in the history stay.
        with contextlib.suppress(scoring.errors.DeadlineError):
            run_job(load_job(job), progress=False)
    data = json.loads((root / "out-clean" / "_scoring_report.json").read_text())
    data["resolved_warnings"] = [f"{DEADLINE_WARNING}: projected finish past the deadline"]
    resolved = root / "resolved.html"
    resolved.write_text(render_html(data))
    return root / "out-b" / "_scoring_report.html", resolved


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="scoring-screenshots-") as tmp:
        work = Path(tmp)
        (work / "demo").mkdir()
        shoot(demo(work / "demo"), DOCS / "demo_report.png", height=2400)
        (work / "jobs").mkdir()
        history, resolved = nightly(work / "jobs")
        shoot(history, DOCS / "report_checks_history.png", height=3000)
        shoot(resolved, DOCS / "report_passed_resolved.png", height=3000)


if __name__ == "__main__":
    main()

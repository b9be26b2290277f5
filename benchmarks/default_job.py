"""The job as a user runs it: ``scoring score`` with default options against the same
command with each backend named, on CPU, every run a fresh process, in alternation.

For each benchmark shape (XGBoost 500x8, LightGBM 500x256, a scikit-learn forest
500x8) the model is saved in its framework's safe format and 1M rows of its 28 float32
features are written to one Parquet file.  Each round then runs, in turn and each in a
new process:

- ``scoring score --model FILE --input IN --output OUT`` (the default: ``auto``);
- the same with ``--backend native``;
- the same with ``--backend tensor`` (on CPU, the shared kernel, ``fused``).

A run's rate is the rows/s its summary line reports (what the user reads); its wall
seconds include the process's start and the model's compile.  A figure is the median
over rounds, beside the best and the rounds' range; the default's ratio is to the
fastest named backend's median, and the backend it chose is counted per round.

    python benchmarks/default_job.py [--rounds 5] [--rows 1000000] [--hogs N]
                                     [--only NAME ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from peers import cpu, hogs, versions  # this folder's

CANDIDATES = {"default": [], "native": ["--backend", "native"],
              "tensor": ["--backend", "tensor"]}  # fmt: skip
SUMMARY = re.compile(r"scored [\d,]+ rows in [\d.]+ s \(([\d,]+) rows/s\), model .* on (\S+) ")


def inputs(name: str, rows: int, root: Path) -> tuple[Path, Path]:
    """The shape's model file and a Parquet file of ``rows`` rows."""
    from scoring._frameworks import dump_model, framework_of
    from scoring.recipes import BENCHMARK_RECIPES, make_data

    recipe = next(r for r in BENCHMARK_RECIPES if r.name == name)
    model = recipe.build()
    model_file = root / f"{name}{Path(framework_of(model).artifact).suffix}"
    model_file.write_bytes(dump_model(model))
    X = make_data(recipe, seed=7, n_rows=rows)[0].astype(np.float32)
    table = pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])})
    data = root / f"{name}.parquet"
    pq.write_table(table, data, row_group_size=128 * 1024)
    return model_file, data


def once(model: Path, data: Path, out: Path, extra: list[str]) -> tuple[float, float, str]:
    """Rows/s from the summary line, wall seconds, and the backend/strategy it ran."""
    scoring = Path(sys.executable).with_name("scoring")
    command = [str(scoring), "score", "--model", str(model), "--input", str(data),
               "--output", str(out), *extra]  # fmt: skip
    begin = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    shutil.rmtree(out, ignore_errors=True)
    found = SUMMARY.search(done.stdout + done.stderr)  # the summary goes to stderr
    if done.returncode or not found:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return float(found.group(1).replace(",", "")), wall, found.group(2)


def shape(name: str, rows: int, rounds: int, root: Path) -> list[str]:
    model, data = inputs(name, rows, root)
    rates: dict[str, list[float]] = {c: [] for c in CANDIDATES}
    walls: dict[str, list[float]] = {c: [] for c in CANDIDATES}
    chose: Counter[str] = Counter()
    for _ in range(rounds):
        for candidate, extra in CANDIDATES.items():
            rate, wall, ran = once(model, data, root / "out", extra)
            rates[candidate].append(rate)
            walls[candidate].append(wall)
            if candidate == "default":
                chose[ran] += 1
    median = {c: statistics.median(r) for c, r in rates.items()}
    fastest = max(("native", "tensor"), key=median.__getitem__)
    lines = []
    for c, r in rates.items():
        lines.append(f"| {name} | {c} | {median[c]:,.0f} | {max(r):,.0f} | "
                     f"{min(r):,.0f}-{max(r):,.0f} | {statistics.median(walls[c]):.1f} | "
                     f"{median[c] / median[fastest]:.2f} |")  # fmt: skip
    picks = ", ".join(f"{ran} {n}x" for ran, n in chose.most_common())
    ratio = median["default"] / median[fastest]
    lines.append(f"| {name} | **default / fastest ({fastest})** | | | | | "
                 f"**{ratio:.2f}** (default ran: {picks}) |")  # fmt: skip
    return lines


def main() -> None:
    from scoring.recipes import BENCHMARK_RECIPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--hogs", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=None, help="recipe names to run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    names = [r.name for r in BENCHMARK_RECIPES if not args.only or r.name in args.only]
    before = os.getloadavg()[0]
    lines = []
    with tempfile.TemporaryDirectory() as tmp, hogs(args.hogs):
        for name in names:
            print(f"{name} ...", flush=True)
            lines += shape(name, args.rows, args.rounds, Path(tmp))
    after = os.getloadavg()[0]
    head = [f"# The default job against each backend ({date.today()})", "",
            f"`python benchmarks/default_job.py --rounds {args.rounds} --rows {args.rows} "
            f"--hogs {args.hogs}` on {os.cpu_count()} CPU cores ({cpu()}), no GPU; "
            f"{args.hogs} busy processes (`yes`) beside it; load average (1 min) "
            f"{before:.2f} before, {after:.2f} after. Versions: {versions()}.", "",
            "Every run is `scoring score` in a fresh process; rows/s is what its summary "
            "line reports, wall s the process's median seconds (start and compile "
            "included).", "",
            "| model | command | rows/s (median) | best | range | wall s | / fastest |",
            "|---|---|---:|---:|---|---:|---|"]  # fmt: skip
    text = "\n".join(head + lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

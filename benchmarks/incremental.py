"""An incremental run against a full one, on a Delta table whose rows change by 1% a
round: what a nightly job over a large table sees.

A Delta table of ``--rows`` rows (the XGBoost 500x8 shape's 28 float32 features and an
``id``; files of 500,000 rows; its change data feed on) is scored once into a Delta
output merged on ``id`` (``scoring score --incremental --key id``: the first run is a
full one).  Each round then changes 1% of the rows (half appended, three tenths updated,
two tenths deleted, each in one id range, as a day's data arrives) and runs, each in a
new process, as a user runs them:

- ``scoring score ... --incremental --key id`` into that output (what changed only);
- ``scoring score ... --mode overwrite`` into another output (every row again).

Seconds are each process's wall time (start and compile included); rows/s what its
summary line reports.  After the last round both outputs are read back and compared
row for row (same ids, same values): the incremental output must equal the full one.

    python benchmarks/incremental.py [--rows 10000000] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
from peers import cpu, versions  # this folder's

FILE_ROWS = 500_000
FEED = {"delta.enableChangeDataFeed": "true"}
SUMMARY = re.compile(r"scored ([\d,]+) rows in [\d.]+ s \(([\d,]+) rows/s\)")


def _rows(recipe: object, start: int, n: int) -> pa.Table:
    from scoring.recipes import make_data

    X = make_data(recipe, seed=start, n_rows=n)[0].astype(np.float32)  # type: ignore[arg-type]
    columns = {f"f{j}": X[:, j] for j in range(X.shape[1])}
    return pa.table({"id": np.arange(start, start + n, dtype=np.int64), **columns})


def build(root: Path, rows: int) -> tuple[Path, Path, object]:
    """The model file and the table (written in files of FILE_ROWS rows)."""
    from deltalake import write_deltalake

    from scoring._frameworks import dump_model, framework_of
    from scoring.recipes import BENCHMARK_RECIPES

    recipe = next(r for r in BENCHMARK_RECIPES if r.name == "xgb_500x8")
    model = recipe.build()
    model_file = root / f"model{Path(framework_of(model).artifact).suffix}"
    model_file.write_bytes(dump_model(model))
    table = root / "features"
    for start in range(0, rows, FILE_ROWS):
        part = _rows(recipe, start, min(FILE_ROWS, rows - start))
        write_deltalake(str(table), part, mode="append", configuration=FEED)
    return model_file, table, recipe


def change(table: Path, recipe: object, *, rows: int, round_: int) -> dict[str, int]:
    """1% of the rows: appended, updated and deleted, each in one id range."""
    from deltalake import DeltaTable, write_deltalake

    n = rows // 100
    added, updated, deleted = n // 2, n * 3 // 10, n - n // 2 - n * 3 // 10
    top = rows + round_ * added
    write_deltalake(str(table), _rows(recipe, top, added), mode="append")
    dt = DeltaTable(str(table))
    low = (round_ * 2 + 1) * FILE_ROWS + 1000
    dt.update(predicate=f"id >= {low} AND id < {low + updated}", updates={"f0": "f0 + 1.0"})
    low = (round_ * 2 + 2) * FILE_ROWS + 1000
    dt.delete(f"id >= {low} AND id < {low + deleted}")
    return {"inserted": added, "updated": updated, "deleted": deleted}


def score(model: Path, table: Path, out: Path, *extra: str) -> tuple[float, int, float]:
    """One ``scoring score`` in a new process: its wall seconds, rows and rows/s."""
    command = [str(Path(sys.executable).with_name("scoring")), "score", "--model", str(model),
               "--input", str(table), "--output", f"delta:{out}", "--keep", "id",
               *extra]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"scoring failed: {done.stderr[-2000:]}")
    found = SUMMARY.search(done.stderr + done.stdout)
    if found is None and "nothing to do" in done.stderr + done.stdout:
        return seconds, 0, 0.0
    if found is None:
        raise SystemExit(f"no summary line in: {(done.stderr + done.stdout)[-2000:]}")
    return seconds, int(found.group(1).replace(",", "")), float(found.group(2).replace(",", ""))


def same(a: Path, b: Path) -> tuple[int, float]:
    """Rows of each output, and the largest difference of their probabilities, row by row."""
    from deltalake import DeltaTable

    left, right = (
        DeltaTable(str(p)).to_pandas(columns=["id", "probability"]).sort_values("id")
        for p in (a, b)
    )
    if not np.array_equal(left.id.to_numpy(), right.id.to_numpy()):
        raise SystemExit("the incremental output's ids differ from the full run's")
    gap = float(np.max(np.abs(left.probability.to_numpy() - right.probability.to_numpy())))
    return len(left), gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    results = Path(__file__).parent / "results"
    parser.add_argument("--out", type=Path, default=results / "incremental_cpu.md")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        model, table, recipe = build(root, args.rows)
        built = time.perf_counter() - began
        first = score(model, table, root / "incremental", "--incremental", "--key", "id")
        rounds = []
        for round_ in range(args.rounds):
            changed = change(table, recipe, rows=args.rows, round_=round_)
            inc = score(model, table, root / "incremental", "--incremental", "--key", "id")
            full = score(model, table, root / "full", "--mode", "overwrite")
            rounds.append((changed, inc, full))
            print(f"round {round_ + 1}: incremental {inc[0]:.1f} s ({inc[1]:,} rows), "
                  f"full {full[0]:.1f} s ({full[1]:,} rows)", flush=True)  # fmt: skip
        # The same command once more, nothing changed: what it costs whatever the change.
        idle = [score(model, table, root / "incremental", "--incremental", "--key", "id")[0]
                for _ in range(args.rounds)]  # fmt: skip
        rows, gap = same(root / "incremental", root / "full")
    after = os.getloadavg()[0]
    write(args, rounds, first=first, built=built, rows=rows, gap=gap, load=(load, after),
          idle=idle)  # fmt: skip


def _cell(values: list[float], unit: str = "") -> str:
    """The median, the best (fewest seconds, most rows/s) and the range."""
    fmt = "{:,.1f}" if unit == "s" else "{:,.0f}"
    best = min(values) if unit == "s" else max(values)
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(statistics.median(values))} (best {fmt.format(best)}, {low}-{high})"


def write(args: argparse.Namespace, rounds: list, *, first: tuple[float, int, float],
          built: float, rows: int, gap: float, load: tuple[float, float],
          idle: list[float]) -> None:  # fmt: skip
    inc_s = [r[1][0] for r in rounds]
    full_s = [r[2][0] for r in rounds]
    ratio = statistics.median(full_s) / statistics.median(inc_s)
    changed = rounds[0][0]
    lines = [
        f"# Incremental runs against full ones ({date.today()})",
        "",
        f"`python benchmarks/incremental.py --rows {args.rows} --rounds {args.rounds}` on "
        f"{os.cpu_count()} CPU cores ({cpu()}), no GPU; load average (1 min) {load[0]:.2f} "
        f"before, {load[1]:.2f} after. Versions: {versions()}.",
        "",
        f"A Delta table of {args.rows:,} rows (28 float32 features and an id, files of "
        f"{FILE_ROWS:,} rows, change data feed on; built in {built:.0f} s) scored once "
        f"into a Delta output merged on `id` (the first incremental run is a full one: "
        f"{first[0]:.1f} s, {first[1]:,} rows). Each round changes 1% of the rows "
        f"({changed['inserted']:,} appended, {changed['updated']:,} updated, "
        f"{changed['deleted']:,} deleted), then runs `scoring score --incremental --key id` "
        "into that output and `scoring score --mode overwrite` into another, each in a new "
        "process. Seconds: the process's wall time (start and compile included); rows/s: "
        "what its summary line reports. Median of rounds, beside the best and the range.",
        "",
        "| run | rows scored | seconds | rows/s |",
        "|---|---:|---:|---:|",
        f"| incremental | {rounds[0][1][1]:,} | {_cell(inc_s, 's')} | "
        f"{_cell([r[1][2] for r in rounds])} |",
        f"| full | {rounds[0][2][1]:,} | {_cell(full_s, 's')} | "
        f"{_cell([r[2][2] for r in rounds])} |",
        f"| incremental, nothing changed | 0 | {_cell(idle, 's')} | |",
        f"| **full / incremental seconds** | | **{ratio:.1f}x** | |",
        "",
        "The run with nothing changed is the incremental path's cost whatever the change "
        "(the process's start, the model's compile, the input's and output's logs): the "
        f"change itself took {statistics.median(inc_s) - statistics.median(idle):.1f} s of "
        f"the incremental run's {statistics.median(inc_s):.1f} s, the full run "
        f"{statistics.median(full_s) - statistics.median(idle):.1f} s beyond it.",
        "",
        f"After the last round both outputs hold {rows:,} rows with the same ids; the "
        f"largest difference of their probabilities is {gap:.1e}.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

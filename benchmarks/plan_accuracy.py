"""How close ``scoring plan``'s estimate comes to the run it plans.

For each size: write the rows (the demo model's 28 features, 500k rows per file) and
flush them to disk, register the demo model (XGBoost, 500 trees of depth 8) once, plan
the job with a cold throughput cache, run it on the local engine, and record estimate
against actual.  The target is an estimate within 30% of the run; a busy machine moves
both, which is why this is a benchmark and not a unit test.

    python benchmarks/plan_accuracy.py [--rows 3000000 10000000] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE_ROWS = 500_000


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {gpu}, torch {torch.__version__}"


def write_rows(root: Path, rows: int) -> None:
    from scoring.recipes import DEMO_RECIPE, make_data

    root.mkdir(parents=True)
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        n = min(FILE_ROWS, rows - start)
        X, _ = make_data(DEMO_RECIPE, seed=i, n_rows=n)
        X = np.asarray(X, dtype=np.float32)
        columns = {f"f{j}": X[:, j] for j in range(X.shape[1])}
        table = pa.table({"id": np.arange(start, start + n), **columns})
        pq.write_table(table, root / f"part-{i:04d}.parquet")


def measure(work: Path, rows: int) -> dict[str, float]:
    import scoring
    from scoring.jobs import JobSpec, make_plan

    write_rows(work / f"in-{rows}", rows)
    os.sync()  # the input's writeback would otherwise slow the planner's sample
    spec = JobSpec.model_validate({
        "name": "accuracy", "model": "demo@1", "registry": str(work / "reg"),
        "input": str(work / f"in-{rows}"), "output": str(work / f"out-{rows}"),
        "deadline": "6h", "keep": ["id"],
    })  # fmt: skip
    shutil.rmtree(work / "reg" / "cache", ignore_errors=True)  # measure, do not reuse
    plan = make_plan(spec)
    began = time.perf_counter()
    scoring.score_parquet(spec.input, spec.output, spec.model, registry=spec.registry,
                          keep=spec.keep, progress=False)  # fmt: skip
    actual = time.perf_counter() - began
    return {"rows": rows, "estimate": plan.estimated_seconds, "actual": actual,
            "rate": plan.rows_per_second}  # fmt: skip


def main() -> None:
    # No package builder beside the timings (compile_cache.py measures packages).
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[3_000_000, 10_000_000])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import scoring
    from scoring.recipes import DEMO_RECIPE

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        scoring.Registry(work / "reg").register("demo", DEMO_RECIPE.build())
        results = [measure(work, rows) for rows in args.rows]
    lines = [
        f"# Plan estimate against the run ({date.today().isoformat()})",
        "",
        f"Machine: {machine()}.",
        "Model: XGBoost 500 trees of depth 8, 28 float32 features; local engine, backend "
        "auto; the throughput cache emptied before each plan.",
        "",
        "| rows | planned rows/s | estimate s | actual s | estimate / actual |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ratio = r["estimate"] / r["actual"]
        lines.append(f"| {r['rows']:,} | {r['rate']:,.0f} | {r['estimate']:.1f} | "
                     f"{r['actual']:.1f} | {ratio:.2f} |")  # fmt: skip
    lines += ["", "Target: every ratio within 0.70-1.30."]
    out = args.out or Path(__file__).parent / "results" / "plan_accuracy_cpu.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""A scoring job against IO alone on the same files, timed in alternation in one process.

IO alone: read every column of each file with pyarrow and write the id and one float32
column per row (one output file per input file), the least any job must do.  Jobs:
``scoring.score_parquet`` into a fresh output, backends tensor (strategy ``fused``, the
shared CPU kernel) and native, on a trivial model (XGBoost, 1 tree of depth 1: the data
path alone) and on xgb_500x8 (its kernel alone is timed on an in-memory batch in the
same rounds).  The trivial model runs on two inputs: files as pyarrow writes them by
default (snappy, dictionary pages, nullable columns), and the cheapest to read (no
compression, plain encoding, required columns, 1M-row row groups), where IO alone is
fastest and the job's own cost per row shows most.  Each round runs every measurement
once, in the same order; the median of the rounds is reported beside the best.  Each
job's busy seconds per stage come from its best round's report.

    python benchmarks/e2e_pipeline.py [--rows 4000000] [--rounds 3] [--big-rows 1000000]
        [--files-at-once N]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE_ROWS = 1_000_000
FEATURES = 28
#: The trivial model on the input cheapest to read.
CHEAPEST = "trivial, cheapest input"


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {gpu}, torch {torch.__version__}"


def make_input(work: Path, rows: int, *, cheapest: bool = False) -> Path:
    """``rows`` rows of an int64 id and 28 float32 features in 1M-row files; with
    ``cheapest``, written to be read at least cost (see the module docstring)."""
    data = work / f"input-{rows}{'-cheapest' if cheapest else ''}"
    if (data / "_COMPLETE").exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    fields = [pa.field("id", pa.int64(), nullable=not cheapest)]
    fields += [pa.field(f"f{j}", pa.float32(), nullable=not cheapest) for j in range(FEATURES)]
    options: dict[str, Any] = {}
    if cheapest:
        options = {"compression": "none", "use_dictionary": False, "row_group_size": FILE_ROWS}
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        n = min(FILE_ROWS, rows - start)
        cols = {f"f{j}": rng.normal(size=n).astype(np.float32) for j in range(FEATURES)}
        table = pa.table({"id": np.arange(start, start + n), **cols}, schema=pa.schema(fields))
        pq.write_table(table, data / f"part-{i:05d}.parquet", **options)
    (data / "_COMPLETE").touch()
    return data


def models(work: Path) -> dict[str, Any]:
    import xgboost as xgb

    from scoring.recipes import DEMO_RECIPE

    rng = np.random.default_rng(1)
    X = rng.normal(size=(2000, FEATURES)).astype(np.float32)
    trivial = xgb.XGBClassifier(n_estimators=1, max_depth=1).fit(X, X[:, 0] > 0)
    big_path = work / "xgb_500x8.ubj"
    if not big_path.exists():
        DEMO_RECIPE.build().save_model(big_path)
    big = xgb.XGBClassifier()
    big.load_model(big_path)
    return {"trivial (1 tree, depth 1)": trivial, "xgb_500x8": big}


def io_alone(data: Path, out: Path) -> int:
    """Read every column, write the id and one float32 column: rows."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rows = 0
    for path in sorted(data.glob("*.parquet")):
        table = pq.read_table(path)
        first = table.column("f0").combine_chunks()
        pq.write_table(pa.table({"id": table.column("id"), "score": first}), out / path.name)
        rows += table.num_rows
    return rows


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def main() -> None:
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")  # no builder beside the timings
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument(
        "--big-rows",
        type=int,
        default=1_000_000,
        help="rows for xgb_500x8's jobs (its kernel sets their pace)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scoring-e2e-pipeline"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--import-first",
        default="scoring",
        help="the module imported before any other (import order check)",
    )
    parser.add_argument(
        "--files-at-once",
        type=int,
        default=None,
        help="the engine option files_at_once (default: one per 4 CPUs)",
    )
    args = parser.parse_args()
    importlib.import_module(args.import_first)
    options = {} if args.files_at_once is None else {"files_at_once": args.files_at_once}

    import scoring

    work = args.work
    inputs = {"trivial (1 tree, depth 1)": make_input(work, args.rows),
              CHEAPEST: make_input(work, args.rows, cheapest=True),
              "xgb_500x8": make_input(work, args.big_rows)}  # fmt: skip
    compiled = {}
    for name, model in models(work).items():
        for backend in ("tensor", "native"):
            strategy = "fused" if backend == "tensor" else "auto"  # the shared CPU kernel
            compiled[name, backend] = scoring.compile(model, backend=backend, device="auto",
                                                      strategy=strategy)  # fmt: skip
    for backend in ("tensor", "native"):  # the same model on the cheapest input
        compiled[CHEAPEST, backend] = compiled["trivial (1 tree, depth 1)", backend]
    batch = np.random.default_rng(2).normal(size=(131_072, FEATURES)).astype(np.float32)
    best: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}  # every round's seconds, for the median
    stages: dict[str, dict[str, float]] = {}
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for name, data in inputs.items():
            seconds, rows = timed(lambda d=data: io_alone(d, work / "io-out"))
            key = f"{name}|io"
            best[key] = min(best.get(key, float("inf")), seconds)
            rounds.setdefault(key, []).append(seconds)
            for backend in ("tensor", "native"):
                cm = compiled[name, backend]
                out = work / "job-out"
                shutil.rmtree(out, ignore_errors=True)
                seconds, report = timed(lambda cm=cm, d=data, o=out: scoring.score_parquet(
                    d, o, cm, keep=["id"], progress=False, engine_options=options))  # fmt: skip
                key = f"{name}|{backend}"
                rounds.setdefault(key, []).append(seconds)
                if seconds < best.get(key, float("inf")):
                    best[key], stages[key] = seconds, dict(report.stages)
            if name == "xgb_500x8":
                cm = compiled[name, "tensor"]
                cm.predict_raw(batch)  # warm
                seconds, _ = timed(lambda cm=cm: [cm.predict_raw(batch) for _ in range(4)])
                key = f"{name}|kernel"
                per_rows = seconds / (4 * len(batch)) * rows
                best[key] = min(best.get(key, float("inf")), per_rows)
                rounds.setdefault(key, []).append(per_rows)
    medians = {key: statistics.median(times) for key, times in rounds.items()}
    write_results(args, inputs, best, medians, stages, loads)


def write_results(args: Any, inputs: dict[str, Path], best: dict[str, float],
                  medians: dict[str, float], stages: dict[str, dict[str, float]],
                  loads: list[float]) -> None:  # fmt: skip
    lines = [f"# A scoring job against IO alone ({date.today()})", "",
             f"Machine: {machine()}. Load average (1 min) at each round's start: "
             f"{', '.join(f'{x:.2f}' for x in loads)}. {args.rounds} rounds, every "
             "measurement once per round in alternation: the median of the rounds, then "
             "the best; rows/s and the share of IO alone from the medians (IO alone's "
             "median too). Imported first: "
             f"`{args.import_first}`. Files at once: {args.files_at_once or 'default'}.", "",
             "| model | rows | run | seconds (median / best) | rows/s | vs IO alone | "
             "stages of the best round (busy s) |",
             "|---|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for name, data in inputs.items():
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in data.glob("*.parquet"))
        io = medians[f"{name}|io"]
        for run in ("io", "kernel", "tensor", "native"):
            key = f"{name}|{run}"
            if key not in best:
                continue
            s = medians[key]
            label = {
                "io": "IO alone",
                "kernel": "kernel alone (fused, in memory)",
                "tensor": "job, backend tensor",
                "native": "job, backend native",
            }[run]
            busy = ", ".join(f"{k} {v:.2f}" for k, v in stages.get(key, {}).items())
            lines.append(f"| {name} | {rows:,} | {label} | {s:.2f} / {best[key]:.2f} | "
                         f"{rows / s:,.0f} | {io / s:.0%} | {busy} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

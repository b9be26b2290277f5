"""Rows/s of contributions (path-dependent TreeSHAP): ours against the frameworks' own.

XGBoost 100 trees x depth 6 and 500 x 8, LightGBM 500 trees of 256 leaves, on 28
features: ``predict_contributions`` on the tensor backend against XGBoost's
``pred_contribs`` and LightGBM's ``pred_contrib`` (backend ``native``, every CPU core),
side by side in one run, each the best of three runs taken in alternation after a
warm-up (the path tables are built in the warm-up).  The largest difference between
the two is recorded with the rates.
Writes a markdown table naming the machine to benchmarks/results/.

    python benchmarks/explain_throughput.py [--scale 1.0] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from datetime import date
from pathlib import Path

import numpy as np
import torch

import scoring
from scoring._bench import rows_per_second
from scoring.recipes import EXPLAIN_RECIPES, Recipe, make_data

#: Rows timed per recipe: fewer for the larger models, whose native rate is lower.
CASES = list(zip(EXPLAIN_RECIPES, (20_000, 4_000, 2_000), strict=True))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({cpu}), {gpu}, torch {torch.__version__}"


def measure(recipe: Recipe, rows: int, device: str) -> dict[str, float | str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = recipe.build()
    X = np.asarray(make_data(recipe, seed=1, n_rows=rows)[0], dtype=np.float32)
    tensor = scoring.compile(model, backend="tensor", device=device)
    native = scoring.compile(model, backend="native", device="cpu")
    began = time.perf_counter()
    tensor.predict_contributions(X[:64])  # the path tables and answer tables
    build = time.perf_counter() - began
    ours = theirs = 0.0
    for _ in range(3):  # alternated, so that a busier moment does not favour either
        ours = max(ours, rows_per_second(tensor.predict_contributions, X, repeats=1))
        theirs = max(theirs, rows_per_second(native.predict_contributions, X, repeats=1))
    diff = np.abs(tensor.predict_contributions(X) - native.predict_contributions(X)).max()
    return {"model": recipe.name, "rows": rows, "tables_s": build, "tensor": ours,
            "native": theirs, "ratio": ours / theirs, "max_diff": float(diff)}  # fmt: skip


def table(results: list[dict[str, float | str]], device: str) -> str:
    lines = [
        f"# Contributions throughput ({date.today()})",
        "",
        f"Machine: {machine()}. Tensor on {device}; native on every CPU core.",
        "Run as `python benchmarks/explain_throughput.py`.",
        "",
        "| model | rows | tables built (s) | tensor rows/s | native rows/s | tensor/native "
        "| max difference |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['rows']:,} | {r['tables_s']:.1f} | {r['tensor']:,.0f} "
            f"| {r['native']:,.0f} | {r['ratio']:.2f}x | {r['max_diff']:.2g} |"
        )
    lines += [
        "",
        "Max difference: XGBoost's TreeSHAP adds in float32, LightGBM's and ours in float64.",
        "Ours answers paths of few distinct features from tables built once; LightGBM's",
        "deep trees (paths of up to 20 features) keep the most arithmetic per row.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="rows timed, as a fraction")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="benchmarks/results/explain_throughput_cpu.md")
    args = parser.parse_args()
    results = []
    for recipe, rows in CASES:
        results.append(measure(recipe, max(256, int(rows * args.scale)), args.device))
        print(results[-1], flush=True)
    text = table(results, args.device)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

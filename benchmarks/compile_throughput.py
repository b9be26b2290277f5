"""Rows/s of every backend and strategy on the Hummingbird benchmark shape.

500 trees of depth 8 (LightGBM: 256 leaves) on 28 features, for XGBoost, LightGBM and a
scikit-learn random forest: native, hummingbird (each strategy, verify=False since it
is known to diverge) and tensor (each strategy, fused included: its compile happens in
the untimed warm-up), on CPU and on CUDA when present; then native and ``fused`` on CPU
timed in alternation (:func:`head_to_head`), which is what the ratios are taken from.
Writes markdown tables naming the machine to benchmarks/results/.

    python benchmarks/compile_throughput.py [--rows N] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch

import scoring
from scoring._bench import rows_per_second
from scoring._parity import max_error
from scoring.recipes import BENCHMARK_RECIPES, make_data

STRATEGIES = ("gemm", "tree_traversal", "perfect_tree_traversal")
TENSOR_STRATEGIES = (*STRATEGIES, "fused")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({cpu}), {gpu}, torch {torch.__version__}"


def variants(devices: list[str]) -> list[tuple[str, str, str]]:
    out = [("native", "-", "cpu")]
    for dev in devices:
        out += [("hummingbird", s, dev) for s in STRATEGIES]
        out += [("tensor", s, dev) for s in TENSOR_STRATEGIES]
    return out


def measure(
    model: Any, X: np.ndarray, backend: str, strategy: str, device: str
) -> tuple[float, float]:
    kwargs: dict[str, Any] = {"backend": backend, "device": device}
    if backend != "native":
        kwargs["strategy"] = strategy
    if backend == "hummingbird":
        kwargs["verify"] = False
    cm = scoring.compile(model, **kwargs)
    ref = model.predict_proba(X[:5000])
    err = max_error(cm.predict_proba(X[:5000]), ref)
    # GEMM at depth 8 is orders of magnitude slower: time it on fewer rows.
    rows = X if strategy != "gemm" else X[: max(len(X) // 20, 1000)]
    return rows_per_second(cm.predict_proba, rows, repeats=2), err


def head_to_head(model: Any, X: np.ndarray, *, rounds: int = 5) -> tuple[float, float]:
    """Best rows/s of native and of ``fused`` timed in alternation: on a shared machine
    the pace drifts by tens of percent over minutes, so a ratio of two measurements
    taken minutes apart in the table above says more about the drift than the code."""
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    fns = (model.predict_proba, cm.predict_proba)
    best = [0.0, 0.0]
    for fn in fns:
        fn(X[:1024])  # warm-up (the compile)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn(X)
            best[i] = max(best[i], len(X) / (time.perf_counter() - start))
    return best[0], best[1]


def main() -> None:
    # No package builder beside the timings (compile_cache.py measures packages).
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="recipe names to run")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    tag = "cuda" if torch.cuda.is_available() else "cpu"
    out = args.out or Path(__file__).parent / "results" / f"compile_throughput_{tag}.md"
    lines = [
        f"# Compile throughput ({date.today()})",
        "",
        f"Machine: {machine()}. {args.rows:,} rows of 28 float32 features (GEMM: 1/20 of them).",
        "Error: max |ours - native| of predict_proba on 5,000 rows (relative above 1).",
        "",
        "| model | backend | strategy | device | rows/s | error vs native |",
        "|---|---|---|---|---:|---:|",
    ]
    pairs: list[str] = []
    for recipe in [r for r in BENCHMARK_RECIPES if not args.only or r.name in args.only]:
        print(f"training {recipe.name} ...", flush=True)
        model = recipe.build()
        X = np.asarray(make_data(recipe, seed=1, n_rows=args.rows)[0], dtype=np.float32)
        for backend, strategy, device in variants(devices):
            try:
                speed, err = measure(model, X, backend, strategy, device)
                row = f"{speed:,.0f} | {err:.1e}"
            except (scoring.ScoringError, MemoryError) as exc:
                row = f"failed | {type(exc).__name__}"
            line = f"| {recipe.name} | {backend} | {strategy} | {device} | {row} |"
            print(line, flush=True)
            lines.append(line)
        native, fused = head_to_head(model, X)
        pairs.append(f"| {recipe.name} | {native:,.0f} | {fused:,.0f} | {fused / native:.2f}x |")
        print(pairs[-1], flush=True)
    lines += ["", "Native and `fused` on CPU timed in alternation, 5 rounds, best of each:", "",
              "| model | native rows/s | fused rows/s | fused / native |",
              "|---|---:|---:|---:|", *pairs]  # fmt: skip
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

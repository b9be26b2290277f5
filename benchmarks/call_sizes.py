"""``fused`` against the native predictor per call, at the sizes users call with, and as
the number of features grows; on CPU, timed in alternation.

Rows per call: 1 to 1M rows of XGBoost 500x8 (``scoring.compile(model)``'s tensor
candidate, ``strategy="fused"``, against ``backend="native"``), ``predict_proba`` on a
numpy array, as an SDK user or a Spark pandas UDF calls it.  Features: 28, 500 and 2,000
features, 50,000 rows per call, as numpy rows and as an Arrow table (the form a Parquet
file or a Spark Arrow batch arrives in: ``fused`` reads its columns where they are), for
two models: the benchmark shape XGBoost 500x8 made wider (its recipe's data, 8% of
values missing), and 100 trees of depth 8 on dense data (no value missing; a label of
8 features), where XGBoost's own walk, never taking its missing-value branch, is at its
fastest.

Each round runs a few calls of every candidate in turn, each turn after a short pause
(another candidate's OpenMP threads may still be spinning), and keeps each one's median
call; a figure is the median over rounds, beside the best, with the load average and
the versions.

    python benchmarks/call_sizes.py [--rounds 5] [--hogs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from peers import hogs  # this folder's: busy processes beside a benchmark

SIZES = (1, 100, 1_000, 2_048, 4_096, 10_000, 100_000, 1_000_000)
FEATURES = (28, 500, 2_000)
FEATURE_ROWS = 50_000


def calls_for(rows: int) -> int:
    """Calls per candidate per round: more for short calls, at least three, so that the
    median call is never the first one after another candidate's."""
    return max(3, min(50, 200_000 // max(rows, 1)))


#: Seconds idle before each candidate's turn (see :func:`alternated`).
SETTLE = 0.1


def alternated(candidates: dict[str, Callable[[], Any]], *, calls: int,
               rounds: int) -> dict[str, list[float]]:  # fmt: skip
    """Each candidate's median call per round, over ``rounds`` rounds in turn.  Each
    candidate's turn starts after :data:`SETTLE` seconds idle: the one before it may
    leave threads spinning for more work (XGBoost's OpenMP team does, for tens of
    milliseconds), and a user's process runs one of them, not one after the other
    (back to back, the dense model's fused call at 28 features took 13.8 ms, 11.5 ms
    after a pause; native 25.6 and 26.2 ms)."""
    for call in candidates.values():
        call()  # warm
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, call in candidates.items():
            time.sleep(SETTLE)
            taken = []
            for _ in range(calls):
                begin = time.perf_counter()
                call()
                taken.append(time.perf_counter() - begin)
            seconds[name].append(statistics.median(taken))
    return seconds


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:,.3f} / {min(values) * 1e3:,.3f}"


def by_size(rounds: int) -> list[str]:
    import scoring
    from scoring.recipes import BENCHMARK_RECIPES, make_data

    recipe = BENCHMARK_RECIPES[0]  # xgb_500x8
    model = recipe.build()
    X, _ = make_data(recipe, seed=7, n_rows=max(SIZES))
    X = X.astype(np.float32)
    fused = scoring.compile(model, device="cpu", backend="tensor", strategy="fused")
    native = scoring.compile(model, device="cpu", backend="native")
    lines = [f"## Rows per call: {recipe.name}, `predict_proba` on numpy rows", "",
             f"`fused` rows per call on a thread: {fused.selection['fused.chunk_rows']:,.0f}.",
             "", "| rows | fused ms (median / best) | native ms (median / best) | "
             "fused / native (speed, medians) |", "|---:|---:|---:|---:|"]  # fmt: skip
    for rows in SIZES:
        batch = X[:rows]
        seconds = alternated({"fused": lambda b=batch: fused.predict_proba(b),
                              "native": lambda b=batch: native.predict_proba(b)},
                             calls=calls_for(rows), rounds=rounds)  # fmt: skip
        ratio = statistics.median(seconds["native"]) / statistics.median(seconds["fused"])
        lines.append(f"| {rows:,} | {_cell(seconds['fused'])} | {_cell(seconds['native'])} | "
                     f"{ratio:.2f}x |")  # fmt: skip
    return lines


def _benchmark_shape(n: int, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    """XGBoost 500x8 on ``n`` features of its recipe's data, and rows to score."""
    from scoring.recipes import BENCHMARK_RECIPES, make_data

    recipe = replace(BENCHMARK_RECIPES[0], name=f"xgb_500x8_{n}", n_features=n)
    rows = make_data(recipe, seed=int(rng.integers(1 << 30)), n_rows=FEATURE_ROWS)[0]
    return recipe.build(), rows.astype(np.float32)


def _dense(n: int, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    """100 trees of depth 8 on ``n`` dense features (a label of the first 8)."""
    import xgboost as xgb

    train = rng.normal(size=(20_000, n)).astype(np.float32)
    label = (train[:, :8].sum(1) + rng.normal(size=len(train)) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=100, max_depth=8, n_jobs=os.cpu_count())
    return model.fit(train, label), rng.normal(size=(FEATURE_ROWS, n)).astype(np.float32)


MODELS = {"XGBoost 500x8, 8% missing": _benchmark_shape, "100 trees, dense": _dense}


def by_features(rounds: int) -> list[str]:
    import scoring

    lines = [f"## Features: {FEATURE_ROWS:,} rows per call", "",
             "| model | features | input | fused ms (median / best) | "
             "native ms (median / best) | fused / native (speed, medians) |",
             "|---|---:|---|---:|---:|---:|"]  # fmt: skip
    rng = np.random.default_rng(11)
    for label, make in MODELS.items():
        for n in FEATURES:
            model, rows = make(n, rng)
            table = pa.table({f"f{j}": rows[:, j] for j in range(n)})
            fused = scoring.compile(model, device="cpu", backend="tensor", strategy="fused")
            native = scoring.compile(model, device="cpu", backend="native")
            for form, X in (("numpy rows", rows), ("Arrow table", table)):
                seconds = alternated({"fused": partial(fused.predict_proba, X),
                                      "native": partial(native.predict_proba, X)},
                                     calls=3, rounds=rounds)  # fmt: skip
                ratio = statistics.median(seconds["native"]) / statistics.median(seconds["fused"])
                lines.append(f"| {label} | {n:,} | {form} | {_cell(seconds['fused'])} | "
                             f"{_cell(seconds['native'])} | {ratio:.2f}x |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=0)
    parser.add_argument("--only", choices=("sizes", "features"), default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    before = os.getloadavg()[0]
    with hogs(args.hogs):
        lines = []
        if args.only in (None, "sizes"):
            lines += [*by_size(args.rounds), ""]
        if args.only in (None, "features"):
            lines += by_features(args.rounds)
    after = os.getloadavg()[0]
    versions = ", ".join(f"{d} {version(d)}" for d in ("xgboost", "torch", "pyarrow"))
    head = [f"# `fused` against native per call ({date.today()})", "",
            f"`python benchmarks/call_sizes.py --rounds {args.rounds} --hogs {args.hogs}` on "
            f"{os.cpu_count()} CPU cores ({platform.machine()}), torch threads "
            f"{torch.get_num_threads()}; {args.hogs} busy processes (`yes`) beside it; load "
            f"average (1 min) {before:.2f} before, {after:.2f} after; {versions}.", ""]  # fmt: skip
    text = "\n".join(head + lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

"""Rows/s of the ``fused`` kernel against the predictors a user would pick instead, on
the three benchmark shapes (XGBoost 500x8, LightGBM 500x256, a scikit-learn forest
500x8), on CPU, timed in alternation; each peer's agreement with native beside its speed.

Peers, each where it installs (``make peers`` builds ``.venv-peers``: this benchmark's
own environment, never the product's dependencies; see benchmarks/peers.txt):

- native: the framework's own ``predict_proba``;
- oneDAL (``daal4py.mb.convert_model``, from scikit-learn-intelex): the booster for
  XGBoost and LightGBM; for the scikit-learn forest, the very same forest through
  treelite's import (``convert_model`` takes a treelite model: a binary forest becomes
  a oneDAL regression forest whose output is P(class 1); see ``_onedal`` for its
  +inf thresholds);
- lleaves (LightGBM), compiled with LLVM;
- treelite/tl2cgen, the forest as C compiled with the system's compiler;
- ONNX Runtime, through onnxmltools (XGBoost, LightGBM) or skl2onnx (the forest).

Each peer is built once (its seconds recorded), warmed up, then every peer scores the
same rows once per round, in turn, for ``--rounds`` rounds.  A peer's rate is the
median of its rounds, beside its best round and the rounds' range; every ratio is of
medians.  The load average is recorded before and after.  Agreement: max |peer -
native| of P(class 1) on 5,000 rows.  With ``--hogs N`` the same rounds run a second
time with N busy processes (``yes``) beside them, as on a machine whose cores are taken.

First row: seconds from ``scoring.compile(model)`` of a model this process has not seen
(``auto``, and ``strategy="fused"``) to its first scored row, with the product's kernel
already built on the machine (``make install`` builds it); median and best of 3 fresh
compiles.

    .venv-peers/bin/python benchmarks/peers.py [--rows N] [--rounds R] [--hogs N]
                                               [--only NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import torch

import scoring
from scoring.recipes import BENCHMARK_RECIPES, Recipe, make_data

Predict = Callable[[np.ndarray], np.ndarray]
SETTLE = 0.1  # seconds idle before each timed turn; see alternated
PEERS = ("native", "fused", "oneDAL", "lleaves", "tl2cgen", "onnxruntime")
DISTRIBUTIONS = (
    "scoring", "torch", "xgboost", "lightgbm", "scikit-learn", "scikit-learn-intelex",
    "lleaves", "treelite", "tl2cgen", "onnxruntime",
)  # fmt: skip


def positive(p: Any) -> np.ndarray:
    """P(class 1) from whatever a predictor returns (two columns, one, or a dict list)."""
    p = np.asarray(p, dtype=np.float64)
    return p[:, 1] if p.ndim == 2 and p.shape[1] == 2 else p.reshape(len(p), -1)[:, -1]


def build(peer: str, recipe: Recipe, model: Any, X: np.ndarray, y: np.ndarray,
          tmp: Path) -> tuple[Predict, str]:  # fmt: skip
    """The peer's predictor of P(class 1) and a note (empty, or why agreement differs)."""
    if peer == "native":
        return lambda A: positive(model.predict_proba(A)), ""
    if peer == "fused":
        cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
        return lambda A: positive(cm.predict_proba(A)), ""
    if peer == "oneDAL":
        return _onedal(recipe, model, X, y)
    if peer == "lleaves":
        return _lleaves(recipe, model, tmp)
    if peer == "tl2cgen":
        return _tl2cgen(recipe, model, tmp)
    return _onnxruntime(recipe, model, X)


def _onedal(recipe: Recipe, model: Any, X: np.ndarray, y: np.ndarray) -> tuple[Predict, str]:
    import daal4py

    if recipe.framework == "sklearn":
        import treelite

        # The same trees: oneDAL's regression forest of P(class 1), averaged.  daal4py
        # reads treelite's JSON, which writes scikit-learn's +inf thresholds (splits
        # that send only missing values right) as nothing: they are given as the
        # largest double, the same split for every value but +inf.
        tl = treelite.sklearn.import_model(model)
        text = tl.dump_as_json().replace('"threshold": ,', '"threshold": 1.7976931348623157e308,')
        tl.dump_as_json = lambda: text  # type: ignore[method-assign]
        forest = daal4py.mb.convert_model(tl)
        return lambda A: positive(forest.predict(A)), "+inf thresholds as the largest double"
    booster = model.get_booster() if recipe.framework == "xgboost" else model.booster_
    converted = daal4py.mb.convert_model(booster)
    return lambda A: positive(converted.predict_proba(A)), ""


def _lleaves(recipe: Recipe, model: Any, tmp: Path) -> tuple[Predict, str]:
    if recipe.framework != "lightgbm":
        raise NotImplementedError("LightGBM only")
    import lleaves

    path = tmp / "model.txt"
    model.booster_.save_model(path)
    compiled = lleaves.Model(model_file=str(path))
    compiled.compile(cache=str(tmp / "lleaves.o"))
    return lambda A: positive(compiled.predict(A)), ""


def _tl2cgen(recipe: Recipe, model: Any, tmp: Path) -> tuple[Predict, str]:
    import tl2cgen
    import treelite

    if recipe.framework == "xgboost":
        forest = treelite.frontend.from_xgboost(model.get_booster())
    elif recipe.framework == "lightgbm":
        forest = treelite.frontend.from_lightgbm(model.booster_)
    else:
        forest = treelite.sklearn.import_model(model)
    lib = tmp / "forest.so"
    tl2cgen.export_lib(forest, toolchain="gcc", libpath=str(lib),
                       params={"parallel_comp": os.cpu_count() or 1})  # fmt: skip
    predictor = tl2cgen.Predictor(str(lib))
    return lambda A: positive(predictor.predict(tl2cgen.DMatrix(A))), ""


def _onnxruntime(recipe: Recipe, model: Any, X: np.ndarray) -> tuple[Predict, str]:
    import onnxruntime

    n = X.shape[1]
    if recipe.framework == "sklearn":
        from skl2onnx import to_onnx

        onx = to_onnx(model, X[:1].astype(np.float32), options={"zipmap": False})
    else:
        from onnxmltools import convert_lightgbm, convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType

        convert = convert_xgboost if recipe.framework == "xgboost" else convert_lightgbm
        kwargs = {"zipmap": False} if recipe.framework == "lightgbm" else {}
        onx = convert(model, initial_types=[("input", FloatTensorType([None, n]))], **kwargs)
    session = onnxruntime.InferenceSession(onx.SerializeToString(),
                                           providers=["CPUExecutionProvider"])  # fmt: skip
    name = session.get_inputs()[0].name
    return lambda A: positive(session.run(None, {name: A.astype(np.float32)})[1]), ""


def alternated(predictors: dict[str, Predict], X: np.ndarray,
               rounds: int) -> dict[str, list[float]]:  # fmt: skip
    """Each one's rows/s per round, every round timing each once in turn.  Each turn
    starts after :data:`SETTLE` seconds idle: the peer before it may leave threads
    spinning for more work (XGBoost's OpenMP team does), and a user's process runs one
    predictor, not one after the other."""
    rates: dict[str, list[float]] = {name: [] for name in predictors}
    for fn in predictors.values():
        fn(X[:1024])
    for _ in range(rounds):
        for name, fn in predictors.items():
            time.sleep(SETTLE)
            start = time.perf_counter()
            fn(X)
            rates[name].append(len(X) / (time.perf_counter() - start))
    return rates


def cpu() -> str:
    """The CPU's name and widest vector instructions, as Linux reports them (hosts of
    one name differ: the same benchmark has met Zen 3 and AVX-512 cores)."""
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text()
        name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                     if ln.startswith("model name")), "?")  # fmt: skip
        flags = set(next((ln for ln in info.splitlines() if ln.startswith("flags")), "").split())
        widest = next((f for f in ("avx512f", "avx2", "sse4_2") if f in flags), "none")
        return f"{name}, {widest}"
    return platform.processor() or platform.machine()


def versions() -> str:
    found = []
    for dist in DISTRIBUTIONS:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{dist} {version(dist)}")
    return ", ".join(found)


def first_row(model: Any, X: np.ndarray, **options: str) -> str:
    """Median and best of 3: seconds from compiling ``model`` afresh to its first row."""
    taken = []
    for _ in range(3):
        start = time.perf_counter()
        scoring.compile(model, device="cpu", **options).predict_proba(X[:1])
        taken.append(time.perf_counter() - start)
    return f"{statistics.median(taken):.2f} s (best {min(taken):.2f})"


@contextlib.contextmanager
def hogs(count: int) -> Any:
    """``count`` busy processes for the duration."""
    procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run(recipe: Recipe, rows: int, rounds: int, n_hogs: int) -> list[str]:
    model = recipe.build()
    X, y = make_data(recipe, seed=0)  # what build() fitted on
    X_eval = make_data(recipe, seed=7, n_rows=rows)[0].astype(np.float32)
    reference = positive(model.predict_proba(X_eval[:5000]))
    predictors: dict[str, Predict] = {}
    built: dict[str, tuple[float, float, str]] = {}
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for peer in PEERS:
            start = time.perf_counter()
            try:
                fn, note = build(peer, recipe, model, X, y, Path(tmp))
                error = float(np.max(np.abs(fn(X_eval[:5000]) - reference)))
            except NotImplementedError:  # not a peer of this framework
                continue
            except Exception as exc:  # a peer that does not install or build here
                reason = str(exc).splitlines()[0][:120]
                print(f"  {recipe.name}: {peer} skipped ({reason})", flush=True)
                skipped.append(f"| {recipe.name} | {peer} | skipped: {reason} | | | | | | |")
                continue
            predictors[peer] = fn
            built[peer] = (time.perf_counter() - start, error, note)
        lines = _rows(recipe.name, "", predictors, built, X_eval, rounds)
        if n_hogs:
            with hogs(n_hogs):
                time.sleep(2)  # the hogs running before the first round
                lines += _rows(recipe.name, f" ({n_hogs} hogs)", predictors, built, X_eval, rounds)
    auto, fused = first_row(model, X_eval), first_row(model, X_eval, strategy="fused")
    lines.append(f"| {recipe.name} | first row: auto {auto}, fused {fused} | | | | | | | |")
    return lines + skipped


Built = dict[str, tuple[float, float, str]]


def _rows(name: str, under: str, predictors: dict[str, Predict], built: Built, X: np.ndarray,
          rounds: int) -> list[str]:  # fmt: skip
    load = os.getloadavg()[0]
    rates = alternated(predictors, X, rounds)
    load_after = os.getloadavg()[0]
    median = {peer: statistics.median(r) for peer, r in rates.items()}
    fused = median.get("fused", float("nan"))
    lines = []
    for peer, rate in rates.items():
        seconds, error, note = built[peer]
        agreement = f"{error:.1e}" + (f" ({note})" if note else "")
        lines.append(f"| {name}{under} | {peer} | {median[peer]:,.0f} | {max(rate):,.0f} | "
                     f"{min(rate):,.0f}-{max(rate):,.0f} | {fused / median[peer]:.2f} | "
                     f"{seconds:.1f} | {agreement} | {load:.2f} / {load_after:.2f} |")  # fmt: skip
    others = {p: m for p, m in median.items() if p not in ("fused", "native")}
    if others:
        peer = max(others, key=others.__getitem__)
        won = sum(rates["fused"][i] > rates[peer][i] for i in range(rounds))
        lines.append(f"| {name}{under} | **fused / fastest peer ({peer})** | | | | "
                     f"**{fused / others[peer]:.2f}** | | fused faster in {won} of {rounds} "
                     "rounds | |")  # fmt: skip
    return lines


def main() -> None:
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")  # no per-model packages
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="recipe names to run")
    parser.add_argument("--hogs", type=int, default=0, help="busy processes for a second pass")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "peers_cpu.md")  # fmt: skip
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    lines = [
        f"# fused against its peers ({date.today()})",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({cpu()}), "
        f"torch threads {torch.get_num_threads()}. Versions: {versions()}.",
        f"{args.rows:,} rows of 28 float32 features; {args.rounds} rounds in alternation, "
        f"every peer once per round in turn, after {SETTLE} s idle. rows/s: the median of "
        "rounds, beside the best round and the rounds' range. fused / peer: the ratio of "
        "medians. Build: seconds from the fitted model to a predictor that has scored "
        "5,000 rows (fused: its kernel already built on this machine). Agreement: max "
        "|peer - native| of P(class 1) on 5,000 rows. First row: see the script's docstring.",
        "",
        "| model | peer | rows/s (median) | best | range | fused / peer | build s | "
        "agreement | load before / after |",
        "|---|---|---:|---:|---|---:|---:|---|---|",
    ]
    for recipe in [r for r in BENCHMARK_RECIPES if not args.only or r.name in args.only]:
        print(f"{recipe.name} ...", flush=True)
        lines += run(recipe, args.rows, args.rounds, args.hogs)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

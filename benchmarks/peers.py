"""Rows/s of the ``fused`` kernel against the predictors a user would pick instead, on
the three benchmark shapes (XGBoost 500x8, LightGBM 500x256, a scikit-learn forest
500x8), on CPU, timed in alternation; each peer's agreement with native beside its speed.

Peers, each where it installs (``make peers`` builds ``.venv-peers``: this benchmark's
own environment, never the product's dependencies; see benchmarks/peers.txt):

- native: the framework's own ``predict_proba``;
- oneDAL (``daal4py.mb.convert_model``, from scikit-learn-intelex) for XGBoost and
  LightGBM; it cannot take a fitted scikit-learn forest, so for the forest it is
  scikit-learn-intelex's own ``RandomForestClassifier`` fitted with the same settings
  on the same rows (other trees: its agreement is with its own predictor, marked);
- lleaves (LightGBM), compiled with LLVM;
- treelite/tl2cgen, the forest as C compiled with the system's compiler;
- ONNX Runtime, through onnxmltools (XGBoost, LightGBM) or skl2onnx (the forest).

Each peer is built once (its seconds recorded), warmed up, then every peer scores the
same rows once per round, in turn, for ``--rounds`` rounds; a peer's rate is its best
round.  The load average is recorded before and after.  Agreement: max |peer - native|
of P(class 1) on 5,000 rows.  With ``--hogs N`` the same rounds run a second time with
N busy processes (``yes``) beside them, as on a machine whose cores are taken.

First row: seconds from ``scoring.compile(model)`` of a model this process has not seen
(``auto``, and ``strategy="fused"``) to its first scored row, with the product's kernel
already built on the machine (``make install`` builds it); the best of 3 fresh compiles.

    .venv-peers/bin/python benchmarks/peers.py [--rows N] [--rounds R] [--hogs N]
                                               [--only NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
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
        from sklearnex.ensemble import RandomForestClassifier

        own = RandomForestClassifier(**model.get_params()).fit(X, y)
        return lambda A: positive(own.predict_proba(A)), "own fit"
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


def alternated(predictors: dict[str, Predict], X: np.ndarray, rounds: int) -> dict[str, float]:
    """Best rows/s of each, every round timing each once in turn (see the module)."""
    best = dict.fromkeys(predictors, 0.0)
    for fn in predictors.values():
        fn(X[:1024])
    for _ in range(rounds):
        for name, fn in predictors.items():
            start = time.perf_counter()
            fn(X)
            best[name] = max(best[name], len(X) / (time.perf_counter() - start))
    return best


def versions() -> str:
    found = []
    for dist in DISTRIBUTIONS:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{dist} {version(dist)}")
    return ", ".join(found)


def first_row(model: Any, X: np.ndarray, **options: str) -> float:
    """Best of 3: seconds from compiling ``model`` afresh to its first scored row."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        scoring.compile(model, device="cpu", **options).predict_proba(X[:1])
        best = min(best, time.perf_counter() - start)
    return best


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
                skipped.append(f"| {recipe.name} | {peer} | skipped: {reason} | | | | |")
                continue
            predictors[peer] = fn
            built[peer] = (time.perf_counter() - start, error, note)
        lines = _rows(recipe.name, "", predictors, built, X_eval, rounds)
        if n_hogs:
            with hogs(n_hogs):
                time.sleep(2)  # the hogs running before the first round
                lines += _rows(recipe.name, f" ({n_hogs} hogs)", predictors, built, X_eval, rounds)
    auto, fused = first_row(model, X_eval), first_row(model, X_eval, strategy="fused")
    lines.append(f"| {recipe.name} | first row: auto {auto:.2f} s, fused {fused:.2f} s | | | | | |")
    return lines + skipped


Built = dict[str, tuple[float, float, str]]


def _rows(name: str, under: str, predictors: dict[str, Predict], built: Built, X: np.ndarray,
          rounds: int) -> list[str]:  # fmt: skip
    load = os.getloadavg()[0]
    rates = alternated(predictors, X, rounds)
    load_after = os.getloadavg()[0]
    fastest_peer = max((r for p, r in rates.items() if p != "fused"), default=0.0)
    lines = []
    for peer, rate in rates.items():
        seconds, error, note = built[peer]
        ratio = rates["fused"] / rate if "fused" in rates else float("nan")
        agreement = f"{error:.1e}" + (f" ({note})" if note else "")
        lines.append(f"| {name}{under} | {peer} | {rate:,.0f} | {ratio:.2f} | {seconds:.1f} | "
                     f"{agreement} | {load:.2f} / {load_after:.2f} |")  # fmt: skip
    lines.append(f"| {name}{under} | **fused / fastest peer** | | "
                 f"**{rates.get('fused', 0) / fastest_peer:.2f}** | | | |")  # fmt: skip
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
        f"Machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"torch threads {torch.get_num_threads()}. Versions: {versions()}.",
        f"{args.rows:,} rows of 28 float32 features; best of {args.rounds} rounds in "
        "alternation. fused / peer: how many times the peer's rate fused scores. Build: "
        "seconds from the fitted model to a predictor that has scored 5,000 rows (fused: "
        "its kernel already built on this machine). Agreement: max |peer - native| of "
        "P(class 1) on 5,000 rows. First row: see the script's docstring.",
        "",
        "| model | peer | rows/s | fused / peer | build s | agreement | load before / after |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for recipe in [r for r in BENCHMARK_RECIPES if not args.only or r.name in args.only]:
        print(f"{recipe.name} ...", flush=True)
        lines += run(recipe, args.rows, args.rounds, args.hogs)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

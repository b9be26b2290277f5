"""The CPU league table: rows/s of the ``fused`` kernel and of every predictor a user
would pick instead, at 1, 1,000 and 100,000 rows per call, on the three benchmark shapes
(XGBoost 500x8, LightGBM 500x256, a scikit-learn forest 500x8) and a LightGBM of 1,000
trees of 256 leaves, timed in alternation; each peer's agreement with native beside its
speed, and the core-cycles each one spends per node a row visits.

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
- ONNX Runtime, through onnxmltools (XGBoost, LightGBM) or skl2onnx (the forest);
- snapml: LightGBM's text file imported, XGBoost and the forest through ONNX (snapml
  1.17 finds no objective in XGBoost 3's JSON);
- nvForest on CPU (``device="cpu"``), where its CUDA-built wheel imports on a machine
  without a GPU;
- Hummingbird (``hummingbird.ml.convert(model, "torch")``), its own choice of strategy.

Each peer is built once (its seconds recorded), warmed up, then, for each call size,
every peer scores the same rows once per round, in turn, for ``--rounds`` rounds: a turn
is :func:`calls` calls of that many rows each, different rows each call.  A peer's rate
is the median of its rounds, beside its best round; every ratio is of medians.  The load
average is recorded before and after.  Agreement: max |peer - native| of P(class 1) on
5,000 rows; a peer that differs by more than :data:`AGREES` is listed, not counted as
the fastest.  With ``--hogs N`` the same rounds run a second time with N busy processes
(``yes``) beside them, as on a machine whose cores are taken.

Core-cycles per node visit: the clock the machine reports (the largest ``cpu MHz`` of
/proc/cpuinfo), times the cores, over rows/s times the nodes a row's paths visit (the
depth of each tree's leaf for the row, from the framework's own leaf ids, summed over the
trees, averaged over rows): what each predictor spends on a node that must be visited.

First row: seconds from ``scoring.compile(model)`` of a model this process has not seen
(``auto``, and ``strategy="fused"``) to its first scored row, with the product's kernel
already built on the machine (``make install`` builds it); median and best of 3 fresh
compiles.

    .venv-peers/bin/python benchmarks/peers.py [--rows N] [--rounds R] [--hogs N]
                                               [--sizes N ...] [--only NAME ...]
                                               [--peers NAME ...]
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
from dataclasses import replace
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
PEERS = ("native", "fused", "oneDAL", "lleaves", "tl2cgen", "onnxruntime", "snapml",
         "nvforest", "hummingbird")  # fmt: skip
DISTRIBUTIONS = (
    "scoring", "torch", "xgboost", "lightgbm", "scikit-learn", "scikit-learn-intelex",
    "lleaves", "treelite", "tl2cgen", "onnxruntime", "snapml", "nvforest-cu12",
    "hummingbird-ml",
)  # fmt: skip
#: Max |peer - native| of P(class 1) beyond which a peer is not counted as the fastest:
#: a wrong answer fast is no competitor (its row says so).  One tree's leaf of 500 moved
#: is within it (oneDAL's forest, its +inf thresholds as the largest double: 5e-4).
AGREES = 1e-3
#: Rows per call: one row (a request), a thousand (a micro-batch), 100k (a file's batch).
SIZES = (1, 1_000, 100_000)
#: The three benchmark shapes and the weak one, LightGBM's leaf-wise trees, twice as many.
LEAGUE = [*BENCHMARK_RECIPES, replace(BENCHMARK_RECIPES[1], name="lgb_1000x256", n_trees=1000)]


def calls(size: int) -> int:
    """Calls per timed turn at ``size`` rows each: about 50,000 rows, at most 200 calls
    (a turn of one-row calls is 200 requests)."""
    return max(1, min(200, 50_000 // size))


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
    if peer == "snapml":
        return _snapml(recipe, model, X, tmp)
    if peer == "nvforest":
        return _nvforest(recipe, model, tmp)
    if peer == "hummingbird":
        from hummingbird.ml import convert

        converted = convert(model, "torch")
        return lambda A: positive(converted.predict_proba(A)), ""
    return _onnxruntime(recipe, model, X)


def _saved(recipe: Recipe, model: Any, tmp: Path) -> Path:
    """The boosted model in its framework's own file: XGBoost JSON, LightGBM text."""
    if recipe.framework == "xgboost":
        path = tmp / "model.json"
        model.get_booster().save_model(path)
    elif recipe.framework == "lightgbm":
        path = tmp / "model.txt"
        model.booster_.save_model(path)
    else:
        raise NotImplementedError("a boosted model's file")
    return path


def _snapml(recipe: Recipe, model: Any, X: np.ndarray, tmp: Path) -> tuple[Predict, str]:
    import snapml

    note = ""
    if recipe.framework == "lightgbm":
        forest = snapml.BoostingMachineClassifier()
        forest.import_model(str(_saved(recipe, model, tmp)), input_type="lightgbm")
    else:  # snapml finds no objective in XGBoost 3's JSON: both through ONNX
        path = tmp / "model.onnx"
        path.write_bytes(_onnx(recipe, model, X).SerializeToString())
        boosted = recipe.framework == "xgboost"
        forest = snapml.BoostingMachineClassifier() if boosted else snapml.RandomForestClassifier()
        forest.import_model(str(path), input_type="onnx")
        note = "from ONNX"
    threads = os.cpu_count() or 1
    return lambda A: positive(forest.predict_proba(A, n_jobs=threads)), note


def _nvforest(recipe: Recipe, model: Any, tmp: Path) -> tuple[Predict, str]:
    import nvforest

    if recipe.framework == "sklearn":
        forest = nvforest.load_from_sklearn(model, device="cpu")
    else:
        forest = nvforest.load_model(_saved(recipe, model, tmp), device="cpu")
    return lambda A: positive(forest.predict_proba(A)), ""


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

    compiled = lleaves.Model(model_file=str(_saved(recipe, model, tmp)))
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


def _onnx(recipe: Recipe, model: Any, X: np.ndarray) -> Any:
    """The model as ONNX: skl2onnx for the forest, onnxmltools for the boosted ones."""
    if recipe.framework == "sklearn":
        from skl2onnx import to_onnx

        return to_onnx(model, X[:1].astype(np.float32), options={"zipmap": False})
    from onnxmltools import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    convert = convert_xgboost if recipe.framework == "xgboost" else convert_lightgbm
    kwargs = {"zipmap": False} if recipe.framework == "lightgbm" else {}
    return convert(model, initial_types=[("input", FloatTensorType([None, X.shape[1]]))], **kwargs)


def _onnxruntime(recipe: Recipe, model: Any, X: np.ndarray) -> tuple[Predict, str]:
    import onnxruntime

    onx = _onnx(recipe, model, X)
    session = onnxruntime.InferenceSession(onx.SerializeToString(),
                                           providers=["CPUExecutionProvider"])  # fmt: skip
    name = session.get_inputs()[0].name
    return lambda A: positive(session.run(None, {name: A.astype(np.float32)})[1]), ""


def alternated(predictors: dict[str, Predict], X: np.ndarray, rounds: int,
               size: int) -> dict[str, list[float]]:  # fmt: skip
    """Each one's rows/s per round at ``size`` rows per call, every round timing each
    once in turn (a turn: :func:`calls` calls on consecutive rows).  Each turn starts
    after :data:`SETTLE` seconds idle: the peer before it may leave threads spinning for
    more work (XGBoost's OpenMP team does), and a user's process runs one predictor, not
    one after the other."""
    n = min(calls(size), len(X) // size)  # the rows there are
    chunks = [X[i * size : (i + 1) * size] for i in range(n)]
    rates: dict[str, list[float]] = {name: [] for name in predictors}
    for fn in predictors.values():
        fn(X[:size])
    for _ in range(rounds):
        for name, fn in predictors.items():
            time.sleep(SETTLE)
            start = time.perf_counter()
            for chunk in chunks:
                fn(chunk)
            rates[name].append(n * size / (time.perf_counter() - start))
    return rates


def visits(recipe: Recipe, model: Any, X: np.ndarray) -> float:
    """Nodes a row visits, averaged over the rows of X: over the trees, the depth of the
    row's leaf, from the framework's own leaf ids and tree structure."""
    if recipe.framework == "xgboost":
        import xgboost as xgb

        booster = model.get_booster()
        leaf = booster.predict(xgb.DMatrix(X), pred_leaf=True).astype(np.int64)
        frame = booster.trees_to_dataframe()
        depths = []
        for t in range(leaf.shape[1]):
            tree = frame[frame["Tree"] == t].sort_values("Node")
            depth = np.zeros(int(tree["Node"].max()) + 1, dtype=np.int64)
            rows = zip(tree["Node"], tree["Yes"], tree["No"], strict=True)
            for node, yes, no in rows:  # parents first: children have larger ids
                for child in (yes, no):
                    if isinstance(child, str):
                        depth[int(child.split("-")[1])] = depth[node] + 1
            depths.append(depth[leaf[:, t]])
        return float(np.sum(depths, axis=0).mean())
    if recipe.framework == "lightgbm":
        leaf = model.booster_.predict(X, pred_leaf=True).astype(np.int64)
        total = np.zeros(len(X))
        for t, info in enumerate(model.booster_.dump_model()["tree_info"]):
            depth = np.zeros(info["num_leaves"], dtype=np.int64)
            todo = [(info["tree_structure"], 0)]
            while todo:
                node, d = todo.pop()
                if "leaf_index" in node or "split_index" not in node:
                    depth[node.get("leaf_index", 0)] = d
                else:
                    todo += [(node["left_child"], d + 1), (node["right_child"], d + 1)]
            total += depth[leaf[:, t]]
        return float(total.mean())
    total = np.zeros(len(X))
    for tree in model.estimators_:
        left, right = tree.tree_.children_left, tree.tree_.children_right
        depth = np.zeros(tree.tree_.node_count, dtype=np.int64)
        for node in range(tree.tree_.node_count):  # children come after their parent
            if left[node] >= 0:
                depth[left[node]] = depth[right[node]] = depth[node] + 1
        total += depth[tree.apply(X)]
    return float(total.mean())


def clock_hz() -> float:
    """The largest clock /proc/cpuinfo reports (its ``cpu MHz``), in Hz; NaN if none."""
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text().splitlines()
        found = [float(line.split(":", 1)[1]) for line in info if line.startswith("cpu MHz")]
        if found:
            return max(found) * 1e6
    return float("nan")


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


def run(recipe: Recipe, rows: int, rounds: int, n_hogs: int, sizes: list[int],
        peers: list[str]) -> list[str]:  # fmt: skip
    model = recipe.build()
    X, y = make_data(recipe, seed=0)  # what build() fitted on
    X_eval = make_data(recipe, seed=7, n_rows=rows)[0].astype(np.float32)
    reference = positive(model.predict_proba(X_eval[:5000]))
    predictors: dict[str, Predict] = {}
    built: Built = {}
    skipped: list[str] = []
    blank = "| " * (len(sizes) + 2)
    with tempfile.TemporaryDirectory() as tmp:
        for peer in peers:
            start = time.perf_counter()
            try:
                fn, note = build(peer, recipe, model, X, y, Path(tmp))
                error = float(np.max(np.abs(fn(X_eval[:5000]) - reference)))
            except NotImplementedError:  # not a peer of this framework
                continue
            except Exception as exc:  # a peer that does not install or build here
                reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
                print(f"  {recipe.name}: {peer} skipped ({reason})", flush=True)
                skipped.append(f"| {recipe.name} | {peer} | skipped: {reason} {blank}|")
                continue
            predictors[peer] = fn
            built[peer] = (time.perf_counter() - start, error, note)
        walked = visits(recipe, model, X_eval[:5000])
        lines = _rows(recipe.name, "", predictors, built, X_eval, rounds, sizes, walked)
        if n_hogs:
            with hogs(n_hogs):
                time.sleep(2)  # the hogs running before the first round
                lines += _rows(recipe.name, f" ({n_hogs} hogs)", predictors, built, X_eval,
                               rounds, sizes, walked)  # fmt: skip
    auto, fused = first_row(model, X_eval), first_row(model, X_eval, strategy="fused")
    lines.append(f"| {recipe.name} | first row: auto {auto}, fused {fused} {blank}|")
    return lines + skipped


Built = dict[str, tuple[float, float, str]]


def _rows(name: str, under: str, predictors: dict[str, Predict], built: Built, X: np.ndarray,
          rounds: int, sizes: list[int], walked: float) -> list[str]:  # fmt: skip
    """One league table's rows: per peer its median (and best) rows/s at each size, the
    core-cycles per visit at the largest, build seconds, agreement; then, per size, the
    fastest other peer that agrees with native and fused's ratio to it."""
    load = os.getloadavg()[0]
    rates = {size: alternated(predictors, X, rounds, size) for size in sizes}
    load_after = os.getloadavg()[0]
    median = {s: {p: statistics.median(r) for p, r in rates[s].items()} for s in sizes}
    per_visit = clock_hz() * (os.cpu_count() or 1) / walked
    lines = []
    for peer in predictors:
        seconds, error, note = built[peer]
        cells = " | ".join(f"{median[s][peer]:,.0f} ({max(rates[s][peer]):,.0f})" for s in sizes)
        cycles = per_visit / median[sizes[-1]][peer]
        agreement = f"{error:.1e}" + (f" ({note})" if note else "")
        if error > AGREES:
            agreement += " (disagrees: not in the ratios)"
        lines.append(f"| {name}{under} | {peer} | {cells} | {cycles:.2f} | {seconds:.1f} | "
                     f"{agreement} | {load:.2f} / {load_after:.2f} |")  # fmt: skip
    agreeing = [p for p in predictors if p != "fused" and built[p][1] <= AGREES]
    if "fused" in predictors and agreeing:
        cells = []
        for s in sizes:
            others = {p: m for p, m in median[s].items()
                      if p != "fused" and built[p][1] <= AGREES}  # fmt: skip
            peer = max(others, key=others.__getitem__)
            won = sum(f > o for f, o in zip(rates[s]["fused"], rates[s][peer], strict=True))
            cells.append(f"**{median[s]['fused'] / others[peer]:.2f}** x {peer} "
                         f"({won} of {rounds} rounds)")  # fmt: skip
        lines.append(f"| {name}{under} | **fused / fastest other** | {' | '.join(cells)} | "
                     f"{walked:.1f} visits/row | | | |")  # fmt: skip
    return lines


def main() -> None:
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")  # no per-model packages
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES),
                        help="rows per call")  # fmt: skip
    parser.add_argument("--only", nargs="*", default=None, help="recipe names to run")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), help="peers to time")
    parser.add_argument("--hogs", type=int, default=0, help="busy processes for a second pass")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "league_cpu.md")  # fmt: skip
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if sizes[-1] > args.rows:
        parser.error(f"--sizes {sizes[-1]} is more than --rows {args.rows}")
    warnings.filterwarnings("ignore")
    columns = " | ".join(f"rows/s at {s:,} per call" for s in sizes)
    lines = [
        f"# The CPU league table: fused against its peers ({date.today()})",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({cpu()}, {clock_hz() / 1e9:.2f} GHz by "
        f"/proc/cpuinfo), torch threads {torch.get_num_threads()}. Versions: {versions()}.",
        f"Rows of 28 float32 features; {args.rounds} rounds in alternation, every peer "
        f"once per round in turn, after {SETTLE} s idle; a turn is a number of calls of "
        "that many rows (200 of one row, 50 of 1,000, one of 100,000). rows/s: the median "
        "of rounds (the best round in brackets). Core-cycles per visit: clock x cores / "
        "(rows/s at the largest size x the nodes a row's paths visit). Build: seconds from "
        "the fitted model to a predictor that has scored 5,000 rows (fused: its kernel "
        "already built on this machine). Agreement: max |peer - native| of P(class 1) on "
        "5,000 rows. First row: see the script's docstring.",
        "",
        f"| model | peer | {columns} | core-cycles / visit | build s | agreement | "
        "load before / after |",
        "|---|---|" + "---:|" * (len(sizes) + 2) + "---|---|",
    ]
    for recipe in [r for r in LEAGUE if not args.only or r.name in args.only]:
        print(f"{recipe.name} ...", flush=True)
        lines += run(recipe, args.rows, args.rounds, args.hogs, sizes, args.peers)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

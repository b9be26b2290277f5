"""CPU timings of this tree against an earlier commit, in alternating processes.

The shared machine's pace drifts, so the two are compared only in alternation: each
pair runs one process of each tree (the earlier commit first in odd pairs, this tree
first in even ones), and a figure is the median over the processes of each tree, beside
the best.  Two parts:

- per call: ``scoring.compile(model)`` (defaults) and ``strategy="fused"`` on the
  benchmark shapes (XGBoost 500x8, LightGBM 500x256, a scikit-learn forest 500x8),
  ``predict_proba`` on 1 to 100,000 rows; within a process, the median of its calls;
- jobs: ``benchmarks/e2e_pipeline.py`` of each tree (the script of this tree, run with
  each tree's package), each process's median of its rounds;
- with ``--ray-rows N``: ``benchmarks/e2e_ray.py --rows N`` the same way (the local
  engine's job, then the Ray engine's with its local instance and actors, each in a
  process of its own; the tree's package reaches them through ``PYTHONPATH``).

The earlier commit is checked out as a git worktree in the work folder (removed at the
end); the models are trained once and saved there (XGBoost and LightGBM in their own
formats, the forest pickled by this script into its private work folder), so both
trees score the same forests.

    python benchmarks/before_after.py --previous REV [--pairs 5] [--job-rows 2000000]
        [--big-rows 200000] [--ray-rows 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROWS = (1, 100, 10_000, 100_000)
STRATEGIES = ("auto", "fused")
#: Calls per measurement: enough for a stable median, few enough for 100k rows.
CALLS = {1: 50, 100: 50, 10_000: 10, 100_000: 3}


# -- the child: one process of one tree ---------------------------------------------------


def _load(path: Path) -> Any:
    if path.suffix == ".ubj":
        import xgboost as xgb

        model = xgb.XGBClassifier()
        model.load_model(path)
        return model
    if path.suffix == ".txt":
        import lightgbm as lgb

        return lgb.Booster(model_file=str(path))
    with path.open("rb") as f:  # written by this script's parent, in its own folder
        return pickle.load(f)


def child(work: Path) -> None:
    import scoring

    print(f"scoring from {Path(scoring.__file__).parent}", file=sys.stderr)

    X = np.load(work / "rows.npy")
    out: dict[str, Any] = {}
    for path in sorted(work.glob("model-*")):
        model = _load(path)
        name = path.stem.removeprefix("model-")
        for strategy in STRATEGIES:
            cm = scoring.compile(model, device="cpu", strategy=strategy)
            ran = f"{cm.implementation.name}/{cm.strategy}"
            for rows in ROWS:
                batch = X[:rows]
                cm.predict_proba(batch)  # warm
                seconds = []
                for _ in range(CALLS[rows]):
                    begin = time.perf_counter()
                    cm.predict_proba(batch)
                    seconds.append(time.perf_counter() - begin)
                out[f"{name}|{strategy}|{rows}"] = [statistics.median(seconds), ran]
    print(json.dumps(out))


# -- the parent ---------------------------------------------------------------------------


def prepare_work(work: Path, previous: str) -> Path:
    """The earlier commit's worktree, the models and the rows, made once."""
    tree = work / "previous"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        previous], check=True, capture_output=True)  # fmt: skip
    if not (work / "rows.npy").exists():
        from scoring.recipes import BENCHMARK_RECIPES, make_data

        for recipe in BENCHMARK_RECIPES:
            model = recipe.build()
            name = f"model-{recipe.name}"
            if recipe.framework == "xgboost":
                model.save_model(work / f"{name}.ubj")
            elif recipe.framework == "lightgbm":
                model.booster_.save_model(str(work / f"{name}.txt"))
            else:
                with (work / f"{name}.pkl").open("wb") as f:
                    pickle.dump(model, f)
        X, _ = make_data(BENCHMARK_RECIPES[0], seed=7, n_rows=max(ROWS))
        np.save(work / "rows.npy", X.astype(np.float32))
    return tree


#: Runs a script with the package of the tree given first: the environment's editable
#: install of this tree is a finder ahead of ``sys.path``, so it is taken out.
_BOOT = (
    "import runpy, sys; "
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]; "
    "sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_tree(tree: Path, args: list[str], *, script: Path, cache: Path) -> str:
    """``script`` run with ``tree``'s package (its kernel built once into ``cache``)."""
    # PYTHONPATH: the processes the script starts (a job's, Ray's workers) take the tree's.
    env = {**os.environ, "SCORING_COMPILE_CACHE": str(cache), "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _BOOT, str(tree), str(script), *args],
                          env=env, cwd=tree, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} in {tree} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def job_seconds(text: str) -> dict[str, float]:
    """``run|model -> median seconds`` from e2e_pipeline.py's table."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and "/" in cells[3] and cells[0] not in ("model", "---"):
            found[f"{cells[0]}|{cells[2]}"] = float(cells[3].split("/")[0])
    return found


def engine_seconds(text: str) -> dict[str, float]:
    """``engine job|backend -> seconds`` from e2e_ray.py's table (one run of each)."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in ("local", "ray"):
            found[f"e2e_ray.py: {cells[0]} engine|{cells[1]}"] = float(cells[4])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", default="HEAD~1")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--job-rows", type=int, default=2_000_000)
    parser.add_argument("--big-rows", type=int, default=200_000)
    parser.add_argument("--ray-rows", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "scoring-ab")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.work)
        return
    args.work.mkdir(parents=True, exist_ok=True, mode=0o700)
    previous_tree = prepare_work(args.work, args.previous)
    try:
        compare(args, previous_tree)
    finally:  # the worktree is this script's: the repository keeps no record of it
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(previous_tree)], capture_output=True)  # fmt: skip


def compare(args: Any, previous_tree: Path) -> None:
    trees = {"previous": previous_tree, "this": ROOT}
    calls: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    ran: dict[str, str] = {}
    jobs: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    loads = []
    e2e = ["--rows", str(args.job_rows), "--big-rows", str(args.big_rows), "--rounds", "2",
           "--work", str(args.work / "e2e")]  # fmt: skip
    for pair in range(args.pairs):
        order = ["previous", "this"] if pair % 2 == 0 else ["this", "previous"]
        for name in order:
            loads.append(os.getloadavg()[0])
            cache = args.work / f"cache-{name}"
            printed = run_tree(trees[name], ["--child", "--work", str(args.work)],
                               script=Path(__file__), cache=cache)  # fmt: skip
            out = json.loads(printed.splitlines()[-1])
            for key, (seconds, how) in out.items():
                calls[name].setdefault(key, []).append(seconds)
                ran[f"{name}|{key}"] = how
            table = run_tree(trees[name], e2e, script=HERE / "e2e_pipeline.py", cache=cache)
            for key, seconds in job_seconds(table).items():
                jobs[name].setdefault(key, []).append(seconds)
            if args.ray_rows:
                ray = ["--rows", str(args.ray_rows), "--work", str(args.work / "e2e-ray"),
                       "--out", str(args.work / f"ray-{name}.md")]  # fmt: skip
                table = run_tree(trees[name], ray, script=HERE / "e2e_ray.py", cache=cache)
                for key, seconds in engine_seconds(table).items():
                    jobs[name].setdefault(key, []).append(seconds)
    write(args, calls, ran, jobs, loads)


def _cell(values: list[float], scale: float) -> str:
    return f"{statistics.median(values) * scale:.3f} / {min(values) * scale:.3f}"


def write(args: Any, calls: dict[str, dict[str, list[float]]], ran: dict[str, str],
          jobs: dict[str, dict[str, list[float]]], loads: list[float]) -> None:  # fmt: skip
    lines = [
        f"# CPU: this tree against {args.previous} ({date.today()})", "",
        f"`python benchmarks/before_after.py --previous {args.previous} --pairs {args.pairs}` "
        f"on {os.cpu_count()} CPU cores ({platform.machine()}); load average (1 min) at "
        f"each process's start: {min(loads):.2f}-{max(loads):.2f}.  Processes of the two "
        "alternated; each figure is the median over the processes of a tree, then the best.",
        "", "## Per call: `predict_proba`, milliseconds", "",
        "| model | strategy asked | rows | ran | previous | this | this / previous |",
        "|---|---|---:|---|---:|---:|---:|",
    ]  # fmt: skip
    for key in calls["this"]:
        model, strategy, rows = key.split("|")
        before, after = calls["previous"].get(key), calls["this"][key]
        if not before:
            continue
        ratio = statistics.median(after) / statistics.median(before)
        lines.append(f"| {model} | {strategy} | {int(rows):,} | {ran[f'this|{key}']} | "
                     f"{_cell(before, 1e3)} | {_cell(after, 1e3)} | {ratio:.2f} |")  # fmt: skip
    ray = f"; `e2e_ray.py --rows {args.ray_rows}`" if args.ray_rows else ""
    lines += ["", f"## Jobs: `e2e_pipeline.py --rows {args.job_rows} --big-rows {args.big_rows} "
              f"--rounds 2`{ray}, seconds", "",
              "| model | run | previous | this | this / previous |",
              "|---|---|---:|---:|---:|"]  # fmt: skip
    for key, after in jobs["this"].items():
        before = jobs["previous"].get(key)
        if not before:
            continue
        model, run = key.split("|")
        ratio = statistics.median(after) / statistics.median(before)
        lines.append(f"| {model} | {run} | {_cell(before, 1)} | {_cell(after, 1)} | "
                     f"{ratio:.2f} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

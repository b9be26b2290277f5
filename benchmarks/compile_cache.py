"""Seconds from a model file to its first scored row with strategy ``fused``: the first
process (empty caches) and a second one (the package the first one left).

Each measurement is its own process with ``TORCHINDUCTOR_CACHE_DIR`` and
``SCORING_COMPILE_CACHE`` in one fresh folder, as a Ray actor, a Spark worker or
tomorrow's run would find them; the first process waits for its package builder
before it exits, and that wait is reported apart.  Writes
a markdown table naming the machine to benchmarks/results/.

    python benchmarks/compile_cache.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path


def child(model_path: str) -> None:
    """Runs in its own process; prints one JSON line."""
    start = time.perf_counter()
    import numpy as np

    import scoring

    imported = time.perf_counter()
    cm = scoring.compile(model_path, backend="tensor", device="cpu", strategy="fused")
    cm.predict_raw(np.zeros((1, cm.forest.n_features), dtype=np.float32))
    done = time.perf_counter()
    store = cm.implementation.module.kernel.blocks.store
    codes = store.wait() if store else []  # the package for the next process
    built = time.perf_counter()
    report = {"import": imported - start, "compile": done - imported, "package": built - done}
    print(json.dumps({**report, "builders": codes, "dynamo": "torch._dynamo" in sys.modules}))


def measure(model_path: Path, cache: Path) -> dict[str, float]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
           "SCORING_COMPILE_CACHE": str(cache / "packages")}  # fmt: skip
    args = [sys.executable, __file__, "--child", str(model_path)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from scoring.recipes import BENCHMARK_RECIPES

    out = args.out or Path(__file__).parent / "results" / "compile_cache_cpu.md"
    lines = [f"# Compile cache for strategy fused ({date.today()})", "",
             f"Machine: {os.cpu_count()} CPU cores ({platform.machine()}), torch "
             f"{torch.__version__}. Seconds from `scoring.compile(model file)` to the first "
             "scored row; each run a new process.", "",
             "| model | first process (empty caches) | its package built after | "
             "second process | Dynamo imported in second | import scoring |",
             "|---|---:|---:|---:|---|---:|"]  # fmt: skip
    for recipe in BENCHMARK_RECIPES[:2]:
        work = Path(tempfile.mkdtemp(prefix="scoring-cache-"))
        model = recipe.build()
        path = work / ("model.ubj" if recipe.framework == "xgboost" else "model.txt")
        (model if recipe.framework == "xgboost" else model.booster_).save_model(path)
        first, second = measure(path, work / "cache"), measure(path, work / "cache")
        lines.append(f"| {recipe.name} | {first['compile']:.1f} | {first['package']:.1f} | "
                     f"{second['compile']:.1f} | {'yes' if second['dynamo'] else 'no'} | "
                     f"{second['import']:.1f} |")  # fmt: skip
        print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Seconds from a model file to its first scored row with strategy ``fused``: the first
process (empty compile cache) and a second one (the cache the first one filled).

Each measurement is its own process with ``TORCHINDUCTOR_CACHE_DIR`` pointing at one
fresh folder, as a Ray actor, a Spark worker or tomorrow's run would find it.  Writes
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
    print(json.dumps({"import": imported - start, "compile": done - imported}))


def measure(model_path: Path, cache: Path) -> dict[str, float]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
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

    from models import BENCHMARK_RECIPES

    out = args.out or Path(__file__).parent / "results" / "compile_cache_cpu.md"
    lines = [f"# Compile cache for strategy fused ({date.today()})", "",
             f"Machine: {os.cpu_count()} CPU cores ({platform.machine()}), torch "
             f"{torch.__version__}. Seconds from `scoring.compile(model file)` to the first "
             "scored row; each run a new process.", "",
             "| model | first process (empty cache) | second process | import scoring |",
             "|---|---:|---:|---:|"]  # fmt: skip
    for recipe in BENCHMARK_RECIPES[:2]:
        work = Path(tempfile.mkdtemp(prefix="scoring-cache-"))
        model = recipe.build()
        path = work / ("model.ubj" if recipe.framework == "xgboost" else "model.txt")
        (model if recipe.framework == "xgboost" else model.booster_).save_model(path)
        first, second = measure(path, work / "cache"), measure(path, work / "cache")
        lines.append(f"| {recipe.name} | {first['compile']:.1f} | {second['compile']:.1f} | "
                     f"{second['import']:.1f} |")  # fmt: skip
        print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

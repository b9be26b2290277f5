"""Several models in one pass against one job per model, side by side in one run.

N XGBoost classifiers (100 trees of depth 6, 28 float32 features, each fitted to its own
target) score the same Parquet input (1M rows per file):

* one model's job, on the native and on the tensor backend (the per-model cost);
* N separate jobs, one per model, on the faster of those two backends;
* one job naming all N models (``model=[...]``), on native, tensor (its N forests
  combined into one ``fused`` kernel) and auto; tensor runs twice: the first process
  compiles, the second loads the compiled package as tomorrow's run would.

Each measurement runs in its own process and its seconds count everything from loading
the models on (compiling included).  "Bytes read" is that process's ``rchar`` (bytes its
read calls returned, page cache included) from the first scored rows on, once the
models and any compiled package are loaded: the job's own reads, its input above all.

    python benchmarks/many_models.py [--rows 5000000] [--models 20] [--out FILE]
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE_ROWS = 1_000_000
FEATURES = 28


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {gpu}, torch {torch.__version__}"


def prepare(work: Path, *, rows: int, models: int, trees: int, depth: int) -> list[str]:
    """The models' files and the input folder (made once per size)."""
    import xgboost

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    paths = []
    for k in range(models):
        path = work / f"model-{k:02d}-{trees}x{depth}.ubj"
        if not path.exists():
            w = np.random.default_rng(k).normal(size=FEATURES)
            y = (np.nan_to_num(X) @ w + rng.normal(size=len(X)) > 0).astype(int)
            model = xgboost.XGBClassifier(n_estimators=trees, max_depth=depth, n_jobs=2)
            model.fit(X, y)
            model.save_model(path)
        paths.append(str(path))
    data = work / f"input-{rows}"
    if not (data / "_COMPLETE").exists():
        data.mkdir(parents=True, exist_ok=True)
        for i, start in enumerate(range(0, rows, FILE_ROWS)):
            n = min(FILE_ROWS, rows - start)
            block = np.random.default_rng(100 + i).normal(size=(n, FEATURES)).astype(np.float32)
            block[np.random.default_rng(i).random(block.shape) < 0.05] = np.nan
            cols = {f"f{j}": block[:, j] for j in range(FEATURES)}
            pq.write_table(pa.table({"id": np.arange(start, start + n), **cols}),
                           data / f"part-{i:05d}.parquet")  # fmt: skip
        (data / "_COMPLETE").touch()
    return paths


def read_chars() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def child(models: list[str], data: str, out: str, backend: str) -> None:
    """One job in this process; prints one JSON line."""
    import scoring
    from scoring._engines import resolve_model
    from scoring._formats.dataset import open_input
    from scoring._modelset import scorer_for

    entries = [{"model": m, "prefix": f"m{k:02d}"} for k, m in enumerate(models)]
    began = time.perf_counter()
    source = resolve_model(entries[0]["model"] if len(entries) == 1 else entries,
                           backend=backend)  # fmt: skip
    # The first rows load (or compile) what scores them: the bytes read from here on
    # are the job's own reads, its input above all.
    scorer = scorer_for(source.compiled)
    scorer.score(open_input(data).head(columns=[f"f{j}" for j in range(FEATURES)], rows=16))
    began_chars = read_chars()
    report = scoring.score_parquet(data, out, source, backend=backend, keep=["id"],
                                   progress=False)  # fmt: skip
    seconds = time.perf_counter() - began
    print(json.dumps({
        "seconds": seconds, "rows": report.rows, "read_bytes": read_chars() - began_chars,
        "backend": report.backend, "strategy": report.strategy, "stages": report.stages,
    }))  # fmt: skip


def measure(models: list[str], data: Path, out: Path, backend: str, home: Path) -> dict:
    # Compiled packages and inductor's own cache start empty for each benchmark run:
    # the first tensor pass pays the whole compile, as a new model set's first night does.
    (home / "compiled").mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SCORING_HOME": str(home),
        "SCORING_COMPILE_CACHE": str(home / "compiled"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor"),
    }
    args = [sys.executable, __file__, "--child", backend, str(data), str(out), *models]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{backend} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "many_models"))
    parser.add_argument("--out", default="benchmarks/results/many_models_cpu.md")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models = prepare(work, rows=args.rows, models=args.models, trees=args.trees, depth=args.depth)
    data = work / f"input-{args.rows}"
    on_disk = sum(f.stat().st_size for f in data.glob("*.parquet"))
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        run = _Runner(Path(scratch), data)
        one = {b: run(models[:1], b) for b in ("native", "tensor")}
        best = min(one, key=lambda b: one[b]["seconds"])
        separate = [run([m], best) for m in models]
        passes = {b: run(models, b) for b in ("native", "tensor")}
        passes["tensor, package reused"] = run(models, "tensor")
        passes["auto"] = run(models, "auto")
    text = _table(args, on_disk=on_disk, one=one, best=best, separate=separate, passes=passes)
    Path(args.out).write_text(text)
    print(text)


class _Runner:
    """Each job into a fresh output, all sharing one scoring home (compiled packages)."""

    def __init__(self, scratch: Path, data: Path):
        self.scratch, self.data, self.count = scratch, data, 0

    def __call__(self, models: list[str], backend: str) -> dict:
        self.count += 1
        out = self.scratch / f"out-{self.count}"
        result = measure(models, self.data, out, backend, self.scratch / "home")
        print(f"{len(models)} model(s), {backend}: {result['seconds']:.1f} s", file=sys.stderr)
        return result


def _table(args, *, on_disk, one, best, separate, passes) -> str:  # type: ignore[no-untyped-def]
    n, rows = args.models, args.rows
    total = sum(r["seconds"] for r in separate)
    read_separate = sum(r["read_bytes"] for r in separate)
    lines = [
        f"# {n} models in one pass against {n} jobs ({date.today().isoformat()})", "",
        f"Machine: {machine()}.",
        f"Models: {n} XGBoost classifiers of {args.trees} trees x depth {args.depth}, "
        f"{FEATURES} float32 features; input {rows:,} rows in {-(-rows // FILE_ROWS)} Parquet "
        f"files, {on_disk / 1e6:,.0f} MB on disk. Run as `python benchmarks/many_models.py`.",
        "", "| run | backend | seconds | rows/s (all models) | input bytes read |",
        "|---|---|---:|---:|---:|",
    ]  # fmt: skip
    for backend, r in one.items():
        lines.append(f"| 1 model, 1 job | {backend}/{r['strategy'] or '-'} | "
                     f"{r['seconds']:,.1f} | {rows / r['seconds']:,.0f} | "
                     f"{r['read_bytes'] / 1e6:,.0f} MB |")  # fmt: skip
    lines.append(f"| {n} models, {n} jobs | {best} | {total:,.1f} | {rows * n / total:,.0f} | "
                 f"{read_separate / 1e6:,.0f} MB |")  # fmt: skip
    for name, r in passes.items():
        lines.append(f"| {n} models, 1 job | {name} ({r['backend']}/{r['strategy'] or '-'}) | "
                     f"{r['seconds']:,.1f} | {rows * n / r['seconds']:,.0f} | "
                     f"{r['read_bytes'] / 1e6:,.0f} MB |")  # fmt: skip
    fastest = min(passes.values(), key=lambda r: r["seconds"])
    tensor = passes["tensor, package reused"]
    lines += [
        "",
        f"- One pass, fastest ({fastest['backend']}): {fastest['seconds']:,.1f} s = "
        f"{fastest['seconds'] / total:.2f}x the {n} separate jobs ({total:,.1f} s; target "
        "<= 0.5x).",
        f"- Input read: {fastest['read_bytes'] / 1e6:,.0f} MB in one pass against "
        f"{read_separate / 1e6:,.0f} MB over {n} jobs ({on_disk / 1e6:,.0f} MB on disk).",
        f"- Tensor, {n} forests combined (package reused): {tensor['seconds']:,.1f} s = "
        f"{tensor['seconds'] / one['tensor']['seconds']:.1f}x one model's tensor job "
        f"({one['tensor']['seconds']:,.1f} s; target <= 12x).",
        "- Stage busy seconds of the tensor pass: "
        + ", ".join(f"{k} {v:,.1f}" for k, v in tensor["stages"].items()),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[5:], sys.argv[3], sys.argv[4], sys.argv[2])
    else:
        main()

"""The local engine end to end against the floor, and its peak memory as data grows.

Floor (same run, same data): read everything with pyarrow, native predict_proba, write
with pyarrow, one after another.  Engine: ``scoring.score_parquet`` on the same input
(backend auto on CPU; tensor on CUDA when present).  Each measurement runs in its own
process so that peak RSS is its own.  Data: the demo model (XGBoost, 500 trees of depth
8, 28 float32 features), 1M rows per Parquet file.

    python benchmarks/e2e_local.py [--rows 10000000] [--memory-rows 40000000] [--cold]

``--cold`` empties the page cache before each measurement (needs root), so that every
run reads its input from disk, as a nightly job does, whichever ran before it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE_ROWS = 1_000_000


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {gpu}, torch {torch.__version__}"


def prepare(work: Path, rows: int) -> tuple[Path, Path]:
    from scoring.recipes import DEMO_RECIPE, make_data

    model_path = work / "model.ubj"
    if not model_path.exists():
        work.mkdir(parents=True, exist_ok=True)
        DEMO_RECIPE.build().save_model(model_path)
    data = work / f"input-{rows}"
    if not (data / "_COMPLETE").exists():
        data.mkdir(parents=True, exist_ok=True)
        for i, start in enumerate(range(0, rows, FILE_ROWS)):
            n = min(FILE_ROWS, rows - start)
            X, _ = make_data(DEMO_RECIPE, seed=100 + i, n_rows=n)
            cols = {f"f{j}": np.asarray(X[:, j], dtype=np.float32) for j in range(X.shape[1])}
            table = pa.table({"id": np.arange(start, start + n), **cols})
            pq.write_table(table, data / f"part-{i:05d}.parquet")
        (data / "_COMPLETE").touch()
    return model_path, data


def child(kind: str, model_path: str, data: str, out: str, backend: str) -> None:
    """Runs in its own process; prints one JSON line."""
    import xgboost

    import scoring

    model = xgboost.XGBClassifier()
    model.load_model(model_path)
    start = time.perf_counter()
    stages: dict[str, float] = {}
    if kind == "floor":
        table = pq.read_table(data)
        X = np.column_stack([table.column(f"f{j}").to_numpy() for j in range(28)])
        stages["read"] = time.perf_counter() - start
        proba = model.predict_proba(X)[:, 1]
        stages["predict"] = time.perf_counter() - start - stages["read"]
        result = pa.table({"id": table.column("id"), "probability": proba.astype(np.float32),
                           "label": (proba > 0.5).astype(np.int64)})  # fmt: skip
        os.makedirs(out, exist_ok=True)
        pq.write_table(result, Path(out) / "scores.parquet")
        stages["write"] = time.perf_counter() - start - stages["read"] - stages["predict"]
    else:  # an engine: local, ray or spark
        report = scoring.score_parquet(data, out, model, keep=["id"], backend=backend,
                                       engine=kind, progress=False)  # fmt: skip
        stages["backend"] = report.backend  # type: ignore[assignment]
        stages["workers"] = len(report.workers)
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mib": peak_mib, **stages}))


def measure(
    kind: str, model_path: Path, data: Path, work: Path, backend: str = "auto", *, cold: bool
) -> dict:
    """One run in its own process; ``cold`` empties the page cache first (needs root)."""
    out = work / f"out-{kind}-{backend}-{data.name}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    if cold:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    args = [sys.executable, __file__, "--child", kind, str(model_path), str(data), str(out),
            backend]  # fmt: skip
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    # No package builder beside the timings (compile_cache.py measures packages).
    os.environ.setdefault("SCORING_COMPILE_CACHE", "off")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--memory-rows", type=int, default=40_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scoring-e2e"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cold", action="store_true", help="empty the page cache first")
    parser.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    import torch

    backends = ["auto"] + (["tensor"] if torch.cuda.is_available() else [])
    model_path, data = prepare(args.work, args.rows)
    floor = measure("floor", model_path, data, args.work, cold=args.cold)
    rows = [("floor: read, native predict, write", "native", args.rows, floor)]
    for backend in backends:
        engine = measure("local", model_path, data, args.work, backend, cold=args.cold)
        rows.append(("local engine", backend, args.rows, engine))
    if args.memory_rows:
        _, big = prepare(args.work, args.memory_rows)
        rows.append(("local engine", "auto", args.memory_rows,
                     measure("local", model_path, big, args.work, cold=args.cold)))  # fmt: skip
    write_results(args, rows, floor)


def engine_main(engine: str, *, doc: str, note: str) -> None:
    """The command line of ``e2e_<engine>.py``: that engine against the local engine."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scoring-e2e"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    compare_engine(engine, rows=args.rows, work=args.work, out=args.out, note=note)


def compare_engine(engine: str, *, rows: int, work: Path, out: Path | None, note: str) -> None:
    """``engine`` against the local engine on the same data; a markdown table."""
    model_path, data = prepare(work, rows)
    local = measure("local", model_path, data, work, cold=False)
    other = measure(engine, model_path, data, work, cold=False)
    tag = "cuda" if "no GPU" not in machine() else "cpu"
    out = out or Path(__file__).parent / "results" / f"e2e_{engine}_{tag}.md"
    lines = [f"# {engine.capitalize()} engine end to end ({date.today()})", "",
             f"Machine: {machine()}. Model: XGBoost 500 trees of depth 8, 28 float32 "
             f"features; 1M rows per Parquet file. {note}",
             "", "| engine | backend | workers | rows | seconds | rows/s | vs local |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, m in (("local", local), (engine, other)):
        lines.append(f"| {name} | {m['backend']} | {m['workers'] or '-'} | {rows:,} | "
                     f"{m['seconds']:.1f} | {rows / m['seconds']:,.0f} | "
                     f"{m['seconds'] / local['seconds']:.2f}x |")  # fmt: skip
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def write_results(args: argparse.Namespace, rows: list, floor: dict) -> None:
    tag = "cuda" if "no GPU" not in machine() else "cpu"
    out = args.out or Path(__file__).parent / "results" / f"e2e_local_{tag}.md"
    lines = [f"# Local engine end to end ({date.today()})", "",
             f"Machine: {machine()}. Model: XGBoost 500 trees of depth 8, 28 float32 "
             "features; 1M rows per Parquet file.", "",
             "| run | backend | rows | seconds | rows/s | vs floor time | peak RSS MiB |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, backend, n, m in rows:
        ratio = f"{m['seconds'] / floor['seconds']:.2f}x" if n == args.rows else "-"
        shown = m.get("backend", backend)
        rate = n / m["seconds"]
        lines.append(f"| {name} | {shown} | {n:,} | {m['seconds']:.1f} | {rate:,.0f} | "
                     f"{ratio} | {m['peak_mib']:,.0f} |")  # fmt: skip
    stages = ", ".join(f"{k} {floor[k]:.1f} s" for k in ("read", "predict", "write"))
    lines += ["", f"Floor stages: {stages}."]
    if args.cold:
        lines += ["", "The page cache was emptied before each measurement (`--cold`)."]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

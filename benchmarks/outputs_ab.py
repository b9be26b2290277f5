"""The product's outputs from this tree and an earlier commit, compared byte for byte,
and the same jobs' seconds in alternating processes.

Jobs, each on the same input files and the same model in both trees: a Parquet folder
output; a Delta table, then a second run appending to it; a Delta table partitioned by a
kept column; an Iceberg table (a SQLite catalog), then an append; an incremental run
into a Delta table merged on its key, after the input table updated, deleted and
inserted rows.  What is compared: every output file's bytes (named with the run's id
and delta-rs's file ids masked), each folder manifest, each table commit's ``scoring.*``
properties and the files a run records of its input, with what differs by nature
(timestamps, run ids) masked.  Every run of each tree must give the same outputs as
every run of the other.

Each pair runs one process of each tree (the earlier commit first in odd pairs, this
tree first in even ones); a job's figure is the median of its seconds over the
processes of a tree, beside the best.

    python benchmarks/outputs_ab.py --previous REV [--pairs 3] [--rows 400000] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = 4
FEATURES = [f"f{i}" for i in range(8)]
#: What differs between runs by nature: a run's id, delta-rs's file ids, timestamps.
_MASKS = [
    (re.compile(r"scoring-[0-9a-f]{16}"), "scoring-RUN"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "UUID"),
    (re.compile(r"_scoring_inputs/[0-9a-f]{16}\.json"), "_scoring_inputs/RUN.json"),
    (re.compile(r'\\?"createdTime\\?":\d+'), "createdTime:TIME"),
]
#: Keys whose values differ by nature: times, a run's id.
_TIMES = {"committed_at", "scoring.committed_at", "scoring.run"}


def _masked(text: str) -> str:
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text


# -- the work both trees share ----------------------------------------------------------


def prepare(work: Path, rows: int) -> None:
    """Input files (a folder, a partitioned folder, a Delta table with its change feed)
    and a model, written once."""
    import deltalake
    import numpy as np
    import pandas as pd
    import xgboost

    rng = np.random.default_rng(7)
    frame = pd.DataFrame(rng.normal(size=(rows, len(FEATURES))), columns=FEATURES)
    frame.insert(0, "id", np.arange(rows, dtype=np.int64))
    frame["day"] = [f"2026-11-{20 + i % 3}" for i in range(rows)]
    clf = xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0)
    clf.fit(frame[FEATURES].head(20_000), frame.f0.head(20_000) + frame.f1.head(20_000) > 0)
    clf.save_model(work / "model.json")
    share = rows // FILES
    for i in range(FILES):
        part = frame.iloc[i * share : (i + 1) * share]
        (work / "input").mkdir(exist_ok=True)
        part.to_parquet(work / "input" / f"part-{i}.parquet", index=False)
    for day, part in frame.groupby("day"):
        (work / "days" / f"day={day}").mkdir(parents=True, exist_ok=True)
        part.drop(columns="day").to_parquet(work / "days" / f"day={day}" / "part-0.parquet",
                                            index=False)  # fmt: skip
    deltalake.write_deltalake(work / "table", frame.drop(columns="day"),
                              configuration={"delta.enableChangeDataFeed": "true"})  # fmt: skip


# -- the child: every job once, in one tree ---------------------------------------------


def child(work: Path, out: Path) -> None:
    import deltalake

    import scoring

    os.environ["PYICEBERG_CATALOG__AB__URI"] = f"sqlite:///{out}/catalog.db"
    os.environ["PYICEBERG_CATALOG__AB__WAREHOUSE"] = f"file://{out}/warehouse"
    from pyiceberg.catalog import load_catalog

    load_catalog("ab").create_namespace("sales")
    model = str(work / "model.json")
    seconds: dict[str, float] = {}

    def timed(name: str, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        scoring.score_parquet(*args, model=model, progress=False, **kwargs)
        seconds[name] = time.perf_counter() - start

    source = str(work / "input")
    timed("folder", source, str(out / "folder"), keep=["id"])
    timed("delta", source, scoring.Output(f"delta:{out / 'delta'}"), keep=["id"])
    timed("delta append", source, scoring.Output(f"delta:{out / 'delta'}", mode="append"),
          keep=["id"])  # fmt: skip
    days = scoring.Output(f"delta:{out / 'days'}", partition_by=["day"])
    timed("delta partitioned", str(work / "days"), days, keep=["id", "day"])
    timed("iceberg", source, scoring.Output("iceberg:ab.sales.scores"), keep=["id"])
    timed("iceberg append", source, scoring.Output("iceberg:ab.sales.scores", mode="append"),
          keep=["id"])  # fmt: skip
    table = out / "table"
    shutil.copytree(work / "table", table)
    merged = scoring.Output(f"delta:{out / 'merged'}", key=["id"])
    timed("incremental", scoring.Input(str(table), incremental=True), merged, keep=["id"])
    delta = deltalake.DeltaTable(str(table))
    delta.update({"f0": "f0 + 1"}, predicate="id % 7 = 0")
    delta.delete("id % 11 = 0")
    timed("incremental merge", scoring.Input(str(table), incremental=True), merged, keep=["id"])
    described = {"seconds": seconds, "outputs": describe(out)}
    (out / "described.json").write_text(json.dumps(described, indent=1, sort_keys=True))


def describe(out: Path) -> dict[str, Any]:
    """Every output's files and records, masked where runs differ by nature (and the
    output folder's own path, which differs between the trees)."""
    import deltalake
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    files: dict[str, list[str]] = {}
    for name in ("folder", "delta", "days", "merged", "warehouse"):
        found = []
        for path in sorted((out / name).rglob("*")):
            relative = path.relative_to(out / name).as_posix()
            if not path.is_file() or relative.startswith(
                ("_delta_log", "_temporary", "_scoring_m")
            ):
                continue
            if "/metadata/" in relative:  # the catalog's own, compared as snapshots
                continue
            if "UUID" in _masked(relative):  # written by delta-rs's merge: its rows compared
                rows = pq.read_table(path).sort_by("id").to_pylist()
                found.append(f"{_masked(relative)} rows {_text_digest(json.dumps(rows))}")
                continue
            found.append(f"{_masked(relative)} {_digest(path)}")
        files[name] = sorted(found)
    manifest = json.loads((out / "folder" / "_scoring_manifest.json").read_text())
    history = {
        name: [_record(c) for c in reversed(deltalake.DeltaTable(str(out / name)).history())]
        for name in ("delta", "days", "merged")
    }  # fmt: skip
    table = load_catalog("ab").load_table("sales.scores")
    summaries = [_record(dict(s.summary.additional_properties)) for s in table.snapshots()]
    described = {"files": files, "manifest": _record(manifest), "delta history": history,
                 "iceberg snapshots": summaries}  # fmt: skip
    return dict(json.loads(json.dumps(described).replace(str(out), "OUT")))


def _record(record: dict[str, Any]) -> Any:
    """A record's product-written keys (``scoring.*`` for a table's), times masked."""
    keep = {k: v for k, v in record.items()
            if k.startswith("scoring.") or "scoring.job_key" not in json.dumps(record)
            or k in ("operation", "operationParameters")}  # fmt: skip
    return json.loads(_masked(json.dumps(
        {k: ("TIME" if k in _TIMES else v) for k, v in keep.items()
         if k not in ("timestamp", "operationMetrics", "engineInfo", "clientVersion")},
        sort_keys=True, default=str,
    )))  # fmt: skip


def _digest(path: Path) -> str:
    if path.suffix == ".json":  # a run's record of its input files names its run
        return _text_digest(_masked(path.read_text()))
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the parent: both trees in alternation ----------------------------------------------


def run_tree(tree: Path, work: Path, out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, str(HERE / "outputs_ab.py"), "--child", "--work", str(work),
                    "--into", str(out)], env=env, cwd=out, check=True)  # fmt: skip
    return dict(json.loads((out / "described.json").read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", default="HEAD")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "scoring-outputs-ab"
    )
    parser.add_argument("--into", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.work, args.into)
        return
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    prepare(args.work, args.rows)
    previous = args.work / "previous"
    subprocess.run(["git", "worktree", "add", "--detach", str(previous), args.previous],
                   cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    try:
        trees = {"previous": previous, "this": ROOT}
        ran: dict[str, list[dict[str, Any]]] = {"previous": [], "this": []}
        loads = []
        for pair in range(args.pairs):
            order = ["previous", "this"] if pair % 2 == 0 else ["this", "previous"]
            for name in order:
                loads.append(os.getloadavg()[0])
                ran[name].append(run_tree(trees[name], args.work, args.work / f"out-{name}"))
                print(f"pair {pair + 1} {name}: {ran[name][-1]['seconds']}", flush=True)
        write(args, ran, loads)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(previous)], cwd=ROOT,
                       check=False)  # fmt: skip


def write(args: Any, ran: dict[str, list[dict[str, Any]]], loads: list[float]) -> None:
    first = ran["previous"][0]["outputs"]
    same = all(r["outputs"] == first for runs in ran.values() for r in runs)
    differing = sorted({k for runs in ran.values() for r in runs for k in r["outputs"]
                        if r["outputs"][k] != first[k]})  # fmt: skip
    lines = [
        f"# Outputs and job seconds: this tree against {args.previous} ({date.today()})", "",
        f"`python benchmarks/outputs_ab.py --previous {args.previous} --pairs {args.pairs} "
        f"--rows {args.rows}` on {os.cpu_count()} CPU cores ({platform.machine()}); load "
        f"average (1 min) at each process's start: {min(loads):.2f}-{max(loads):.2f}.", "",
        "## Outputs", "",
        f"Every run of both trees gives the same outputs: **{'yes' if same else 'no'}**"
        + ("" if same else f" (differing: {', '.join(differing)})") + ".  Compared: "
        f"{sum(len(v) for v in first['files'].values())} output files by their bytes, the "
        f"folder manifest, {sum(len(v) for v in first['delta history'].values())} Delta "
        f"commits' and {len(first['iceberg snapshots'])} Iceberg snapshots' `scoring.*` "
        "properties (run ids, file ids and timestamps masked).", "",
        "## Jobs: seconds, median / best over the processes of each tree", "",
        "| job | previous | this | this / previous |", "|---|---:|---:|---:|",
    ]  # fmt: skip
    for job in ran["this"][0]["seconds"]:
        a = [r["seconds"][job] for r in ran["previous"]]
        b = [r["seconds"][job] for r in ran["this"]]
        lines.append(f"| {job} | {statistics.median(a):.3f} / {min(a):.3f} | "
                     f"{statistics.median(b):.3f} / {min(b):.3f} | "
                     f"{statistics.median(b) / statistics.median(a):.2f} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if not same:
        raise SystemExit("outputs differ")


if __name__ == "__main__":
    main()

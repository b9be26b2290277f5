"""A Spark ML model scored through the product's SQL function vs Spark's own ``transform``,
on the same local session, in alternation.

For each model (a GBT classifier and a random forest classifier, in a PipelineModel after a
VectorAssembler, fitted here), the same Parquet table is read and scored both ways and
written to Spark's ``noop`` sink (which computes every row and writes nothing):

* ``transform``: ``pipeline.transform(table).select("id", "probability", "prediction")``
* ``udf``: the model registered (its forest verified against ``transform``), then
  ``SELECT id, f(struct(...))`` through :func:`scoring.spark.register_udf` with
  ``output="all"`` (the probability and the label from one call)

Rounds alternate the two; the table reports the median and best of the rounds and the load
average.  Both answers are compared on the first rows (max difference of probabilities,
labels equal).

    python benchmarks/sparkml_udf.py [--rows 1000000] [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = 20
COLUMNS = [f"x{j}" for j in range(FEATURES)]


def _data(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, FEATURES))
    y = (X[:, 0] + X[:, 1] * X[:, 2] - 0.5 * X[:, 3] > 0).astype(float)
    table = pa.table({"id": np.arange(rows), **{c: X[:, j] for j, c in enumerate(COLUMNS)},
                      "y": y})  # fmt: skip
    pq.write_table(table, path, row_group_size=131_072)


def _fit(spark: Any, train: Any, kind: str) -> Any:
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import GBTClassifier, RandomForestClassifier
    from pyspark.ml.feature import VectorAssembler

    assembler = VectorAssembler(inputCols=COLUMNS, outputCol="features", handleInvalid="keep")
    if kind == "gbt":
        estimator: Any = GBTClassifier(labelCol="y", maxIter=100, maxDepth=5, seed=1)
    else:
        estimator = RandomForestClassifier(labelCol="y", numTrees=100, maxDepth=8, seed=1)
    return Pipeline(stages=[assembler, estimator]).fit(train)


def _timed(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "sparkml_udf_cpu.md"
    )
    args = parser.parse_args()

    import scoring
    from scoring.spark import local_session, register_udf

    spark = local_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    tmp = Path(tempfile.mkdtemp(prefix="sparkml-udf-"))
    _data(tmp / "rows.parquet", args.rows)
    table = spark.read.parquet(str(tmp / "rows.parquet"))
    table.createOrReplaceTempView("rows")
    train = table.limit(20_000)
    registry = scoring.Registry(tmp / "reg")
    lines, loads = [], []
    struct = f"struct({', '.join(COLUMNS)})"
    for kind in ("gbt", "rf"):
        model = _fit(spark, train, kind)
        registry.register(kind, model)
        register_udf(spark, f"{kind}_all", f"{kind}@1", registry=registry, output="all")
        from pyspark.ml.functions import vector_to_array

        native = model.transform(table).select(
            "id", vector_to_array("probability").alias("p"), "prediction"
        )
        # One call gives the probability and the label, as transform's one pass does.
        ours = spark.sql(f"SELECT id, {kind}_all({struct}) AS s FROM rows").selectExpr(
            "id", "s.probability AS p", "s.label AS label"
        )
        want = native.orderBy("id").limit(20_000).toPandas()
        got = ours.orderBy("id").limit(20_000).toPandas()
        # A binary model's probability column is the positive class's (Spark: both classes).
        diff = float(np.max(np.abs(np.stack(want["p"])[:, 1] - got["p"].to_numpy())))
        same = bool((want["prediction"].to_numpy() == got["label"].to_numpy()).all())
        runs = {
            "transform": lambda n=native: n.write.format("noop").mode("overwrite").save(),
            "udf": lambda o=ours: o.write.format("noop").mode("overwrite").save(),
        }
        for run in runs.values():  # warm: JIT, Python workers, the compiled model per worker
            run()
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for name in order:
                loads.append(os.getloadavg()[0])
                seconds[name].append(_timed(runs[name]))
        med = {k: statistics.median(v) for k, v in seconds.items()}
        best = {k: min(v) for k, v in seconds.items()}
        trees = "100 trees of depth 5" if kind == "gbt" else "100 trees of depth 8"
        for name in runs:
            lines.append(
                f"| {kind} ({trees}) | {name} | {args.rows:,} | {med[name]:.2f} | {best[name]:.2f} "
                f"| {args.rows / med[name]:,.0f} | {med['transform'] / med[name]:.2f}x |"
            )
        lines.append(f"| {kind} | agreement | max probability difference {diff:.1e}, labels "
                     f"{'equal' if same else 'DIFFER'} | | | | |")  # fmt: skip
    text = "\n".join(
        [
            f"# Spark ML models: the product's SQL function vs Spark's transform ({date.today()})",
            "",
            f"Machine: {os.cpu_count()} CPU cores ({platform.machine()}), Python "
            f"{platform.python_version()}, pyspark {__import__('pyspark').__version__}; a "
            f"local[2] session. {args.rows:,} rows of {FEATURES} float64 features in one Parquet "
            "file, written to Spark's noop sink; the model a PipelineModel (VectorAssembler, "
            f"classifier) fitted on 20,000 of them. {args.rounds} rounds in alternation after a "
            f"warm-up; load average {min(loads):.2f}-{max(loads):.2f} during the rounds.",
            "",
            "| model | path | rows | median s | best s | rows/s (median) | speedup vs transform |",
            "|---|---|---:|---:|---:|---:|---:|",
            *lines,
            "",
            f"Run as `{' '.join(['python benchmarks/sparkml_udf.py', *sys.argv[1:]])}`.",
            "",
        ]
    )
    args.out.write_text(text)
    print(text)
    spark.stop()


if __name__ == "__main__":
    main()

"""spark-submit entry point: score a Parquet dataset with a registered model on Spark.

Takes the options of ``scoring score`` (``--engine spark`` is implied) and runs in the
session spark-submit configured, for example::

    spark-submit --master spark://head:7077 \\
        --conf spark.executor.resource.gpu.amount=1 \\
        --conf spark.task.resource.gpu.amount=0.25 \\
        --conf spark.executor.resource.gpu.discoveryScript=/opt/spark/getGpusResources.sh \\
        --conf spark.pyspark.python=/opt/scoring/.venv/bin/python \\
        jobs/spark_score.py --model churn@production --registry /shared/scoring \\
        --input s3a://lake/features/2026-11-21/ --output s3a://lake/scores/2026-11-21/ \\
        --keep customer_id
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from scoring.cli import app


def main(argv: list[str]) -> None:
    SparkSession.builder.appName("scoring").getOrCreate()  # spark-submit's settings
    app(["score", "--engine", "spark", *argv], prog_name="spark_score.py")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Sessions: local ones that find our interpreter, and settings that suit scoring."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import DependencyError

__all__ = ["ARROW_BATCH_ROWS", "local_session", "tune_session"]

ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: Rows per Arrow batch handed to the Python workers when the user has not chosen:
#: Spark's 10,000 leaves a GPU idle between batches and costs per-call overhead on CPU.
ARROW_BATCH_ROWS = {"cpu": 131_072, "gpu": 1_048_576}


def local_session(
    master: str = "local[*]", *, app_name: str = "scoring", conf: Mapping[str, str] | None = None
) -> Any:
    """A Spark session (the active one if there is one) whose Python workers run this
    interpreter, so they import the same scoring, torch and model libraries."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise DependencyError(
            "Spark needs a Java runtime (17 or 21) and none was found: install one "
            "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {"spark.ui.showConsoleProgress": "false", **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def tune_session(spark: Any) -> str:
    """Raise the Arrow batch size unless the user set one; warn when executors have GPUs
    but tasks ask for none (their UDFs would then score on CPU).  Returns "gpu" or
    "cpu": whether tasks get GPUs."""
    conf = spark.sparkContext.getConf()
    executor_gpus = float(conf.get("spark.executor.resource.gpu.amount", "0") or 0)
    task_gpus = float(conf.get("spark.task.resource.gpu.amount", "0") or 0)
    if executor_gpus > 0 and task_gpus == 0:
        warnings.warn(
            "executors have GPUs (spark.executor.resource.gpu.amount) but tasks ask for "
            "none: set spark.task.resource.gpu.amount (e.g. 1, or 0.25 to share a GPU by "
            "4 tasks) or scoring runs on CPU",
            stacklevel=3,
        )
    kind = "gpu" if task_gpus > 0 else "cpu"
    if not conf.contains(ARROW_BATCH) and spark.conf.get(ARROW_BATCH) == "10000":
        spark.conf.set(ARROW_BATCH, str(ARROW_BATCH_ROWS[kind]))
    return kind

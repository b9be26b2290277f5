"""A Spark session on this interpreter: what the Spark engine, the SQL functions and the
Spark ML importer's reference predictor run in (the active one if there is one).

A session this package starts runs its Python workers on this interpreter (so they
import the same scoring, torch and model libraries) and keeps a failed task's Java
stack out of stderr unless debugging: the error itself still reaches the driver, where
``scoring._engines.spark_errors`` turns it into the product's one line.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from .errors import DependencyError, debugging

__all__ = ["TASK_LOGGERS", "local_session", "quiet_task_failures"]

#: Spark's loggers that print a failed task's Java stack: the executor, the scheduler,
#: the file writer aborting its job and the task it ran ("Aborting task").
TASK_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.scheduler.TaskSchedulerImpl",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.util.Utils",
)


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
    session = builder.getOrCreate()
    quiet_task_failures(session)
    return session


def quiet_task_failures(spark: Any) -> None:
    """Keep a failed task's Java stack out of stderr (the error itself still reaches the
    driver) unless debugging; only for sessions this package starts."""
    if debugging():
        return
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in TASK_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)

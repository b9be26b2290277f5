"""``score_parquet(..., engine="spark")``: the job as a Spark read, score and write.

The driver plans the run as the other engines do (every check before writing), then
Spark reads the input files, ``score_dataframe`` scores them on the executors and Spark's
own committer writes ``part-*`` files in overwrite mode, so a rerun after a failure
replaces a partial output instead of appending to it.  Spark's ``_SUCCESS`` is turned
off; ours follows the manifest, as for the other engines.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..engines.base import Run
from ..progress import RunProgress
from ..registry import Bundle
from ._dataframe import score_dataframe
from ._session import local_session

__all__ = ["PART_PREFIX", "SparkOptions", "run_spark"]

PART_PREFIX = "part-"
_NO_SPARK_SUCCESS = "mapreduce.fileoutputcommitter.marksuccessfuljobs"


@dataclass(frozen=True)
class SparkOptions:
    master: str | None = None  # default: the active session, else local[*]
    conf: Mapping[str, str] = field(default_factory=dict)


def run_spark(
    run: Run,
    bundle: Bundle,
    *,
    device: str,
    backend: str,
    options: SparkOptions,
    progress: RunProgress,
) -> None:
    """Score every input file into ``run.committer.url`` (not yet published)."""
    spark = local_session(options.master or "local[*]", conf=options.conf)
    files = [run.data.fs.unstrip_protocol(f.path) for f in run.data.fragments]
    first = run.data.fragments[0]
    base = files[0][: len(files[0]) - len(first.relpath)].rstrip("/")
    # Only what the plan reads: kept and feature columns, never other partition keys.
    df = spark.read.option("basePath", base).parquet(*files).select(*run.columns)
    scored = score_dataframe(
        df, bundle, keep=run.scorer.keep, outputs=str(run.committer.job["outputs"]),
        device=device, backend=backend,
    )  # fmt: skip
    output = run.committer.fs.unstrip_protocol(run.committer.root)
    writer = scored.write.mode("overwrite").option(_NO_SPARK_SUCCESS, "false")
    _with_progress(spark, lambda: writer.parquet(output), run, progress)


def _with_progress(spark: Any, write: Any, run: Run, progress: RunProgress) -> None:
    """Run ``write`` while turning finished Spark tasks into rows on the progress bar."""
    total, reported, errors = sum(f.rows for f in run.data.fragments), 0, []
    done = threading.Event()

    def body() -> None:
        try:
            write()
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)
        finally:
            done.set()

    spark.sparkContext.setJobGroup("scoring", "scoring job", interruptOnCancel=True)
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    tracker = spark.sparkContext.statusTracker()
    while not done.wait(1.0):
        fraction = _finished_fraction(tracker)
        rows = int(total * fraction)
        if rows > reported:
            progress.advance(rows - reported)
            reported = rows
    if errors:
        raise _translated(errors[0])
    progress.advance(total - reported)


def _finished_fraction(tracker: Any) -> float:
    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    stages = [s for s in stages if s is not None and s.numTasks]
    if not stages:
        return 0.0
    return min(s.numCompletedTasks / s.numTasks for s in stages)


def _translated(exc: BaseException) -> BaseException:
    """Our own error when an executor raised one: Spark hands back only its text."""
    for line in str(exc).splitlines():
        name, _, message = line.strip().partition(": ")
        if name.startswith("scoring.errors."):
            kind = getattr(errors, name.rsplit(".", 1)[1], None)
            if isinstance(kind, type) and issubclass(kind, errors.ScoringError):
                return kind(message)
    return exc

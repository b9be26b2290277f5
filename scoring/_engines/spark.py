"""``engine="spark"``: the job as a Spark read, score and write, and the executor side
every Spark entry point shares.

The driver plans the run as the other engines do (every check before writing, the
output's lease), then Spark reads the input files, :func:`score_frame` scores them on
the executors through ``mapInArrow`` and Spark's own committer writes ``part-*`` files
in overwrite mode into the output's staging folder, so a rerun after a failure replaces
a partial output instead of appending to it.  Spark's ``_SUCCESS`` is turned off; the
files are moved into place and ours follows the manifest, as for the other engines.

The model travels as a bundle in a broadcast and is checked by sha256 on the executors;
compiled models are cached per Python worker.  A task's GPU comes from
``TaskContext.resources()["gpu"]``; without one the model runs on CPU.  Rows are
counted per GPU address (per Python worker without GPUs), and each (backend, strategy,
device) the tasks chose is recorded.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from .._cache import compiled
from .._drift import Counts, merge
from .._formats.publication import engine_dir
from .._modelset import Scoring, load_payload, scorer_for
from .._progress import RunProgress
from .._spark_session import local_session
from .._where import RowFilter
from ..errors import DependencyError, InputError, translated
from .base import (
    ModelSource,
    Run,
    Scored,
    count_batch,
    register,
)
from .placement import placement_only, scoring_device, worker_label
from .plan import ScoreSpec
from .scaling import Autoscale
from .spark_errors import worker_errors

__all__ = [
    "ARROW_BATCH_ROWS",
    "ENGINE",
    "PART_PREFIX",
    "SparkEngine",
    "SparkOptions",
    "local_session",
    "score_frame",
    "task_device",
    "task_gpus",
    "tune_session",
    "worker_model",
]

PART_PREFIX = "part-"
_NO_SPARK_SUCCESS = "mapreduce.fileoutputcommitter.marksuccessfuljobs"

ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: Rows per Arrow batch handed to the Python workers when the user has not chosen:
#: Spark's 10,000 leaves a GPU idle between batches and costs per-call overhead on CPU.
ARROW_BATCH_ROWS = {"cpu": 131_072, "gpu": 1_048_576}


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


def task_gpus() -> list[str]:
    """The GPU addresses Spark gave the running task (none outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    gpus = context.resources().get("gpu") if context is not None else None
    return list(gpus.addresses) if gpus is not None else []


def task_device(requested: str, *, placement: bool = False) -> str:
    """The device a task compiles for: ``cpu`` as asked; ``auto`` and ``cuda`` the GPU
    Spark gave this task (an index among ``CUDA_VISIBLE_DEVICES`` when that lists it),
    ``auto`` without one the CPU; ``placement``: the GPU placed the task, the CPU scores
    (see :mod:`scoring._engines.placement`)."""
    if requested == "cpu" or placement:
        return "cpu"
    return scoring_device(requested, task_gpus())


def worker_model(
    payload: Any, *, device: str, backend: str, strategy: str = "auto", placement: bool = False
) -> Scoring:
    """The broadcast bundle (or a set's), checksum verified, compiled once per Python
    worker for each (model sha256, backend, strategy, device)."""
    bundle = load_payload(payload.value)  # raises IntegrityError on a bad payload
    chosen = task_device(device, placement=placement)
    return compiled(bundle, device=chosen, backend=backend, strategy=strategy)


def score_frame(
    df: Any, source: ModelSource, how: ScoreSpec, *, ran: Any = None, counted: Any = None
) -> Any:
    """``df`` scored through ``mapInArrow`` (no pandas on the way) as ``how`` says (a
    run plan's, or one made for a DataFrame): the kept columns, then the model's output
    columns.  Columns are checked here, on the driver.  ``ran``: an accumulator of
    :class:`Tally` the tasks add their rows to, under the backend, strategy and device
    they chose and their worker (:func:`~.placement.worker_label`); ``counted``: one of
    :class:`DriftTally` they add their rows counted into the monitor's bins to."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    kept, outputs, monitor = list(how.keep), how.outputs, how.monitor
    scorer = scorer_for(source.compiled, keep=kept, outputs=outputs)
    scorer.check_schema(to_arrow_schema(df.schema))
    columns = list(dict.fromkeys([*kept, *scorer.feature_columns(df.columns)]))
    target = pa.schema([*to_arrow_schema(df.select(*kept).schema), *scorer.output_schema])
    tune_session(df.sparkSession)
    payload = df.sparkSession.sparkContext.broadcast(source.shipped().to_bytes())
    placement = placement_only()  # the driver's setting, shipped with the function

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cm = worker_model(payload, device=how.device, backend=how.backend,
                          strategy=how.strategy, placement=placement)  # fmt: skip
        worker = scorer_for(cm, keep=kept, outputs=outputs)
        rows, drift = 0, None
        for batch in batches:
            rows += batch.num_rows
            table = worker.score(batch)
            if monitor is not None:
                drift = merge(drift, count_batch(monitor, worker, batch, table))
            yield from table.cast(target).to_batches()
        if ran is not None:  # a task's GPU, not its Python worker, is the worker
            gpus = task_gpus()
            who = worker_label(gpus, process=not gpus)
            ran.add({(cm.backend, cm.strategy or "", str(cm.device), who): rows})
        if counted is not None and drift is not None:
            counted.add(drift)

    return df.select(*columns).mapInArrow(score, from_arrow_schema(target))


class SparkOptions(BaseModel):
    """The Spark engine's options: ``engine_options``, a job file's ``[spark]`` table
    and the CLI's ``--spark-master``.  ``master``: by default the active session, else
    ``local[*]``; ``conf``: settings for a session the job starts."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    master: str | None = None
    """The master URL (default: the active session's, else ``local[*]``)."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Spark settings for a session the job starts."""


class SparkAllocation:
    """``[autoscale]`` on Spark: a worker is an executor (``spark.executor.cores``, 1
    unless set); the session the job starts gets dynamic allocation with the planned
    executors to start with and as its ceiling, and the job's ``min_workers`` as its
    floor: executors are added as tasks wait, up to what the deadline needs, and idle
    ones leave.  Shuffle tracking stands in for an external shuffle service (scoring
    shuffles nothing).  Spark's cluster manager grants them; nothing is seen join here.
    A session that is already running keeps its own settings (logged)."""

    observes = False
    renew_seconds: float | None = None

    def __init__(self, options: SparkOptions, *, bounds: Autoscale):
        self.given, self.bounds = options, bounds
        self.shape = {"CPU": float(options.conf.get("spark.executor.cores", "1"))}
        self.requested = 0

    def request(self, workers: int) -> None:
        self.requested = workers

    def granted(self) -> int:
        return self.requested

    def options(self, workers: int) -> SparkOptions:
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is not None:
            logging.getLogger(__name__).warning(
                "[autoscale]: a Spark session is already running, so its own executor "
                "settings stand (%d executors planned)",
                workers,
            )
        allocation = {
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": str(min(self.bounds.min_workers, workers)),
            "spark.dynamicAllocation.initialExecutors": str(workers),
            "spark.dynamicAllocation.maxExecutors": str(workers),
        }
        return self.given.model_copy(update={"conf": {**self.given.conf, **allocation}})

    def release(self) -> None:
        self.requested = 0


class SparkEngine:
    """Spark reads, scores and writes; our manifest and ``_SUCCESS`` follow."""

    name = "spark"
    local = False
    resumes = False  # Spark's overwrite mode rescores every file
    engine_files: tuple[str, ...] = (PART_PREFIX,)
    startup_seconds = 20.0  # a local session and its workers (benchmarks/results/e2e_spark_cpu.md)
    options: type[BaseModel] = SparkOptions

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        """Per-worker resources become task settings; the worker count is Spark's."""
        options = table.model_dump(exclude_none=True) if table is not None else {}
        conf = dict(options.get("conf", {}))
        if cpus is not None:
            conf.setdefault("spark.task.cpus", str(int(cpus)))
        if gpus is not None:
            conf.setdefault("spark.task.resource.gpu.amount", str(gpus))
        return {**options, "conf": conf}

    def workers(self, options: SparkOptions, *, device: str) -> int:
        session = local_session(options.master or "local[*]", conf=options.conf)
        return max(1, int(session.sparkContext.defaultParallelism))

    def autoscaler(
        self, options: SparkOptions, *, device: str, bounds: Autoscale
    ) -> SparkAllocation:
        return SparkAllocation(options, bounds=bounds)

    def run(
        self, run: Run, *, source: ModelSource, options: SparkOptions, progress: RunProgress
    ) -> Scored:
        """Score every input file into the output (not yet published)."""
        if not run.todo:  # an incremental run with rows to remove only
            return Scored(None, {}, run.model.output_metadata())
        if run.plan.data.deleted:  # Spark reads the files itself, deleted rows included
            raise InputError(
                f"input {run.plan.data.url!r} has position deletes, which Spark's Parquet "
                "reader does not apply; score it with the local or Ray engine, or compact "
                "the table (rewrite_data_files) first"
            )
        spark = local_session(options.master or "local[*]", conf=options.conf)
        plan = run.plan
        files = [hadoop_url(plan.data.fs.unstrip_protocol(f.path)) for f in plan.data.fragments]
        output = hadoop_url(plan.journal.fs.unstrip_protocol(engine_dir(plan.journal)))
        check_connectors(spark, [files[0], output])
        df = _read(spark, plan.data, files)
        if plan.data.where is not None:  # the filter every engine applies (not Spark's own)
            df = df.mapInArrow(InsideFilter(plan.data.where.text), df.schema)
        df = df.select(*plan.columns)
        ran = spark.sparkContext.accumulator({}, Tally())
        drift = spark.sparkContext.accumulator({}, DriftTally()) if plan.score.monitor else None
        scored = score_frame(df, source, plan.score, ran=ran, counted=drift)
        writer = scored.write.mode("overwrite").option(_NO_SPARK_SUCCESS, "false")
        partitions = run.publisher.partition_by if run.publisher else []
        if partitions:  # a Delta output's: key=value folders, the columns left out
            writer = writer.partitionBy(*partitions)
        _with_progress(spark, lambda: writer.parquet(output), run, progress)
        # Executors choose their own device and backend: record what they chose.
        chosen = sorted(ran.value) or [(plan.score.backend, "", plan.score.device, "")]
        metadata = {**run.model.output_metadata(), **{
            f"scoring.{part}": "+".join(dict.fromkeys(c[i] for c in chosen))
            for i, part in enumerate(("backend", "strategy", "device"))
        }}  # fmt: skip
        workers: dict[str, int] = {}
        for key, rows in ran.value.items():
            workers[key[3]] = workers.get(key[3], 0) + rows
        counts = drift.value if drift is not None and drift.value else None
        return Scored(None, workers, metadata, drift_counts=counts)


ENGINE = register(SparkEngine())


def _read(spark: Any, data: Any, files: list[str]) -> Any:
    """The input files as Spark reads them, their partition columns holding the values the
    plan read (a Delta log's, or ``key=value`` folders decoded as UTF-8, typed as the
    other engines type them).  Spark's own discovery would decode a folder's ``%XX``
    escapes one character each (``é``, escaped ``%C3%A9``, read as ``Ã©``) and type the
    values its own way."""
    df = spark.read.parquet(*files)  # the files named: no partition discovery
    columns = list(data.partition_columns)
    if not columns:
        return df
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = [data.schema.field(c) for c in columns]
    values = {}
    for url, fragment in zip(files, data.fragments, strict=True):
        keys = data.partition_values(fragment)  # once per file, not once per column
        values[_file_key(url)] = [keys.get(c) for c in columns]
    kept = [f for f in df.schema.fields if f.name not in columns]
    schema = StructType(kept + [StructField(f.name, from_arrow_type(f.type)) for f in fields])
    df = df.select(*[F.col(f"`{f.name}`") for f in kept],
                   F.col("_metadata.file_path").alias(_FILE))  # fmt: skip
    shared = spark.sparkContext.broadcast(values)  # once per executor, not per task
    return df.mapInArrow(PartitionValues(shared, pa.schema(fields)), schema)


#: The column that carries each row's file name from Spark's read to its partition values.
_FILE = "__scoring_file__"


def _file_key(url: str, *, reported: bool = False) -> str:
    """A file's URL as the driver gave it to Spark, and as Spark ``reported`` it
    (``_metadata``: the Hadoop path's URI, escaped once more, ``file:/`` for ``file:///``),
    made one."""
    return re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:/*", "", unquote(url) if reported else url)


class PartitionValues:
    """Each row's partition values from the file it was read from (:func:`_read`):
    ``values``, a broadcast of each file's."""

    def __init__(self, values: Any, fields: pa.Schema):
        self.values, self.fields = values, fields

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            coded = pc.dictionary_encode(batch.column(_FILE))
            files = [self._of(_file_key(name, reported=True))
                     for name in coded.dictionary.to_pylist()]  # fmt: skip
            arrays = [
                pa.array([values[i] for values in files], type=field.type).take(coded.indices)
                for i, field in enumerate(self.fields)
            ]
            rest = batch.drop_columns([_FILE])
            yield pa.RecordBatch.from_arrays(
                [*rest.columns, *arrays], names=[*rest.schema.names, *self.fields.names]
            )

    def _of(self, key: str) -> list[Any]:
        try:
            return self.values.value[key]
        except KeyError:  # never guessed: a row would get another file's values
            raise RuntimeError(f"Spark read a file the plan did not list: {key!r}") from None


class InsideFilter:
    """The rows of each Arrow batch a task reads that are inside the row filter ``text``
    (:mod:`scoring._where`): the one translation every engine applies, so that Spark keeps
    the rows the local and Ray engines keep, whatever the session's SQL settings."""

    def __init__(self, text: str):
        self.text = text

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        where = RowFilter(self.text)
        for batch in batches:
            yield batch.filter(where.mask(batch))


class Tally:
    """Rows per (backend, strategy, device, worker) of the tasks, summed on the driver
    (a PySpark ``AccumulatorParam``, without importing PySpark before it is used)."""

    def zero(self, value: dict[Any, int]) -> dict[Any, int]:
        return {}

    def addInPlace(self, a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
        for key, rows in b.items():
            a[key] = a.get(key, 0) + rows
        return a


class DriftTally:
    """Drift counts per column (:mod:`scoring._drift`), summed bin by bin on the driver."""

    def zero(self, value: Counts) -> Counts:
        return {}

    def addInPlace(self, a: Counts, b: Counts) -> Counts:
        return merge(a, b) or {}


#: fsspec's scheme -> Hadoop's: Hadoop reads S3 through its S3A connector.
_HADOOP_SCHEMES = {"s3": "s3a"}
_AZURE = ("org.apache.hadoop:hadoop-azure:{hadoop}",
          "spark.hadoop.fs.azure.account.key.<account>.dfs.core.windows.net")  # fmt: skip
#: Where each Hadoop filesystem comes from, and what it needs to be told.
_CONNECTORS = {
    "s3a": ("org.apache.hadoop:hadoop-aws:{hadoop}", "spark.hadoop.fs.s3a.endpoint, "
            "spark.hadoop.fs.s3a.access.key and spark.hadoop.fs.s3a.secret.key (or an "
            "instance role)"),
    "gs": ("com.google.cloud.bigdataoss:gcs-connector:hadoop3-<version>",
           "spark.hadoop.google.cloud.auth.service.account.json.keyfile"),
    "abfs": _AZURE,
    "abfss": _AZURE,
}  # fmt: skip


def hadoop_url(url: str) -> str:
    """``url`` as Spark's Hadoop filesystems name it (``s3://`` -> ``s3a://``)."""
    scheme, sep, rest = url.partition("://")
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}{sep}{rest}" if sep else url


def check_connectors(spark: Any, urls: Sequence[str]) -> None:
    """Refuse, in one line, a URL whose Hadoop filesystem Spark does not have, naming the
    connector package for Spark's Hadoop version and the settings it takes."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for url in urls:
        scheme = url.partition("://")[0] if "://" in url else "file"
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        except Exception:  # py4j's error: no filesystem for the scheme, or not its class
            hadoop = jvm.org.apache.hadoop.util.VersionInfo.getVersion()
            package, settings = _CONNECTORS.get(
                scheme, ("a Hadoop connector for it", "its settings")
            )
            raise DependencyError(
                f"Spark cannot open {url!r}: its Hadoop {hadoop} has no filesystem for "
                f"{scheme}://; add {package.format(hadoop=hadoop)} (spark.jars.packages) "
                f"and set {settings}"
            ) from None


def _with_progress(spark: Any, write: Any, run: Run, progress: RunProgress) -> None:
    """Run ``write`` while turning finished Spark tasks into rows on the progress bar."""
    total, reported, errors = sum(f.rows for f in run.plan.data.fragments), 0, []
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
    if errors:  # a worker's error as its own one line; Spark's own, translated
        with translated("spark", "the Spark job failed"), worker_errors():
            raise errors[0]
    progress.advance(total - reported)


def _finished_fraction(tracker: Any) -> float:
    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    stages = [s for s in stages if s is not None and s.numTasks]
    if not stages:
        return 0.0
    return min(s.numCompletedTasks / s.numTasks for s in stages)

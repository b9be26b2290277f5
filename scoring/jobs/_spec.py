"""Job files: TOML, validated, with errors that name the key and the file.

::

    name = "nightly-churn"
    model = "churn@production"                  # or models:/churn@champion (MLflow); several:
    # models = ["churn@production", {model = "churn@7", prefix = "challenger"},
    #           {model = "churn_eu@3", prefix = "eu", where = "region = 'EU'"}]
    input = "/data/features/${RUN_DATE}/"      # ${VAR} from the environment (unset: error)
    output = "/data/scores/${RUN_DATE}/"
    # input = "iceberg:lake.sales.features"    # an Iceberg table, through its catalog
    # input_version = 42                        # a Delta table's version, Iceberg snapshot id
    # format = "delta"                          # the output a Delta table (or delta:URL;
    #                                           #   output = "iceberg:lake.sales.scores")
    # mode = "append"                           # tables: error (default) | append | overwrite
    #                                           #   | overwrite_partitions (those it writes)
    # partition_by = ["date"]                   # tables: kept columns partitioning the input
    # incremental = true                        # only what changed since the last run
    # on_changed = "rescore"                    #   a changed input file: refuse (default)
    # key = ["customer_id"]                     #   Delta output: merged on it (updates,
    #                                           #   deletes of a Delta input's change feed)
    engine = "local"                            # a name in scoring._engines.ENGINES
    deadline = "01:45"                          # or a duration: "45m", "1h30m", "90s";
    #                                           #   or a day: "${RUN_DATE}+1d 01:45"
    timezone = "Europe/Berlin"                  # for clock and dated deadlines (default UTC)
    keep = ["customer_id"]
    outputs = "default"                         # default | raw | all, + "contributions"
    reasons = 3                                 # top-3 reason codes per row (0: none)
    reasons_by = "absolute"                     # or "signed": the largest increases
    device = "auto"
    backend = "auto"
    strategy = "auto"                           # or fused, compiled, ...: it runs as named
    workers = "auto"                            # or a number (engines with workers)
    retries = 1                                 # reruns after a failure (they resume)
    verify = false                              # a complete output's files: sha256, not sizes
    registry = "s3://models/registry"           # default $SCORING_HOME, else per user
    registry_db = "postgresql+psycopg://scoring@db/registry"
    mlflow_uri = "http://mlflow:5000"           # for models:/ (default MLFLOW_TRACKING_URI)

    [storage_options]                           # fsspec's, for the job's object stores
    endpoint_url = "http://minio:9000"          # s3.endpoint_url: for s3:// URLs only

    [resources]                                 # per worker (ray: actors; spark: tasks)
    cpus = 1.0
    gpus = 1.0

    [autoscale]                                 # ray, spark: the workers the deadline needs
    min_workers = 1                             #   never fewer (default 1)
    max_workers = 8                             #   never more: a plan needing more exits 3
    wait = "10m"                                #   ray: how long workers may take to join

    [checks]                                    # against the model's registration sample
    max_psi = 0.2                               # drift of any feature or output column
    max_null_rate = 0.05                        # of any feature column
    min_rows = 1000000
    fail = true                                 # exit 5, nothing published (else: warn)

    [metrics]                                   # Prometheus, per run (the metrics extra)
    textfile = "/var/lib/node_exporter/scoring_nightly.prom"
    pushgateway = "pushgateway:9091"

    [ray]                                       # options of the chosen engine
    address = "auto"

A clock deadline is the next such time in ``timezone`` after the job starts, unless that
time passed less than 12 hours before the start: then the job is already late.  A dated
deadline (``"${RUN_DATE}+1d 01:45"``: the day after the data's date, at 01:45 in
``timezone``) ties it to the data instead of the start: a backfill of an old date is
refused as late unless given ``--deadline``.
Relative local paths (``input``, ``output``, ``registry``) are read from the job file's
folder, not from the directory the command runs in.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from .._autoscale import Autoscale
from .._engines import ENGINES
from .._explanations import canonical, parse
from .._formats import DEFAULT_FORMAT, format_named, format_of
from .._formats.dataset import DELTA
from .._formats.iceberg_catalog import is_iceberg, storage_url
from .._registry import root_url
from .._stores import StoreConfig, store_config
from .._when import parse_deadline, parse_duration, run_date, zone
from .._where import RowFilter
from ..errors import ConfigError, JobFileError, file_key_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Checks", "JobSpec", "Metrics", "job_run_date", "load_job",
           "parse_duration"]  # fmt: skip

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_LATE_WINDOW = timedelta(hours=12)


class _Strict(BaseModel):
    # Each key's docstring is its description in the schema, and so in the job file's
    # reference page, which is generated from it.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Checks(_Strict):
    """``[checks]``: limits on what a run scores, against the model's reference profile
    (its registration sample; see :mod:`scoring._drift`).  A breach is a warning, or
    with ``fail = true`` stops the run before anything is published (exit 5)."""

    max_psi: float | None = Field(default=None, gt=0)
    """Largest population stability index of any feature or output column."""
    max_null_rate: float | None = Field(default=None, ge=0, le=1)
    """Largest share of nulls in any feature column."""
    min_rows: int | None = Field(default=None, ge=0)
    """Fewest rows in the whole output."""
    fail: bool = False
    """A breach stops the run with exit 5 and publishes nothing (else: a warning)."""


class Metrics(_Strict):
    """``[metrics]``: each run's numbers for Prometheus, which schedulers alert from: a
    node_exporter textfile (written whole, then renamed into place), a Pushgateway, or
    both (the ``metrics`` extra)."""

    textfile: str | None = None
    """A node_exporter textfile collector's file, replaced whole by each run."""
    pushgateway: str | None = None
    """A Pushgateway, ``host:port``."""


class ModelEntry(_Strict):
    """One of ``models``: a registry reference (or model file), its output prefix
    (default: the model's name; its columns are ``<prefix>__<column>``) and a row filter
    (``where = "region = 'EU'"``: rows outside get nulls in its columns)."""

    model: str
    """A registry reference, MLflow URI or model file."""
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The prefix of its output columns (default: the model's registered name)."""
    where: str | None = None
    """A SQL condition on input columns: the rows it scores (the others get nulls)."""


class Resources(_Strict):
    """``[resources]``: what each worker asks for (Ray actors, Spark tasks)."""

    cpus: float | None = Field(default=None, gt=0)
    """CPUs per worker."""
    gpus: float | None = Field(default=None, ge=0)
    """GPUs per worker (a fraction shares a GPU)."""


#: One optional table per engine that has one (``[ray]``, ``[spark]``), with the engine's
#: own schema: a new engine brings its table with it.
_TABLES: dict[str, Any] = {name: (e.options, e.options()) for name, e in ENGINES.items()}
_EngineTables: Any = create_model("_EngineTables", __base__=_Strict, **_TABLES)


class JobSpec(_EngineTables):
    """A validated job file: the keys every engine shares, and each engine's table."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The job's name: its runs are listed under it, and its metrics labelled with it."""
    model: str | None = None
    """The model: a registry reference (``churn@production``), ``models:/`` URI or file."""
    models: list[ModelEntry | str] = Field(default_factory=list)
    """Several models in one pass, in place of ``model`` (references or tables)."""
    input: str
    """A Parquet file, folder or glob, a Delta table, or ``iceberg:CATALOG.NS.TABLE``."""
    output: str
    """A folder, ``delta:URL`` or ``iceberg:CATALOG.NS.TABLE``."""
    format: str = DEFAULT_FORMAT
    """The output's format, a name in :data:`scoring._formats.FORMATS` (``delta:`` and
    ``iceberg:`` outputs set it)."""
    mode: Literal["error", "append", "overwrite", "overwrite_partitions"] | None = None
    """A table output that exists: refuse (``error``, the default), add, replace, or
    replace the partitions the run writes."""
    partition_by: list[str] = Field(default_factory=list)
    """A Delta or Iceberg output's partition columns (kept columns)."""
    input_version: int | str | None = None
    """A table input's version or snapshot id, or an ISO 8601 time (default: the latest)."""
    filter: str | None = None
    """A SQL condition on input columns: only the rows where it holds are read and scored."""
    incremental: bool = False
    """Score only what changed since the output's last complete run of this job."""
    on_changed: Literal["refuse", "rescore"] = "refuse"
    """An incremental run's Parquet input file changed or gone since: refuse, or rescore it."""
    key: list[str] = Field(default_factory=list)
    """A Delta output's row key: an incremental run merges on it."""
    engine: str = "local"
    """``local``, ``ray`` or ``spark``; its options in a table of that name."""
    deadline: str | None = None
    """A time of day (``"01:45"``, in ``timezone``), a duration from the start (``"75m"``),
    or a date, days after it and a time of day (``"${RUN_DATE}+1d 01:45"``)."""
    timezone: str = "UTC"
    """The time zone of a deadline given as a time of day (a clock or a dated one)."""
    keep: list[str] = Field(default_factory=list)
    """Input columns copied into the output, before the scores (an id, a date)."""
    outputs: str | list[str] = "default"
    """``default``, ``raw`` or ``all``, and ``contributions``: the score columns written."""
    reasons: int = Field(default=0, ge=0)
    """Reason codes per row: the features with the largest contributions (0: none)."""
    reasons_by: Literal["absolute", "signed"] = "absolute"
    """Rank reasons by absolute contribution, or by the largest increases first."""
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    """``auto`` (a GPU where there is one), ``cpu``, ``cuda`` or ``cuda:N``."""
    backend: Literal["auto", "tensor", "native", "hummingbird"] = "auto"
    """Who scores: ``auto`` picks per model and device."""
    strategy: Literal["auto", "gemm", "tree_traversal", "perfect_tree_traversal", "fused",
                      "compiled", "triton"] = "auto"  # fmt: skip
    """The tensor backend's kernel; a strategy named runs as named on every worker."""
    workers: Literal["auto"] | int = "auto"
    """Workers of the Ray or Spark engine (``auto``: as the plan needs)."""
    retries: int = Field(default=0, ge=0, le=10)
    """Reruns after a failure that a rerun may fix; each resumes where the last stopped."""
    verify: bool = False
    """A rerun into a complete output hashes its files (sha256), not only their sizes."""
    registry: str | None = None
    """The registry root (default ``$SCORING_HOME``, else the user's data folder)."""
    mlflow_uri: str | None = None
    """Where ``models:/`` references are read (default: MLflow's own configuration)."""
    registry_db: str | None = None
    """The registry database, a SQLAlchemy URL (default SQLite in a local root)."""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    """fsspec options for the object stores the job touches (``s3.KEY`` for one protocol)."""
    resources: Resources = Resources()
    """What each worker asks for."""
    autoscale: Autoscale | None = None
    """Size the cluster from the deadline (Ray, Spark), within bounds."""
    checks: Checks = Checks()
    """Limits on what the run scored."""
    metrics: Metrics = Metrics()
    """Where the run's Prometheus metrics go."""

    @model_validator(mode="before")
    @classmethod
    def _explained(cls, data: Any) -> Any:
        """``outputs``, ``reasons`` and ``reasons_by`` as one canonical outputs string
        (what the job key holds); their types are checked as every key's are."""
        if not isinstance(data, dict) or not isinstance(data.get("outputs", ""), (str, list)):
            return data
        try:
            scores, explain = parse(data.get("outputs", "default"))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        reasons, by = data.get("reasons", 0), data.get("reasons_by", "absolute")
        if type(reasons) is int and reasons > 0 and by in ("absolute", "signed"):
            explain = replace(explain, reasons=reasons, by=by)
        return {**data, "outputs": canonical(scores, explain)}

    @model_validator(mode="before")
    @classmethod
    def _delta_prefixes(cls, data: Any) -> Any:
        """``output = "delta:..."`` is ``format = "delta"``; an input needs no prefix (a
        Delta table is known by its log).  ``output = "iceberg:..."`` is ``format =
        "iceberg"`` (the prefix stays: it names a table in a catalog, not a path)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        named = format_of(data["output"]) if isinstance(data.get("output"), str) else None
        if named not in (None, DEFAULT_FORMAT):
            data.setdefault("format", named)
        for key in ("input", "output"):
            if isinstance(data.get(key), str) and data[key].startswith(DELTA):
                data[key] = data[key][len(DELTA) :]
        return data

    @field_validator("format")
    @classmethod
    def _format(cls, name: str) -> str:
        """A format the registry names (the one-line refusal names them all)."""
        return format_named(name).name

    @field_validator("filter")
    @classmethod
    def _sql(cls, text: str | None) -> str | None:
        """A filter that cannot be read is refused with the file, not when the run reads."""
        if text is not None:
            try:
                RowFilter(text)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return text

    @model_validator(mode="after")
    def _one_model_key(self) -> JobSpec:
        if (self.model is None) == (not self.models):
            raise ValueError("name the model: 'model' (one) or 'models' (a list), not both")
        return self

    @model_validator(mode="after")
    def _scaled_engine(self) -> JobSpec:
        """``[autoscale]`` sizes a cluster: not the local engine's one process, and not
        beside a fixed ``workers`` count."""
        if self.autoscale is None:
            return self
        if ENGINES[self.engine].local:
            raise ValueError(
                f"[autoscale] sizes a cluster, and engine {self.engine!r} runs in one "
                "process; use engine 'ray' or 'spark', or remove [autoscale]"
            )
        if self.workers != "auto":
            raise ValueError(
                f"workers = {self.workers} fixes the count that [autoscale] plans; set "
                "workers = 'auto' or remove [autoscale]"
            )
        return self

    @property
    def model_arg(self) -> str | list[dict[str, str | None]]:
        """What ``score_parquet``'s ``model`` takes: the reference, or the list."""
        if self.model is not None:
            return self.model
        entries = [ModelEntry(model=m) if isinstance(m, str) else m for m in self.models]
        return [e.model_dump() for e in entries]

    @property
    def model_ref(self) -> str:
        """The model as the job file names it (a list joined by ``+``)."""
        if self.model is not None:
            return self.model
        return " + ".join(m if isinstance(m, str) else m.model for m in self.models)

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        if value not in ENGINES:
            raise ValueError(f"unknown engine {value!r}: expected one of {', '.join(ENGINES)}")
        return value

    @field_validator("workers")
    @classmethod
    def _positive(cls, value: str | int) -> str | int:
        if isinstance(value, int) and value < 1:
            raise ValueError("workers must be 'auto' or at least 1")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone(value)  # raises naming it
        return value

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, value: str | None) -> str | None:
        if value is not None:
            parse_deadline(value)  # raises on 2026-02-30, 25:00 or any other form
        return value

    def deadline_at(self, start: datetime) -> datetime | None:
        """The deadline as an aware datetime, for a job starting at ``start``."""
        if self.deadline is None:
            return None
        deadline = parse_deadline(self.deadline)
        if deadline.duration is not None:
            return start + deadline.duration
        assert deadline.at is not None  # not a duration: a time of day
        where = zone(self.timezone)
        if deadline.day is not None:  # dated: its day plus its days, at its time
            day = deadline.day + timedelta(days=deadline.days)
            return datetime.combine(day, deadline.at, tzinfo=where).astimezone(timezone.utc)
        local = start.astimezone(where)
        today = local.replace(hour=deadline.at.hour, minute=deadline.at.minute, second=0,
                              microsecond=0)  # fmt: skip
        days = (today + timedelta(days=d) for d in (-1, 0, 1))  # yesterday's may be the one
        return next(at for at in days if at >= local - _LATE_WINDOW).astimezone(timezone.utc)

    def stores(self) -> StoreConfig:
        """fsspec's options for the job's object stores (its ``[storage_options]``)."""
        urls = [storage_url(self.input), storage_url(self.output), root_url(self.registry)]
        return store_config(self.storage_options, urls)

    def engine_options(self) -> dict[str, Any]:
        """``score_parquet``'s engine options: the engine's table, workers, resources."""
        workers = None if self.workers == "auto" else int(self.workers)
        return ENGINES[self.engine].job_options(
            getattr(self, self.engine, None),
            workers=workers,
            cpus=self.resources.cpus,
            gpus=self.resources.gpus,
        )


def job_run_date(path: str | os.PathLike[str], given: str) -> str:
    """``RUN_DATE`` for the job file at ``path``: ``today`` is the day in the job's time
    zone (:func:`scoring._when.run_date`); a date (YYYY-MM-DD) is itself."""
    file = Path(path)
    if given != "today":
        try:
            return date.fromisoformat(given).isoformat()
        except ValueError:
            raise JobFileError(f"--run-date {given!r}: give 'today' or a date (YYYY-MM-DD)"
                               ) from None  # fmt: skip
    try:
        zone_name = tomllib.loads(file.read_text()).get("timezone", "UTC")
        return run_date(str(zone_name)).isoformat()
    except (OSError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise JobFileError(f"job file {str(file)!r}: {exc}") from None


def load_job(path: str | os.PathLike[str]) -> JobSpec:
    """Read and validate a job file; errors name the file and the key."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except OSError as exc:
        raise JobFileError(f"cannot read job file {str(file)!r}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError(f"job file {str(file)!r} is not valid TOML: {exc}") from exc
    try:
        return _anchored(JobSpec.model_validate(_expanded(data, file=file, key="")), file)
    except ValidationError as exc:
        key, reason = file_key_problem(exc)
        raise JobFileError(f"job file {str(file)!r}, key {key!r}: {reason}") from exc


#: The job file's keys that name local paths, read relative to the job file.
_PATHS = ("input", "output", "registry")


def _anchored(spec: JobSpec, file: Path) -> JobSpec:
    """Relative local paths of ``spec`` joined to the job file's folder: a job means the
    same files from cron's home, a scheduler's working directory or the repository root
    (URLs and absolute paths stay as they are)."""
    here = file.absolute().parent
    update = {}
    for key in _PATHS:
        value = getattr(spec, key)
        if value is None or "://" in value or is_iceberg(value):
            continue
        path = os.path.normpath(here / os.path.expanduser(value))  # an absolute one stays
        update[key] = path + "/" if value.endswith("/") else path
    return spec.model_copy(update=update)


def _expanded(value: Any, *, file: Path, key: str) -> Any:
    """Every string in the job file with ``${VAR}`` (or ``$VAR``) from the environment;
    a variable that is not set is refused naming it and its key: left as it is, it would
    become a literal ``date=${RUN_DATE}`` directory."""
    if isinstance(value, dict):
        return {k: _expanded(v, file=file, key=f"{key}.{k}".lstrip(".")) for k, v in value.items()}
    if isinstance(value, list):
        return [_expanded(v, file=file, key=f"{key}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in os.environ:
            raise JobFileError(
                f"job file {str(file)!r}, key {key!r}: environment variable {name} is not "
                f"set; set it (e.g. {name}=... scoring run {file.name}) or write the value"
            )
        return os.environ[name]

    return _VARIABLE.sub(variable, value)

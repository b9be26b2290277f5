"""``scoring plan``: will the job finish before its deadline, and with how many workers?

Rows come from the Parquet footers (nothing is read).  Throughput per worker is
measured by timing each of the local engine's stages (read, score on the job's device
and backend, encode Parquet) on a sample of the input; the stages overlap, so the
slowest sets the pace.  It is cached per model sha256, device, the backend and strategy
that will run and the product version, under the registry root.  Fixed costs: start-up
(listing the input, measured, plus a Ray or Spark cluster's start), model load and
compile (measured), commit.  Estimate = fixed + rows / (rate x workers), against the time
left when planning began (the listing and the compile are spent inside it, once).

A worker of a given number of CPUs (the job's ``[resources] cpus``, on Ray or Spark)
overlaps its stages only as far as its CPUs allow: its pace is the slowest stage or the
stages' sum over its CPUs, whichever is slower, measured with no more scoring threads
than it has.  With ``[autoscale]`` the workers are the ones the deadline needs, within
its bounds (:mod:`scoring.jobs._scaling` asks the cluster for them).
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from .._bundle import Bundle
from .._changes import Changes, Incremental
from .._drift import ColumnProfile, Profile
from .._engines import ENGINES, Engine, ModelSource, engine_named, options_for, resolve_model
from .._engines.base import preview_changes
from .._engines.local import dictionary_columns, parallel_calls
from .._engines.placement import measured_on, placement_only
from .._formats.dataset import InputDataset, filtered, open_input
from .._frameworks import mlflow_tracking
from .._modelset import BundleSet, Scoring, compile_payload, prefixed, scorer_for, set_of
from .._registry import ModelStore
from .._stores import configured
from .._version import __version__
from ..errors import ModelNotFoundError
from ._spec import JobSpec

__all__ = ["Plan", "Planned", "make_plan", "plan_and_model", "workers_needed"]

#: Four of the engine's CPU batches: enough that one slow batch does not set the rate.
SAMPLE_ROWS = 524_288
#: About how long the sample's scoring may take: a slow model (contributions of a deep
#: forest score a few thousand rows/s) is timed on fewer rows, never fewer than
#: MIN_SAMPLE_ROWS, rather than for minutes.
SAMPLE_SECONDS = 5.0
MIN_SAMPLE_ROWS = 4096
COMMIT_SECONDS = 0.1
COMMIT_SECONDS_PER_FILE = 0.02
#: No bound on the threads of a measurement that is not a worker's.
MAX_CALLS = 1 << 16


@dataclass
class Plan:
    job: str
    engine: str
    device: str
    backend: str
    rows: int
    files: int
    rows_per_second: float  # per worker
    workers: int
    startup_seconds: float
    compile_seconds: float
    commit_seconds: float
    estimated_seconds: float
    deadline: str | None  # ISO time, UTC
    available_seconds: float | None
    workers_needed: int | None  # to meet the deadline; None when no count would
    feasible: bool
    cached: bool
    #: Rows/s of reading the input and writing its outputs alone (no scoring), timed on
    #: the same sample: the pace a job could at best reach per worker.
    io_rows_per_second: float | None = None
    #: An incremental job's change set now (kind, reason, versions, rows inserted,
    #: updated, deleted, the input's rows): ``rows`` is what it scores.  None: full.
    changes: dict[str, Any] | None = None
    #: The tensor backend's strategy the model was timed with ("" for the others).
    strategy: str = ""
    #: ``[autoscale]``'s bounds (None without it): ``workers`` is what the deadline
    #: needs within them.
    min_workers: int | None = None
    max_workers: int | None = None
    #: What the cluster was asked for and gave, over time (:mod:`._scaling`), once asked.
    scaling: dict[str, Any] | None = None

    @property
    def margin(self) -> float | None:
        if not self.available_seconds:
            return None
        return (self.available_seconds - self.estimated_seconds) / self.available_seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "margin": self.margin}

    def scaled(self) -> str | None:
        """What ``[autoscale]`` asked the cluster for and got, in one line."""
        if not self.scaling:
            return None
        s = self.scaling
        return (
            f"workers: needed {s['needed']}, requested {s['requested']}, granted "
            f"{s['granted']} ([autoscale] {s['min_workers']} to {s['max_workers']}); "
            f"{s['worker_seconds']:,.0f} worker-seconds held"
        )

    def summary(self) -> str:
        lines = [
            f"plan for job {self.job!r}: engine {self.engine}, "
            f"{self.backend}{'/' + self.strategy if self.strategy else ''} on {self.device}",
            f"  rows: {self.rows:,} in {self.files} file(s) (from Parquet footers)"
            if self.changes is None
            else f"  rows: {self.rows:,} to score; {self.changes['said']}",
            f"  throughput: {self.rows_per_second:,.0f} rows/s per worker "
            f"({'cached' if self.cached else 'measured'}), workers: {self.workers}",
            f"  fixed: start-up {self.startup_seconds:.1f} s, model load and compile "
            f"{self.compile_seconds:.1f} s, commit {self.commit_seconds:.1f} s",
        ]
        verdict = f"  estimated {self.estimated_seconds:,.1f} s"
        if self.deadline is None:
            return "\n".join([*lines, verdict + " (no deadline)"])
        left = self.available_seconds or 0.0
        if left <= 0:  # a clock or dated deadline: a late rerun, a backfill of an old date
            return "\n".join([*lines, verdict + (
                f"; deadline {self.deadline} passed {-left:,.0f} s ago: NOT feasible; for a "
                "rerun or a backfill give a deadline from the start (--deadline 2h)"
            )])  # fmt: skip
        verdict += f"; deadline {self.deadline} in {left:,.0f} s: "
        if self.feasible:
            verdict += f"feasible, margin {self.margin:.0%}"
            if self.max_workers is not None:
                verdict += (
                    f", on {self.workers} workers (needs {self.workers_needed}; [autoscale] "
                    f"{self.min_workers} to {self.max_workers})"
                )
        elif self.max_workers is not None and self.workers_needed is not None:
            short = self.estimated_seconds - (self.available_seconds or 0.0)
            verdict += (
                f"NOT feasible: needs {self.workers_needed} workers, more than [autoscale] "
                f"max_workers {self.max_workers}; raise max_workers or give a deadline "
                f"{math.ceil(short):,} s later"
            )
        elif self.workers_needed is None:
            fixed = self.startup_seconds + self.compile_seconds + self.commit_seconds
            verdict += (
                f"NOT feasible: the fixed costs alone ({fixed:.1f} s) exceed the time "
                "left; needs a later deadline"
            )
        else:
            short = self.estimated_seconds - (self.available_seconds or 0.0)
            others = " or ".join(name for name, e in ENGINES.items() if not e.local)
            where = f" (engine {others})" if engine_named(self.engine).local else ""
            verdict += (
                f"NOT feasible: needs {self.workers_needed} workers{where}, or a deadline "
                f"{math.ceil(short):,} s later"
            )
        return "\n".join([*lines, verdict])


class Planned(NamedTuple):
    plan: Plan
    model: ModelSource  # resolved once: the run scores with this one
    data: InputDataset  # its footers, read once: the run scores these files
    reference: Profile | None = None  # the registered version's, for drift checks


def make_plan(spec: JobSpec, *, start: datetime | None = None) -> Plan:
    """The plan for ``spec`` starting at ``start`` (default: now)."""
    with configured(spec.stores()):
        return plan_and_model(spec, start=start).plan


def plan_and_model(spec: JobSpec, *, start: datetime | None = None) -> Planned:
    """The plan, with the model and the input it was made for, for the run to reuse."""
    start = start or datetime.now(timezone.utc)
    # The time left counts from here, not from ``start`` (a nominal start may be long
    # past), and not from after the listing and the compile, which the estimate counts.
    planning = datetime.now(timezone.utc)
    engine = engine_named(spec.engine)
    began = time.perf_counter()
    data = open_input(spec.input, version=spec.input_version, empty=spec.incremental)
    if spec.filter is not None:  # its columns checked now; its rows counted as the run reads
        data = filtered(data, spec.filter, incremental=spec.incremental)
    listing = time.perf_counter() - began
    store = ModelStore(spec.registry, db_url=spec.registry_db,
                       storage_options=spec.storage_options)  # fmt: skip
    began = time.perf_counter()
    with mlflow_tracking(spec.mlflow_uri):
        source = resolve_model(spec.model_arg, registry=store, device=spec.device,
                               backend=spec.backend, strategy=spec.strategy,
                               local=engine.local)  # fmt: skip
    # Workers score on the job's device and backend: measure that, not the checker (on
    # CPU where this driver has no GPU: see measured_on).
    timed_on = spec.device if engine.local else measured_on(spec.device)
    model = (
        source.compiled
        if engine.local
        else compile_payload(
            source.shipped(), device=timed_on, backend=spec.backend, strategy=spec.strategy
        )
    )
    compile_seconds = time.perf_counter() - began
    cache = _Cache(store)
    # Keyed by what will run (the backend and strategy ``auto`` picked, the device) and
    # the product version, which may score at another pace: a rate measured for one
    # pick never stands for another.
    key = f"{model.sha256}|{model.device}|{model.backend}|{model.strategy or '-'}|{__version__}"
    # The outputs written (contributions cost far more than scores) and the CPUs of one
    # worker change the pace too.
    threads = _worker_cpus(spec, engine)
    key += f"|{spec.outputs}" + (f"|{threads}cpu" if threads else "")
    rate, io_rate = cache.get(key)
    cached = rate is not None
    if rate is None:
        rate, io_rate = _measure(model, spec, data, threads=threads)
        cache.put(key, rate, io_rate)
    workers = (
        spec.autoscale.min_workers  # sized below, from the deadline
        if spec.autoscale is not None
        else int(spec.workers)
        if spec.workers != "auto" and not engine.local
        else engine.workers(options_for(engine, spec.engine_options()), device=spec.device)
    )
    changes = _changes(spec, data, source.compiled)
    rows = data.rows if changes is None else changes.rows
    startup = engine.startup_seconds + listing
    commit = COMMIT_SECONDS + COMMIT_SECONDS_PER_FILE * len(data.fragments)
    fixed = startup + compile_seconds + commit
    deadline = spec.deadline_at(start)
    available = (deadline - planning).total_seconds() if deadline else None
    needed = workers_needed(rows, rate=rate, seconds=available, fixed=fixed)
    if spec.autoscale is not None and available is not None:  # no count of its own: the most
        workers = spec.autoscale.clamp(spec.autoscale.max_workers if needed is None else needed)
    estimate = fixed + rows / (rate * workers)
    plan = Plan(
        job=spec.name, engine=spec.engine, device=_device(spec, str(model.device), timed_on),
        backend=model.backend, strategy=getattr(model, "strategy", None) or "",
        rows=rows, files=len(data.fragments), rows_per_second=rate, workers=workers,
        startup_seconds=startup, compile_seconds=compile_seconds, commit_seconds=commit,
        estimated_seconds=estimate,
        deadline=deadline.isoformat(timespec="seconds") if deadline else None,
        available_seconds=available, workers_needed=needed,
        feasible=available is None or estimate <= available, cached=cached,
        io_rows_per_second=io_rate,
        min_workers=spec.autoscale.min_workers if spec.autoscale else None,
        max_workers=spec.autoscale.max_workers if spec.autoscale else None,
        changes=None if changes is None else {**changes.to_dict(), "said": changes.describe()},
    )  # fmt: skip
    return Planned(plan, source, data, _reference(store, source))


def workers_needed(rows: int, *, rate: float, seconds: float | None, fixed: float) -> int | None:
    """Workers at ``rate`` rows/s each that score ``rows`` in the ``seconds`` left after
    the ``fixed`` costs; None without a deadline or when the fixed costs alone exceed it."""
    if seconds is None or seconds <= fixed:
        return None
    return max(1, math.ceil(rows / (rate * (seconds - fixed))))


def _worker_cpus(spec: JobSpec, engine: Engine) -> int | None:
    """The CPUs of one worker of a cluster engine, where the job gives them."""
    if engine.local or spec.resources.cpus is None:
        return None
    return max(1, int(spec.resources.cpus))


def _device(spec: JobSpec, measured: str, timed_on: str) -> str:
    """The plan's device: where the model was timed, and the workers' GPU when this
    driver, having none, timed it on CPU."""
    if spec.device.startswith("cuda") and timed_on == "cpu" and not placement_only():
        return f"{spec.device} (timed on cpu: this driver has no GPU)"
    return measured


def _changes(spec: JobSpec, data: InputDataset, model: Scoring) -> Changes | None:
    """An incremental job's change set as of now (counted, nothing written)."""
    if not spec.incremental:
        return None
    return preview_changes(data, spec.output, model, keep=spec.keep, outputs=spec.outputs,
                           output_format=spec.format,
                           incremental=Incremental(tuple(spec.key), spec.on_changed))  # fmt: skip


def _reference(store: ModelStore, source: ModelSource) -> Profile | None:
    """The reference profile of the registered version the job scores with, if any (a
    model file or object has none); of a set of models, their profiles as one."""
    members = set_of(source.bundle)
    if members is not None:
        return _set_reference(store, members)
    return _bundle_reference(store, source.bundle)


def _set_reference(store: ModelStore, models: BundleSet) -> Profile | None:
    """The members' profiles as one, as their columns are written side by side: each
    member's outputs under its prefix, a feature by its name (profiled from the first
    member that reads it).  A member without a profile is left out: the drift report
    then has none of its outputs."""
    features: dict[str, ColumnProfile] = {}
    outputs: dict[str, ColumnProfile] = {}
    rows = 0
    for bundle, prefix in zip(models.bundles, models.prefixes, strict=True):
        reference = _bundle_reference(store, bundle)
        if reference is None:
            continue
        for name, column in reference.features.items():
            features.setdefault(name, column)
        outputs.update({prefixed(prefix, n): c for n, c in reference.outputs.items()})
        rows = max(rows, reference.rows)
    return Profile(rows=rows, features=features, outputs=outputs) if outputs else None


def _bundle_reference(store: ModelStore, bundle: Any) -> Profile | None:
    if not isinstance(bundle, Bundle) or "name" not in bundle.manifest:
        return None
    manifest = bundle.manifest
    try:
        mv = store.get(manifest["name"], version=int(manifest["version"]))
    except ModelNotFoundError:  # a bundle from another registry
        return None
    return store.reference(mv) if mv.sha256 == manifest["sha256"] else None


def _measure(
    model: Scoring, spec: JobSpec, data: Any, *, threads: int | None = None
) -> tuple[float, float]:
    """Rows/s of the slowest of the local engine's stages (read, score, Parquet encode),
    each timed on a sample: the stages overlap, so the slowest one sets the pace; and
    rows/s of reading and writing alone (what a job is held to).  The sample is scored
    as the engine scores it, side by side where the engine does, and encoded as its
    writer encodes.  For a worker of ``threads`` CPUs: scored on at most that many
    threads, and the stages overlap only as far as its CPUs allow."""
    scorer = scorer_for(model, keep=spec.keep, outputs=spec.outputs)
    columns = list(dict.fromkeys([*spec.keep, *scorer.feature_columns(data.schema.names)]))
    data.require(columns)
    calls = min(parallel_calls(scorer), threads or MAX_CALLS)
    head = data.head(columns=columns, rows=1024)
    scorer.score(head)  # warm-up: first-call costs
    began = time.perf_counter()
    scorer.score(head)
    per_row = (time.perf_counter() - began) / max(1, head.num_rows)
    wanted = int(SAMPLE_SECONDS * calls / per_row) if per_row > 0 else SAMPLE_ROWS
    wanted = max(MIN_SAMPLE_ROWS, min(SAMPLE_ROWS, wanted))
    # A full sample in the engine's own batches (a GPU's are large); a short one split
    # over the calls that score side by side.
    batch_rows = scorer.batch_rows if wanted >= SAMPLE_ROWS else -(-wanted // calls)
    began = time.perf_counter()
    sample = _sample(data, columns=columns, rows=wanted,
                     batch_rows=min(scorer.batch_rows, batch_rows))  # fmt: skip
    read = time.perf_counter() - began
    with ThreadPoolExecutor(max_workers=calls) as pool:
        began = time.perf_counter()
        scored = list(pool.map(scorer.score, sample))
        score = time.perf_counter() - began
    began = time.perf_counter()
    if scored:
        coded = dictionary_columns(scored[0].schema, list(spec.keep))
        with pq.ParquetWriter(io.BytesIO(), scored[0].schema, compression="snappy",
                              use_dictionary=coded) as writer:  # fmt: skip
            writer.write_table(pa.concat_tables(scored))
    write = time.perf_counter() - began
    rows = sum(batch.num_rows for batch in sample)
    slowest = max(read, score, write, (read + score + write) / (threads or MAX_CALLS))
    io_alone = read + write
    return (rows / slowest if slowest > 0 else float(rows),
            rows / io_alone if io_alone > 0 else float(rows))  # fmt: skip


def _sample(data: Any, *, columns: list[str], rows: int, batch_rows: int) -> list[Any]:
    """About the first ``rows`` rows of the input (or all of it), in batches of at most
    ``batch_rows`` (the engine's, or fewer for a short sample)."""
    batches = (
        batch
        for fragment in data.fragments
        for batch in data.batches(fragment, columns=columns, batch_rows=batch_rows)
    )
    sample, taken = [], 0
    while taken < rows and (batch := next(batches, None)) is not None:
        sample.append(batch)
        taken += batch.num_rows
    return sample


class _Cache:
    """Measured rows/s per (model sha256, device, backend, strategy, version), in the
    registry root."""

    def __init__(self, registry: ModelStore):
        self.path = (
            Path(registry.store.root) / "cache" / "throughput.json"
            if registry.store.is_local
            else None
        )

    def get(self, key: str) -> tuple[float | None, float | None]:
        """The scoring rate and the IO-alone rate measured for ``key`` (None: never)."""
        if self.path is None or not self.path.exists():
            return None, None
        value = json.loads(self.path.read_text()).get(key)
        if not value:
            return None, None
        io_alone = value.get("io_rows_per_second")
        return float(value["rows_per_second"]), float(io_alone) if io_alone else None

    def put(self, key: str, rate: float, io_rate: float | None) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entries = json.loads(self.path.read_text()) if self.path.exists() else {}
        entries[key] = {
            "rows_per_second": rate,
            "io_rows_per_second": io_rate,
            "measured_at": datetime.now(timezone.utc).isoformat(),
        }
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        tmp.replace(self.path)

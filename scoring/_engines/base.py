"""What every engine shares: the protocol, the model resolved once, the checked run
plan, publication and the final report.

``plan_run`` does every check that can be done before a byte is written (input files
and footers, columns and types, kept columns, a trial score of the first rows, the
output location) so that bad input fails fast and publishes nothing.  A run is keyed
by the sha256 of the model's canonical bytes, whatever form the model came in (for a
list of models, the set's: every model's, prefix and filter), so a rerun with another
model never resumes or keeps this one's output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pydantic import BaseModel

from .._bundle import Bundle
from .._catalog import ensure_verified
from .._changes import INCREMENTAL, Changes, Incremental, change_set, check_incremental
from .._drift import Counts, Profile, count, merge
from .._explanations import output_spec
from .._formats import DEFAULT_FORMAT, Opening, Publisher, Target, format_named
from .._formats.dataset import Fragment, InputDataset, open_input
from .._frameworks import is_mlflow_ref, load_mlflow_model, mlflow_name
from .._journal.journal import Entry
from .._journal.lease import OutputLease
from .._model import compile_model
from .._modelset import (
    BundleSet,
    Scoring,
    SetScorer,
    compile_set,
    is_compiled,
    scorer_for,
    shipped,
)
from .._progress import RunProgress
from .._registry import ModelStore
from .._scorer import Scorer
from .._specs import Output, validated
from .._stores import StoreConfig
from .._where import RowFilter
from ..errors import ConfigError, EngineError, InputError, ScoringError
from . import plan as plan_hooks
from .plan import Hooks, RunPlan, ScoreSpec
from .scaling import Autoscale, Autoscaler
from .target import check_apart, partitions_of, pinned, publisher_for

__all__ = [
    "ENGINES",
    "Engine",
    "ModelSource",
    "PlanRequest",
    "Run",
    "ScoreReport",
    "Scored",
    "check_outside_process",
    "job_options",
    "options_for",
    "plan_run",
    "preview_changes",
    "publish",
    "register",
    "report",
    "resolve_model",
    "unused_staging_cleared",
]

TRIAL_ROWS = 1000


class Engine(Protocol):
    """One way to run a job: ``local``, ``ray`` or ``spark`` (see :data:`ENGINES`)."""

    name: str
    #: Scores in this process: the model is compiled here for the job's device.
    local: bool
    #: Resumes from the journal (else it rescores every file, e.g. Spark's overwrite).
    resumes: bool
    #: Prefixes of the files its own committer leaves in the output.
    engine_files: tuple[str, ...]
    #: Seconds to start before the first row is scored (cluster, session, workers).
    startup_seconds: float
    #: Its options, one validated model (extra keys refused): ``engine_options``, the
    #: job file's ``[<name>]`` table and the CLI's flags (:func:`options_for`).
    options: type[BaseModel]

    def job_options(
        self, table: Any, *, workers: int | None, cpus: float | None, gpus: float | None
    ) -> dict[str, Any]:
        """``engine_options`` for a job file: its ``[<name>]`` table, its ``workers`` and
        its per-worker ``[resources]`` (None where the file leaves them to the engine)."""

    def workers(self, options: Any, *, device: str) -> int:
        """How many workers a run with ``options`` gets (for the planner)."""

    def autoscaler(self, options: Any, *, device: str, bounds: Autoscale) -> Autoscaler:
        """The cluster's workers requested within ``bounds`` (a job's ``[autoscale]``);
        an engine of one process refuses it (:class:`ConfigError`)."""

    def run(self, run: Run, *, source: ModelSource, options: Any, progress: RunProgress) -> Scored:
        """Score ``run.todo`` into the output's staging area (nothing published)."""


#: Every engine by name; each engine module registers itself on import.
ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    ENGINES[engine.name] = engine
    return engine


@dataclass(frozen=True)
class ModelSource:
    """The job's model (or set of models), resolved once: ``compiled`` scores (local
    engines) or checks and plans (distributed ones, on the native predictor); ``bundle``
    is what workers get."""

    compiled: Scoring
    bundle: Bundle | BundleSet | None
    #: How summaries and reports name it: what was asked and what that resolved to
    #: (``churn@production = churn@3``, ``models:/churn@champion (MLflow version 4)``).
    label: str = ""

    @property
    def sha256(self) -> str:
        return self.compiled.sha256

    def shipped(self) -> Bundle | BundleSet:
        """The bundle workers receive."""
        if self.bundle is None:
            raise ConfigError(
                "a compiled model cannot be shipped to workers; pass the registry "
                "reference, a Bundle, the model file or the fitted model"
            )
        return self.bundle


@dataclass
class Scored:
    """What an engine's run produced: journal entries (None when its own committer wrote
    ``engine_files``), rows per worker and the output metadata the workers wrote."""

    entries: list[Entry] | None
    workers: dict[str, int]
    metadata: dict[str, str]
    stages: dict[str, float] = field(default_factory=dict)  # busy seconds, where measured
    #: An engine that journals no files (``entries`` None) counts drift itself.
    drift_counts: Counts | None = None


@dataclass
class ScoreReport:
    """What a run did: rows, time, model, where; ``timeline`` is (seconds, rows)."""

    input: str
    output: str
    engine: str
    rows: int
    rows_skipped: int
    files: int
    seconds: float
    rows_per_second: float
    model: str
    sha256: str
    backend: str
    strategy: str | None
    device: str
    outputs: list[str] = field(default_factory=list)
    #: The model as it was asked for and what that resolved to (see ModelSource.label),
    #: and its kind (``XGBClassifier``).
    model_label: str = ""
    model_kind: str = ""
    #: Why that strategy, and how it walks this model (``fused`` on CPU: the layout and
    #: schedule measured for it), as the driver compiled it.
    strategy_reason: str = ""
    #: The registry's parity record of that choice (a stored version), else "".
    verified: str = ""
    #: A set's models: prefix, name, version, sha256, backend, scoring seconds (shared
    #: by the models one combined forest scores); empty for one model.
    models: list[dict[str, Any]] = field(default_factory=list)
    #: Rows per bin of the model's reference profile, over every file of the output
    #: (resumed ones too); None when not monitored, or the engine journals no files.
    drift_counts: Counts | None = None
    #: Busy seconds per stage (read, score, write: they overlap; commit), where measured.
    stages: dict[str, float] = field(default_factory=dict)
    already_complete: bool = False
    #: An incremental run's: full or incremental (and why), the input versions covered,
    #: rows inserted, updated and deleted, the input's rows (a job adds
    #: ``saved_seconds``: the rows it did not score, at its plan's measured rate).  None:
    #: not incremental.
    changes: dict[str, Any] | None = None
    timeline: list[tuple[float, int]] = field(default_factory=list)
    workers: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.already_complete and self.changes is not None and self.changes["kind"] == "none":
            return f"{self.output}: {self.changes['said']}: nothing to do"
        if self.already_complete:
            return f"{self.output} already holds this run, complete: nothing to do"
        return (
            f"{self.rows:,} rows in {self.seconds:.1f} s ({self.rows_per_second:,.0f} rows/s), "
            f"model {self.named_model} on {self.backend}/{self.strategy or '-'} {self.device}, "
            f"{self.files} file(s) -> {self.output}"
            + (f" ({self.rows_skipped:,} rows resumed)" if self.rows_skipped else "")
            + (f"; rows per worker: {self._per_worker()}" if not self._one_process() else "")
            + (f"; {self.changes['said']}" if self.changes is not None else "")
        )

    def busy(self) -> str:
        """Each pipelined stage's busy seconds (they overlap), where the engine counted
        them; empty where it did not."""
        order = ("read", "prepare", "kernel", "outputs", "write")
        found = [f"{k} {self.stages[k]:.1f} s" for k in order if k in self.stages]
        said = "thread seconds per stage (threads work side by side, so they may add up to more "
        return f"{said}than the run): {', '.join(found)}" if found else ""

    @property
    def named_model(self) -> str:
        """The model as asked for, what it resolved to, and its kind."""
        named = self.model_label or self.model
        return (
            named
            if not self.model_kind or self.model_kind in named
            else (f"{named} ({self.model_kind})")
        )

    def _one_process(self) -> bool:
        return self.engine not in ("ray", "spark")

    def _per_worker(self) -> str:
        return ", ".join(f"{w} {n:,}" for w, n in sorted(self.workers.items())) or "-"


@dataclass
class Run:
    """A run in this process: its :class:`~.plan.RunPlan` (the same in every worker)
    and what is this process's own: the model compiled here and its scorer, the files
    still to do and those done, whether the output was complete already, and (the
    driver's) the publisher."""

    plan: RunPlan
    model: Scoring
    scorer: Scorer | SetScorer
    todo: list[Fragment] = field(default_factory=list)
    done: dict[str, Entry] = field(default_factory=dict)
    complete: bool = False
    publisher: Publisher | None = None
    #: What the driver's publisher found of the output and publishes into.
    target: Target | None = None
    started: float = field(default_factory=time.perf_counter)
    #: An incremental run's change set (None: every row is scored).
    changes: Changes | None = None

    def count(self, batch: pa.RecordBatch | pa.Table, scored: pa.Table) -> Counts | None:
        """``batch``'s features and ``scored``'s outputs counted for drift, if monitored."""
        if self.plan.score.monitor is None:
            return None
        return count_batch(self.plan.score.monitor, self.scorer, batch, scored)

    def cast(self, table: pa.Table) -> pa.Table:
        """``table`` as the files hold it: a Delta output's partition columns are left to
        the files' folders."""
        schema = self.plan.schema
        if table.schema.names != schema.names:
            table = table.select(schema.names)
        return table.cast(schema) if table.schema != schema else table


def count_batch(
    monitor: Profile,
    scorer: Scorer | SetScorer,
    batch: pa.RecordBatch | pa.Table,
    scored: pa.Table,
) -> Counts:
    """The feature columns ``scorer`` reads from ``batch`` and its ``scored`` outputs,
    counted into ``monitor``'s bins."""
    features = batch.select(scorer.feature_columns(batch.schema.names))
    if isinstance(features, pa.RecordBatch):
        features = pa.Table.from_batches([features])
    return count(monitor, features, scored)


def resolve_model(
    model: Any,
    *,
    registry: str | os.PathLike[str] | ModelStore | None = None,
    device: str = "auto",
    backend: str = "auto",
    strategy: str = "auto",
    local: bool = True,
) -> ModelSource:
    """A registry reference (``name@alias``), a Bundle, a model file, a fitted model or a
    compiled model, or a list of models (:func:`bundle_set`) scored in one pass,
    resolved once for a job; see :class:`ModelSource`."""
    if isinstance(model, ModelSource):
        return model
    if is_compiled(model):  # as scoring.compile returned it: one model, or a set
        if not local and shipped(model) is None:
            raise ConfigError(
                "a compiled model cannot be shipped to workers; pass the registry reference, "
                "a Bundle, the model file or the fitted model"
            )
        return ModelSource(model, shipped(model))
    if isinstance(model, (list, tuple)):
        bundles = bundle_set(model, registry=registry)
        if local:
            return ModelSource(compile_set(bundles, backend=backend, device=device,
                                           strategy=strategy), bundles)  # fmt: skip
        return ModelSource(compile_set(bundles, backend="native"), bundles)
    bundle: Bundle | None = model if isinstance(model, Bundle) else None
    store: ModelStore | None = None
    label, name = _label(model), None
    if isinstance(model, str) and is_mlflow_ref(model):  # loaded once, its version named
        loaded = load_mlflow_model(model)
        version = loaded.source.get("mlflow.model_version")  # none for a run's or a folder's
        label = f"{model} (MLflow version {version})" if version else str(model)
        model, name = loaded.model, mlflow_name(model)
    if _registry_ref(model):
        store = registry if isinstance(registry, ModelStore) else ModelStore(registry)
        bundle = store.bundle(model)
        label = _registered_label(model, store)
    if bundle is None and local:  # compiled from the object itself, hashed once
        compiled = compile_model(model, backend=backend, device=device, strategy=strategy)
        return ModelSource(compiled, None, label)
    bundle = bundle or Bundle.of(model, name=name)
    if local:
        compiled = compile_model(bundle, backend=backend, device=device, strategy=strategy)
        if store is not None:  # a stored version scores only with a verified choice
            compiled.verified = ensure_verified(store, bundle, compiled)
        return ModelSource(compiled, bundle, label)
    # The driver only checks and plans (it may have no GPU): the native predictor
    # produces the same columns the workers will, without compiling anything.
    return ModelSource(compile_model(bundle, backend="native"), bundle, label)


def _label(model: Any) -> str:
    """A model file by its name; an object or a Bundle by what the report says of it."""
    return Path(model).name if isinstance(model, (str, os.PathLike)) else ""


def _registered_label(ref: str, store: ModelStore) -> str:
    """``churn@production = churn@3``, and where it came from if MLflow was its source."""
    mv = store.get(ref)
    resolved = f"{mv.name}@{mv.version}"
    label = resolved if ref == resolved else f"{ref} = {resolved}"
    if "mlflow.source" in mv.tags:
        version = mv.tags.get("mlflow.model_version")
        label += f" (from {mv.tags['mlflow.source']}" + (
            f", MLflow version {version})" if version else ")"
        )
    return label


def _registry_ref(model: Any) -> bool:
    """A name this package's registry resolves (not a file, not an MLflow model)."""
    return isinstance(model, str) and not os.path.exists(model) and not is_mlflow_ref(model)


def bundle_set(
    models: Sequence[Any], *, registry: str | os.PathLike[str] | ModelStore | None = None
) -> BundleSet:
    """A list of models as a :class:`BundleSet`.  Each item is what ``model=`` takes for
    one model (a registry reference, a model file, a fitted model, a Bundle) or a mapping
    ``{"model": ..., "prefix": ..., "where": ...}``; the prefix defaults to the model's
    name, ``where`` is a row filter (:mod:`scoring._where`)."""
    store: ModelStore | None = registry if isinstance(registry, ModelStore) else None
    bundles, prefixes, filters = [], [], []
    for item in models:
        entry = dict(item) if isinstance(item, Mapping) else {"model": item}
        unknown = sorted(set(entry) - {"model", "prefix", "where"})
        if unknown or "model" not in entry:
            raise ConfigError(
                "a model in a list is a reference or {'model': ..., 'prefix': ..., "
                f"'where': ...}}; got keys {sorted(entry)}"
            )
        one = entry["model"]
        if is_compiled(one) or isinstance(one, (list, tuple)):
            raise ConfigError(
                "a list of models takes registry references, Bundles, model files or fitted "
                f"models, not {type(one).__name__}"
            )
        if _registry_ref(one):
            store = store or ModelStore(registry)  # type: ignore[arg-type]
            bundle = store.bundle(one)
        elif isinstance(one, Bundle):
            bundle = one
        else:  # a model file is named after itself (churn.json: prefix churn)
            named = isinstance(one, (str, os.PathLike)) and not is_mlflow_ref(one)
            bundle = Bundle.of(one, name=Path(one).stem if named else None)
        bundles.append(bundle)
        prefixes.append(str(entry.get("prefix") or bundle.manifest["name"]))
        filters.append(entry.get("where") or None)
    return BundleSet(tuple(bundles), tuple(prefixes), tuple(filters))


def options_for(engine: Engine, given: Mapping[str, Any]) -> Any:
    """``engine``'s options from ``engine_options``: one line naming a wrong key or
    value."""
    kind, name = engine.options, engine.name
    allowed = list(kind.model_fields)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(
            f"engine {name!r} has no option {unknown[0]!r} (options: "
            f"{', '.join(allowed) or 'none'})"
        )

    def said(key: str, why: str) -> str:
        return f"engine {name!r} option {key}={given.get(key)!r}: {why}"

    return validated(kind.model_validate, dict(given), said=said)


def job_options(table: BaseModel | None, engine: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A job file's engine options: its ``[<engine>]`` table, and the values its shared
    keys (``workers``, ``[resources]``) give (``given``, None where unset); one value
    given both ways differently is refused by name."""
    options = table.model_dump(exclude_none=True) if table is not None else {}
    for key, value in given.items():
        if value is None:
            continue
        if key in options and options[key] != value:
            raise ConfigError(
                f"the job file sets {key} twice: {value!r} and [{engine}] {key} = "
                f"{options[key]!r}; keep one"
            )
        options[key] = value
    return options


@dataclass(frozen=True)
class PlanRequest:
    """What a run is asked, as the records its caller already holds: the input (a
    location, or opened: a job's planner opens it once), the output (its location,
    format, mode and partition columns, :class:`scoring.Output`), the model, how each
    batch is scored (:class:`.plan.ScoreSpec`; its ``outputs`` as ``output_spec`` spells
    them, the job key's spelling), the engine, whether a rerun hashes its
    files, and what changed since the last run to score (``incremental``).
    ``settings``: the rest of what the run was given (engine, its options), recorded
    beside its staged files and compared on a rerun (:mod:`scoring._journal.staging`)."""

    input: str | InputDataset
    output: Output
    model: Scoring
    score: ScoreSpec
    engine: Engine
    verify: bool = False
    incremental: Incremental | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)


def plan_run(request: PlanRequest, *, lease: OutputLease | None = None,
             stores: StoreConfig | None = None, hooks: Hooks | None = None) -> Run:  # fmt: skip
    """Check everything that can be checked before writing; see the module docstring.
    ``lease`` is taken once the input is known good, before the output's state is read.
    A Delta output is written as its mode says (:mod:`scoring._formats.delta`); its
    partition columns are kept columns that partition the input
    (:func:`.target.partitions_of`).  ``hooks``: the plan's (:data:`.plan.HOOKS` by
    default).  ``request.incremental``: score only what changed since the output's last
    complete run (:mod:`scoring._changes`)."""
    input, model, engine = request.input, request.model, request.engine
    output, output_format = request.output.url, request.output.kind
    mode, partition_by = request.output.mode, request.output.partition_by
    keep, incremental = request.score.keep, request.incremental
    data = input if isinstance(input, InputDataset) else open_input(input)
    check_apart(data.url, output)
    outputs = request.score.outputs  # as the job key spells it (the caller's output_spec)
    scorer = scorer_for(model, keep=keep, outputs=outputs)
    scorer.check_schema(data.schema)
    columns = _read_columns(scorer, data, keep)
    data.require(columns)  # every file, not only the first, holds what is read
    trial = scorer.score(data.head(columns=columns, rows=TRIAL_ROWS))
    scorer.restart_clock()  # the report's seconds are the run's
    partitions = partitions_of(data, list(partition_by), keep=keep, mode=mode,
                               output_format=output_format,
                               own_committer=bool(engine.engine_files))  # fmt: skip
    schema = trial.schema.with_metadata(model.output_metadata())
    if format_named(output_format).folder_partitions:  # left to the key=value folders
        schema = pa.schema([f for f in schema if f.name not in partitions], schema.metadata)
    if incremental is not None:
        check_incremental(output_format=output_format, mode=mode, key=incremental.key,
                          keep=keep, on_changed=incremental.on_changed)  # fmt: skip
        mode = INCREMENTAL
    if lease is not None:
        lease.acquire()
    job = _job(model, keep, outputs, where=data.where)
    hooks = plan_hooks.HOOKS if hooks is None else hooks
    verify = request.verify
    given = {"input": data.url, "input_version": data.requested_version, "verify": verify,
             "engine": engine.name, **request.settings}  # fmt: skip
    if incremental is not None:
        given["incremental"] = asdict(incremental)
    opening = Opening(
        job,
        mode=mode,
        verify=verify,
        engine_files=engine.engine_files,
        settings=given,
        partitions=partitions,
        on_step=hooks.on_publish_step,
    )
    publisher = publisher_for(output, output_format=output_format, opening=opening)
    data = pinned(data, publisher)
    with unused_staging_cleared(publisher):
        target = publisher.check_target(data.fragments)
        complete = target.complete
        if not complete:
            publisher.check_schema(schema)
        if data.snapshot is not None and not complete:  # for this run's own rerun
            target.journal.pin_input({**data.snapshot, "requested": data.requested_version})
        changes = None if incremental is None else Changes("none", "", input_rows=data.rows)
        if incremental is not None and not complete:
            changes = change_set(data, publisher.previous(), job=job,
                                 journal=target.journal, output_format=output_format,
                                 on_changed=incremental.on_changed, key=incremental.key,
                                 columns=columns, present=publisher.present())  # fmt: skip
            _refuse_empty(data, changes)
            target = _follow(publisher, target, changes, key=incremental.key)
            complete = target.complete
            data = changes.data or data.subset([])
        elif not complete:
            _refuse_empty(data, None)
    done = {} if complete or not engine.resumes else publisher.completed(target, data.fragments)
    todo = [] if complete else [f for f in data.fragments if f.relpath not in done]
    plan = RunPlan(
        data,
        target.journal,
        model.sha256,
        tuple(columns),
        schema,
        request.score,
        stores=dict(stores or {}),
        hooks=hooks,
    )
    return Run(plan, model, scorer, todo, done, complete, publisher, target, changes=changes)


def _read_columns(scorer: Scorer | SetScorer, data: InputDataset, keep: Sequence[str]) -> list[str]:
    """The input columns a run reads: the kept ones, then the model's features."""
    return list(dict.fromkeys([*keep, *scorer.feature_columns(data.schema.names)]))


def _job(
    model: Scoring, keep: Sequence[str], outputs: str, *, where: RowFilter | None = None
) -> dict[str, Any]:
    """What keys a run (:func:`scoring._journal.journal.job_key`): model bytes, kept columns,
    outputs, and the input's filter where it has one (a job without keeps its key)."""
    job = {"model_sha256": model.sha256, "keep": list(keep), "outputs": outputs}
    return job if where is None else {**job, "filter": where.text}


@contextmanager
def unused_staging_cleared(publisher: Publisher | None) -> Iterator[None]:
    """A run refused or failed before it staged a file leaves no staging behind (its
    record would make the next run speak of an interrupted one)."""
    try:
        yield
    except ScoringError:
        if publisher is None:
            raise
        journal = publisher.journal
        record = journal.record() or {}
        if record and not record.get("publishing") and journal.unused():
            journal.clear()
        raise


def _refuse_empty(data: InputDataset, changes: Changes | None) -> None:
    """A table's snapshot without rows is scored only by an incremental run that
    follows it (its deletes applied); anything else has nothing to score."""
    if not data.rows and (changes is None or changes.kind == "full"):
        raise InputError(f"input {data.url!r} holds no rows: nothing to score")


def _follow(publisher: Publisher, target: Target, changes: Changes, *,
            key: Sequence[str]) -> Target:  # fmt: skip
    """The target an incremental run publishes into; complete already when nothing
    changed and no publication of this job (a kill) is left to finish.  Then nothing
    stays staged: the output is as the last run left it."""
    target = publisher.follow(target, changes, key=key)
    unfinished = (target.journal.record() or {}).get("publishing")
    if changes.kind == "none" and not unfinished:
        target.journal.clear()
        return replace(target, complete=True)
    return target


def preview_changes(
    data: InputDataset, output: str, model: Scoring, *, keep: Sequence[str] = (),
    outputs: str | Sequence[str] = "default", output_format: str = DEFAULT_FORMAT,
    incremental: Incremental,
) -> Changes:  # fmt: skip
    """What an incremental run of this job would score now, counted only: nothing is
    written and no lease is taken (a plan's estimate)."""
    outputs = output_spec(outputs)
    scorer = scorer_for(model, keep=keep, outputs=outputs)
    columns = _read_columns(scorer, data, keep)
    job = _job(model, keep, outputs)
    publisher = publisher_for(output, output_format=output_format,
                              opening=Opening(job, mode=INCREMENTAL))  # fmt: skip
    return change_set(data, publisher.previous(), job=job,
                      journal=None, output_format=output_format,
                      on_changed=incremental.on_changed, key=incremental.key,
                      columns=columns, present=publisher.present())  # fmt: skip


def publish(run: Run, scored: Scored, *, engine: Engine) -> int:
    """Publish what the engine wrote (staged files, or its own ``engine_files``), then
    the manifest and ``_SUCCESS``; returns the number of output files."""
    if run.publisher is None or run.target is None:
        raise EngineError("a worker's run has no publisher; the driver publishes")
    extra: dict[str, Any] = {"metadata": scored.metadata or run.model.output_metadata(),
                             "input": run.plan.data.url}  # fmt: skip
    if run.plan.data.snapshot is not None:  # the input version read (a Delta table's)
        extra["input_snapshot"] = run.plan.data.snapshot
    if scored.entries is None:
        manifest = run.publisher.publish_files(
            run.target, run.plan.data.fragments, prefix=engine.engine_files[0], extra=extra
        )
        return len(manifest.published())
    entries = [*run.done.values(), *scored.entries]
    run.publisher.publish(run.target, entries, extra=extra)
    return len(entries)


def counted(run: Run, scored: Scored) -> Counts | None:
    """The drift counts of every file of the output: resumed and newly scored."""
    if run.plan.score.monitor is None or scored.entries is None:
        return None if run.plan.score.monitor is None else scored.drift_counts
    total: Counts | None = None
    for entry in [*run.done.values(), *scored.entries]:
        if entry.stats is None:  # journaled by a run that did not count
            return None
        try:
            total = merge(total, entry.stats)
        except ValueError:  # journaled against another reference (same bytes, new sample)
            return None
    return total


def report(
    run: Run, *, engine: str, timeline: list[tuple[float, int]], scored: Scored | None = None,
    label: str = "",
) -> ScoreReport:  # fmt: skip
    seconds = time.perf_counter() - run.started
    rows = sum(f.rows for f in run.todo)
    if run.plan.data.where is not None and scored is not None:  # the rows the filter let in
        written = scored.entries
        rows = sum(e.rows for e in written) if written is not None else sum(scored.workers.values())
    meta = scored.metadata if scored is not None else {}
    result = ScoreReport(
        input=run.plan.data.url,
        output=run.publisher.url if run.publisher is not None else run.plan.journal.url,
        engine=engine,
        rows=rows,
        rows_skipped=sum(e.rows for e in run.done.values()),
        files=len(run.plan.data.fragments),
        seconds=seconds,
        rows_per_second=rows / seconds if seconds > 0 else 0.0,
        model=run.model.ref,
        model_label=label,
        model_kind=getattr(getattr(run.model, "forest", None), "model_kind", ""),
        sha256=run.model.sha256,
        # what the workers actually ran, not the driver's checking model
        backend=meta.get("scoring.backend", run.model.backend),
        strategy=meta.get("scoring.strategy", run.model.strategy or "") or None,
        strategy_reason=getattr(run.model, "strategy_reason", ""),
        verified=getattr(run.model, "verified", ""),
        device=meta.get("scoring.device", str(run.model.device)),
        outputs=run.scorer.output_names,
        already_complete=run.complete,
        timeline=timeline,
    )
    result.models = run.scorer.member_report(timed=ENGINES[engine].local)
    if run.changes is not None:
        result.changes = {**run.changes.to_dict(), "said": run.changes.describe()}
    if scored is not None:
        result.workers = scored.workers
        result.drift_counts = counted(run, scored)
        result.stages = dict(scored.stages)
    return result


def check_outside_process(engine: str, *urls: str) -> None:
    """Workers are other processes: they cannot see this process's memory filesystem."""
    for url in urls:
        if url.startswith("memory://"):
            raise ConfigError(
                f"engine {engine!r} needs storage every worker can reach; {url!r} exists "
                "only in this process (use a shared filesystem or object store)"
            )

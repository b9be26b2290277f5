"""What every engine shares: a checked run plan, the output schema, the final report.

``plan_run`` does every check that can be done before a byte is written (input files
and footers, columns and types, kept columns, a trial score of the first rows, the
output location) so that bad input fails fast and publishes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from .._version import __version__
from ..commit import Committer, Entry
from ..dataset import Fragment, InputDataset, open_input
from ..model import CompiledModel
from ..scorer import Scorer

__all__ = ["Run", "ScoreReport", "output_metadata", "plan_run", "report"]

TRIAL_ROWS = 1000


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
    already_complete: bool = False
    timeline: list[tuple[float, int]] = field(default_factory=list)
    workers: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.already_complete:
            return f"{self.output} already holds this run, complete: nothing to do"
        return (
            f"{self.rows:,} rows in {self.seconds:.1f} s ({self.rows_per_second:,.0f} rows/s), "
            f"model {self.model} on {self.backend}/{self.strategy or '-'} {self.device}, "
            f"{self.files} file(s) -> {self.output}"
            + (f" ({self.rows_skipped:,} rows resumed)" if self.rows_skipped else "")
            + (f"; rows per worker: {self._per_worker()}" if self.engine == "ray" else "")
        )

    def _per_worker(self) -> str:
        return ", ".join(f"{w} {n:,}" for w, n in sorted(self.workers.items())) or "-"


@dataclass
class Run:
    data: InputDataset
    model: CompiledModel
    scorer: Scorer
    committer: Committer
    columns: list[str]  # what to read from each file
    schema: pa.Schema  # what each output file holds
    todo: list[Fragment]
    done: dict[str, Entry]
    complete: bool
    started: float = field(default_factory=time.perf_counter)

    def cast(self, table: pa.Table) -> pa.Table:
        return table.cast(self.schema) if table.schema != self.schema else table


def model_ref(model: CompiledModel) -> str:
    origin = model.origin
    return f"{origin['name']}@{origin['version']}" if origin else model.forest.model_kind


def output_metadata(model: CompiledModel) -> dict[str, str]:
    origin = model.origin
    return {
        "scoring.version": __version__,
        "scoring.model": model_ref(model),
        "scoring.model.name": str(origin.get("name", "")),
        "scoring.model.version": str(origin.get("version", "")),
        "scoring.model.sha256": str(origin.get("sha256", "")),
        "scoring.model.kind": model.forest.model_kind,
        "scoring.backend": model.backend,
        "scoring.strategy": model.strategy or "",
        "scoring.device": str(model.device),
    }


def plan_run(
    input: str | InputDataset,
    output: str,
    model: CompiledModel,
    *,
    keep: Sequence[str] = (),
    outputs: str = "default",
    overwrite: bool = False,
    engine_files: tuple[str, ...] = (),
) -> Run:
    """Check everything that can be checked before writing; see the module docstring."""
    data = input if isinstance(input, InputDataset) else open_input(input)
    scorer = Scorer(model, keep=keep, outputs=outputs, ignore=data.partition_columns)
    scorer.check_schema(data.schema)
    columns = list(dict.fromkeys([*keep, *scorer.feature_columns(data.schema.names)]))
    trial = scorer.score(data.head(columns=columns, rows=TRIAL_ROWS))
    schema = trial.schema.with_metadata(output_metadata(model))
    job = {
        "model_sha256": model.origin.get("sha256") or model.forest.model_kind,
        "keep": list(keep),
        "outputs": outputs,
    }
    committer = Committer(output, job=job, overwrite=overwrite, engine_files=engine_files)
    complete = committer.check_target(data.fragments)
    done = {} if complete else committer.completed(data.fragments)
    todo = [] if complete else [f for f in data.fragments if f.relpath not in done]
    return Run(data, model, scorer, committer, columns, schema, todo, done, complete)


def report(run: Run, *, engine: str, timeline: list[tuple[float, int]]) -> ScoreReport:
    seconds = time.perf_counter() - run.started
    rows = sum(f.rows for f in run.todo)
    return ScoreReport(
        input=run.data.url,
        output=run.committer.url,
        engine=engine,
        rows=rows,
        rows_skipped=sum(e.rows for e in run.done.values()),
        files=len(run.data.fragments),
        seconds=seconds,
        rows_per_second=rows / seconds if seconds > 0 else 0.0,
        model=model_ref(run.model),
        sha256=str(run.model.origin.get("sha256", "")),
        backend=run.model.backend,
        strategy=run.model.strategy,
        device=str(run.model.device),
        already_complete=run.complete,
        timeline=timeline,
    )

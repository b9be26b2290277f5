"""``_scoring_report.json`` and ``_scoring_report.html`` beside a job's output.

The JSON holds what a run did from its start (plan, scoring and commit), against its
deadline: rows in and out, resumed rows, attempts, the model reference and sha256, the
plan against the actual run, per-file and per-worker rows, CPU, memory and GPU use, the
warnings raised, the job's checks with drift per column and score histograms against
the model's reference, and the job's history against its window.  The HTML page
(:mod:`scoring.jobs._report_html`) shows the same; a failed run's pair says what its
journal holds and what a rerun does.
"""

from __future__ import annotations

import json
import resource
from dataclasses import asdict
from datetime import datetime
from typing import Any

import fsspec

from .._engines import ScoreReport
from .._formats.iceberg_catalog import storage_url
from .._journal.manifest import MANIFEST, Manifest
from .._version import __version__
from ._checks import RunChecks
from ._planner import Plan
from ._report_html import render_failure_html, render_html
from ._spec import JobSpec

__all__ = [
    "DEADLINE_WARNING", "REPORT_HTML", "REPORT_JSON", "build_report", "cpu_seconds",
    "write_failure_report", "write_report",
]  # fmt: skip

REPORT_JSON = "_scoring_report.json"
REPORT_HTML = "_scoring_report.html"
#: How the runner's warning of a projected miss begins (resolved when the run is on time).
DEADLINE_WARNING = "job will miss its deadline"
#: A score column with fewer distinct deciles than this gets no histogram.
MIN_HISTOGRAM_EDGES = 4


def build_report(
    spec: JobSpec,
    plan: Plan,
    report: ScoreReport,
    *,
    gpu: dict[str, Any] | None,
    started: datetime,
    stages: dict[str, float],
    deadline: datetime | None,
    finished: datetime,
    attempts: int,
    input_bytes: int = 0,
    cpu_since: float = 0.0,
    files: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
    history: dict[str, Any] | None = None,
    checks: RunChecks | None = None,
) -> dict[str, Any]:
    """The report's facts as JSON-able data; times from ``started``, the job's start."""
    seconds = report.seconds or 1e-9
    wall = (finished - started).total_seconds()
    return {
        "job": spec.name, "scoring_version": __version__, "model_ref": spec.model_ref,
        "model_label": report.named_model,
        "model": report.model, "sha256": report.sha256, "engine": report.engine,
        "backend": report.backend, "strategy": report.strategy, "device": report.device,
        "verified": report.verified,
        "input": report.input,
        "input_bytes": input_bytes, "output": report.output, "output_columns": report.outputs,
        "rows": report.rows, "rows_resumed": report.rows_skipped, "changes": report.changes,
        # A filtered input writes the rows inside its filter: at most the input's.
        "rows_check": (report.rows + report.rows_skipped <= plan.rows if spec.filter
                       else report.rows + report.rows_skipped == plan.rows),
        "filter": spec.filter,
        "seconds": report.seconds, "wall_seconds": wall, "stages": stages,
        "rows_per_second": report.rows_per_second, "attempts": attempts,
        "started": _second(started), "finished": _second(finished),
        "deadline": _second(deadline) if deadline else None,
        "deadline_seconds": (deadline - started).total_seconds() if deadline else None,
        "deadline_margin_seconds": (deadline - finished).total_seconds() if deadline else None,
        "met_deadline": deadline is None or finished <= deadline,
        "plan": plan.to_dict(),
        "plan_vs_actual": wall / plan.estimated_seconds if plan.estimated_seconds else None,
        # The run's pace per worker against reading and writing its input alone.
        "vs_io_alone": pace_vs_io(plan, report),
        "workers": {
            w: {"rows": n, "rows_per_second": n / seconds} for w, n in report.workers.items()
        },
        "files": files or [], "gpu": gpu, "resources": _resources(cpu_since),
        **_warnings(warnings or [], met_deadline=deadline is None or finished <= deadline),
        "timeline": report.timeline, "history": history,
        "checks": _checks(spec, checks, report), "models": _models(report),
    }  # fmt: skip


def _second(at: datetime) -> str:
    """A report's time: to the second, as people read it."""
    return at.isoformat(timespec="seconds")


def _warnings(found: list[str], *, met_deadline: bool) -> dict[str, list[str]]:
    """The run's warnings, those that no longer held when it ended apart (``resolved``):
    a projected miss of the deadline, early in a run that then met it."""
    gone = [w for w in found if met_deadline and w.startswith(DEADLINE_WARNING)]
    return {"warnings": [w for w in found if w not in gone], "resolved_warnings": gone}


def _models(report: ScoreReport) -> list[dict[str, Any]]:
    """A set's models: each one's rows and scoring seconds (shared by the models one
    combined forest scores), beside the read time they all share."""
    rows = report.rows + report.rows_skipped
    return [{**m, "rows": rows, "read_seconds": report.stages.get("read")} for m in report.models]


def cpu_seconds() -> float:
    """CPU seconds this process has used so far (user and system, every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _resources(cpu_since: float) -> dict[str, float]:
    """This process's CPU seconds since ``cpu_since`` and its peak memory; a Ray or Spark
    job's workers are their own machines' to report."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"cpu_seconds": cpu_seconds() - cpu_since, "max_rss_mb": peak}


def write_report(spec: JobSpec, plan: Plan, report: ScoreReport, **facts: Any) -> list[str]:
    """Write both files into the output directory; returns their paths.  A rerun that
    found the job complete keeps the report of the run that did the work."""
    fs, root = fsspec.core.url_to_fs(storage_url(report.output))  # an Iceberg table's location
    root = root.rstrip("/")
    paths = [f"{root}/{REPORT_JSON}", f"{root}/{REPORT_HTML}"]
    if report.already_complete and all(fs.exists(p) for p in paths):
        return paths
    manifest = f"{root}/{MANIFEST}"
    read = Manifest.from_json(fs.cat_file(manifest)) if fs.exists(manifest) else None
    files = [asdict(f) for f in read.fragments] if read is not None else []
    data = build_report(spec, plan, report, files=_files(files), **facts)
    fs.pipe_file(paths[0], json.dumps(data, indent=1).encode())
    fs.pipe_file(paths[1], render_html(data).encode())
    return paths


def _files(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("relpath", "rows", "bytes", "output")
    return [{k: f.get(k) for k in keys} for f in fragments]


def write_failure_report(
    spec: JobSpec, *, error: BaseException, plan: Plan | None, started: datetime,
    attempts: int, permanent: bool, checks: RunChecks | None = None, refused: bool = False,
) -> list[str]:  # fmt: skip
    """The report of a failed run (``refused``: one its plan stopped before it scored),
    under the same names in the output folder (readers skip ``_`` files and nothing is
    published): the error, the files the run's journal holds and what a rerun does with
    them, and the checks when they stopped it.  A later successful run replaces it.  An
    output already published keeps its own run's report: nothing is written, ``[]``."""
    fs, root = fsspec.core.url_to_fs(storage_url(spec.output))
    root = root.rstrip("/")
    if fs.exists(f"{root}/_SUCCESS"):
        return []
    done = [json.loads(fs.cat_file(p)) for p in fs.glob(f"{root}/_temporary/_journal/*.json")]
    rows_done = sum(int(entry.get("rows", 0)) for entry in done)
    resume = f"skips the {len(done):,} file(s) ({rows_done:,} rows) already written"
    rerun = (
        f"fails the same way until the cause above is fixed; then it {resume}"
        if permanent
        else f"resumes: it {resume} and scores the rest"
    )
    if refused:
        rerun = ("is planned again: it runs once the plan fits the deadline (a later "
                 "deadline, more workers, or the model's compile cached by this run)")  # fmt: skip
    data = {
        "job": spec.name, "scoring_version": __version__,
        "status": "refused" if refused else "failed",
        "error": f"{type(error).__name__}: {' '.join(str(error).split())}",
        "started": _second(started), "failed": _second(datetime.now(started.tzinfo)),
        "attempts": attempts, "input": spec.input, "output": spec.output,
        "files_done": len(done), "rows_done": rows_done,
        "files_total": plan.files if plan else None, "rows_total": plan.rows if plan else None,
        "rerun": f"a rerun {rerun}", "plan": plan.to_dict() if plan else None,
        "checks": _checks(spec, checks, checks.seen) if checks and checks.seen else None,
    }  # fmt: skip
    paths = [f"{root}/{REPORT_JSON}", f"{root}/{REPORT_HTML}"]
    fs.makedirs(root, exist_ok=True)
    fs.pipe_file(paths[0], json.dumps(data, indent=1).encode())
    fs.pipe_file(paths[1], render_failure_html(data).encode())
    return paths


def _checks(spec: JobSpec, checks: RunChecks | None, report: ScoreReport) -> dict[str, Any] | None:
    if checks is None:
        return None
    return {
        "limits": spec.checks.model_dump(), "breaches": checks.breaches, "note": checks.note,
        "drift": [d.model_dump() for d in checks.drift],
        "histograms": _histograms(checks, report),
    }  # fmt: skip


def _histograms(checks: RunChecks, report: ScoreReport) -> list[dict[str, Any]]:
    """Each numeric score column's share of rows per reference bin, reference and run."""
    counts, reference = report.drift_counts, checks.reference
    if counts is None or reference is None:
        return []
    found = []
    for name, ref in reference.outputs.items():
        run = counts.get(f"output:{name}")
        if len(ref.edges) < MIN_HISTOGRAM_EDGES or run is None or len(run) != len(ref.counts):
            continue  # labels, or a column of a few values (a class label as a number)
        found.append({"column": name, "edges": ref.edges, "reference": _shares(ref.counts),
                      "run": _shares(run)})  # fmt: skip
    return found[:4]  # a multiclass model's first classes: the page stays readable


def _shares(counts: list[int]) -> list[float]:
    total = sum(counts) or 1
    return [c / total for c in counts]


def pace_vs_io(plan: Plan, report: ScoreReport) -> float | None:
    """The run's rows/s per worker over the plan's IO-alone rate (reading its input and
    writing its outputs, no scoring), where the plan measured one."""
    if not plan.io_rows_per_second or not report.rows or not report.seconds:
        return None
    per_worker = report.rows_per_second / max(plan.workers, 1)
    return per_worker / plan.io_rows_per_second

"""``_scoring_report.json`` and ``_scoring_report.html`` beside a job's output.

The JSON holds rows, seconds, rows/s, the plan against the actual run, per-worker rows
and rows/s, and GPU utilisation and memory when a GPU was present.  The HTML shows it
with two plots (matplotlib, inline SVG): cumulative rows over time against the deadline
and the plan, and throughput per worker.
"""

from __future__ import annotations

import html
import io
import json
from datetime import datetime
from typing import Any

import fsspec

from .._engines import ScoreReport
from .._version import __version__
from ._planner import Plan
from ._spec import JobSpec

__all__ = ["REPORT_HTML", "REPORT_JSON", "build_report", "write_failure_report", "write_report"]

REPORT_JSON = "_scoring_report.json"
REPORT_HTML = "_scoring_report.html"


def build_report(
    spec: JobSpec,
    plan: Plan,
    report: ScoreReport,
    *,
    gpu: dict[str, float] | None,
    deadline: datetime | None,
    finished: datetime,
    attempts: int,
) -> dict[str, Any]:
    seconds = report.seconds or 1e-9
    return {
        "job": spec.name,
        "scoring_version": __version__,
        "model": report.model,
        "sha256": report.sha256,
        "engine": report.engine,
        "backend": report.backend,
        "device": report.device,
        "input": report.input,
        "output": report.output,
        "output_columns": report.outputs,
        "rows": report.rows,
        "rows_resumed": report.rows_skipped,
        "seconds": report.seconds,
        "rows_per_second": report.rows_per_second,
        "attempts": attempts,
        "deadline": deadline.isoformat() if deadline else None,
        "finished": finished.isoformat(),
        "met_deadline": deadline is None or finished <= deadline,
        "plan": plan.to_dict(),
        "plan_vs_actual": report.seconds / plan.estimated_seconds
        if plan.estimated_seconds
        else None,
        "workers": {
            w: {"rows": n, "rows_per_second": n / seconds} for w, n in report.workers.items()
        },
        "gpu": gpu,
        "timeline": report.timeline,
    }


def write_report(spec: JobSpec, plan: Plan, report: ScoreReport, **facts: Any) -> list[str]:
    """Write both files into the output directory; returns their paths.  A rerun that
    found the job complete keeps the report of the run that did the work."""
    fs, root = fsspec.core.url_to_fs(report.output)
    root = root.rstrip("/")
    paths = [f"{root}/{REPORT_JSON}", f"{root}/{REPORT_HTML}"]
    if report.already_complete and all(fs.exists(p) for p in paths):
        return paths
    data = build_report(spec, plan, report, **facts)
    fs.pipe_file(paths[0], json.dumps(data, indent=1).encode())
    fs.pipe_file(paths[1], render_html(data).encode())
    return paths


def write_failure_report(
    spec: JobSpec, *, error: BaseException, plan: Plan | None, started: datetime,
    attempts: int, permanent: bool,
) -> list[str]:  # fmt: skip
    """The report of a failed run, under the same names in the output folder (readers
    skip ``_`` files and nothing is published): the error, the files the run's journal
    holds and what a rerun does with them.  A later successful run replaces it."""
    fs, root = fsspec.core.url_to_fs(spec.output)
    root = root.rstrip("/")
    done = [json.loads(fs.cat_file(p)) for p in fs.glob(f"{root}/_temporary/_journal/*.json")]
    rows_done = sum(int(entry.get("rows", 0)) for entry in done)
    resume = f"skips the {len(done):,} file(s) ({rows_done:,} rows) already written"
    rerun = (
        f"fails the same way until the cause above is fixed; then it {resume}"
        if permanent
        else f"resumes: it {resume} and scores the rest"
    )
    data = {
        "job": spec.name, "scoring_version": __version__, "status": "failed",
        "error": f"{type(error).__name__}: {' '.join(str(error).split())}",
        "started": started.isoformat(), "failed": datetime.now(started.tzinfo).isoformat(),
        "attempts": attempts, "input": spec.input, "output": spec.output,
        "files_done": len(done), "rows_done": rows_done,
        "files_total": plan.files if plan else None, "rows_total": plan.rows if plan else None,
        "rerun": f"a rerun {rerun}", "plan": plan.to_dict() if plan else None,
    }  # fmt: skip
    paths = [f"{root}/{REPORT_JSON}", f"{root}/{REPORT_HTML}"]
    fs.makedirs(root, exist_ok=True)
    fs.pipe_file(paths[0], json.dumps(data, indent=1).encode())
    rows = [(k, str(data[k])) for k in ("status", "error", "started", "failed", "attempts",
                                        "files_done", "rows_done", "rerun")]  # fmt: skip
    fs.pipe_file(paths[1], _page(f"scoring job {spec.name}: FAILED", rows, "").encode())
    return paths


def render_html(data: dict[str, Any]) -> str:
    rows = [
        ("rows", f"{data['rows']:,}"),
        ("seconds", f"{data['seconds']:,.1f} (plan: {data['plan']['estimated_seconds']:,.1f})"),
        ("rows/s", f"{data['rows_per_second']:,.0f}"),
        ("model", f"{data['model']} on {data['backend']} / {data['device']}"),
        ("deadline", f"{data['deadline'] or 'none'}; finished {data['finished']}"),
        ("met deadline", "yes" if data["met_deadline"] else "NO"),
        ("GPU", json.dumps(data["gpu"]) if data["gpu"] else "none"),
    ]
    return _page(f"scoring job {data['job']}", rows, _plots(data))


def _page(title: str, rows: list[tuple[str, str]], extra: str) -> str:
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    title = html.escape(title)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><h1>{title}</h1><table>{table}</table>{extra}</body></html>\n"
    )


def _plots(data: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display on a scheduler host
    import matplotlib.pyplot as plt

    fig, (progress, workers) = plt.subplots(1, 2, figsize=(11, 4))
    seconds = [t for t, _ in data["timeline"]] or [0.0]
    done = [r for _, r in data["timeline"]] or [0]
    progress.plot(seconds, done, label="rows written")
    progress.plot([0, data["plan"]["estimated_seconds"]], [0, data["rows"]], "--", label="plan")
    if data["plan"]["available_seconds"] is not None:
        progress.axvline(data["plan"]["available_seconds"], color="red", label="deadline")
    progress.set(xlabel="seconds", ylabel="rows", title="Cumulative rows")
    progress.legend()
    names = list(data["workers"]) or ["-"]
    rates = [data["workers"][w]["rows_per_second"] for w in data["workers"]] or [0.0]
    workers.barh(names, rates)
    workers.set(xlabel="rows/s", title="Throughput per worker")
    fig.tight_layout()
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    plt.close(fig)
    return svg.getvalue()

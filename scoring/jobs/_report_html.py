"""The job report as one self-contained HTML page: styled, no network, plots inline SVG.

Sections, in the order an operator asks: did it finish in time (the status and the
timeline from start against the deadline), are the scores plausible (checks, drift per
column, score histograms against the reference), is it trending toward the window
(history), then the details: facts, files, workers (only when there were several),
resources and the warnings raised.  A failed run's page says what a rerun will do.
"""

from __future__ import annotations

import html
import io
from typing import Any

__all__ = ["render_failure_html", "render_html"]

#: Drift rows shown before the rest are folded away.
DRIFT_ROWS = 12

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2733;
 background:#f4f6f9;margin:0}
main{max-width:1120px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#5b6776;margin-bottom:16px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;
 font-size:13px;vertical-align:middle;margin-left:8px}
.ok{background:#2e7d32}.late{background:#ef6c00}.failed{background:#c62828}
.refused{background:#607d8b}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px}
.card{background:#fff;border-radius:8px;padding:12px 14px;box-shadow:0 1px 2px #0002}
.card b{display:block;font-size:20px}.card span{color:#5b6776;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #e4e8ee;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fdecea}
.plot{background:#fff;border-radius:8px;padding:8px;box-shadow:0 1px 2px #0002}
.plot svg{width:100%;height:auto}
.note{background:#fff8e1;border-left:4px solid #f9a825;padding:8px 12px 8px 28px}
.pass{background:#e8f5e9;border-left:4px solid #2e7d32;padding:8px 12px 8px 28px}
li.resolved code{text-decoration:line-through;color:#5b6776}
p.note{padding-left:12px}
code{font-size:12px;word-break:break-all}
"""


def render_html(data: dict[str, Any]) -> str:
    """The page of a run that published its output (on time or late)."""
    status = "ok" if data["met_deadline"] else "late"
    label = "finished in time" if status == "ok" else "finished after the deadline"
    parts = [
        _cards(data),
        _section("Timeline from start", _svg(_timeline_plot, data)),
        _checks(data),
        _history(data),
        _section("Run", _facts(data)),
        _models(data.get("models") or []),
        _section(f"Files ({len(data['files'])})", _files(data["files"])),
        _workers(data),
        _scaling(data["plan"].get("scaling")),
        _section("Resources", _resources(data)),
        _section("Warnings", _warnings(data["warnings"], data.get("resolved_warnings", []))),
    ]
    return _page(data["job"], status, label, data, "".join(parts))


def render_failure_html(data: dict[str, Any]) -> str:
    """The page of a failed run: the error, what its journal holds, what a rerun does."""
    rows = [("error", data["error"]), ("started", data["started"]), ("failed", data["failed"]),
            ("attempts", str(data["attempts"])),
            ("files written", _of(data["files_done"], data["files_total"])),
            ("rows written", _of(data["rows_done"], data["rows_total"])),
            ("input", data["input"]), ("output", data["output"])]  # fmt: skip
    body = f"<p class='note'>{html.escape(data['rerun'])}</p>" + _section("Run", _table(rows))
    body += _checks(data)  # a run its checks stopped: what drifted
    body += _scaling((data.get("plan") or {}).get("scaling"))  # what joined, if it was asked
    if data.get("status") == "refused":
        return _page(data["job"], "refused", "REFUSED: the plan misses the deadline; nothing "
                     "was scored", data, body)  # fmt: skip
    return _page(data["job"], "failed", "FAILED: nothing was published", data, body)


def _page(job: str, status: str, label: str, data: dict[str, Any], body: str) -> str:
    title = html.escape(f"scoring job {job}")
    model = data.get("model_label") or data.get("model_ref") or ""
    ran = f", {data['backend']}/{data.get('strategy') or '-'} on {data['device']}" if (
        "backend" in data) else ""  # fmt: skip
    sub = html.escape(f"model {model}{ran}; output {data['output']}; "
                      f"scoring {data['scoring_version']}")  # fmt: skip
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{_CSS}</style></head><body><main><h1>{title}<span class='badge {status}'>"
        f"{html.escape(label)}</span></h1><div class='sub'>{sub}</div>{body}</main></body>"
        "</html>\n"
    )


def _section(title: str, content: str) -> str:
    return f"<h2>{html.escape(title)}</h2>{content}" if content else ""


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _grid(head: list[str], rows: list[list[str]], *, bad: list[bool] | None = None) -> str:
    """A table with a header row; numbers (cells starting with a digit) right-aligned."""
    top = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    lines = []
    for i, row in enumerate(rows):
        flag = " class='bad'" if bad and bad[i] else ""
        cells = "".join(
            f"<td class='n'>{html.escape(c)}</td>"
            if c[:1].isdigit()
            else f"<td>{html.escape(c)}</td>"
            for c in row
        )
        lines.append(f"<tr{flag}>{cells}</tr>")
    return f"<table><tr>{top}</tr>{''.join(lines)}</table>"


def _of(done: int, total: int | None) -> str:
    return f"{done:,}" + (f" of {total:,}" if total is not None else "")


def _cards(data: dict[str, Any]) -> str:
    margin = data["deadline_margin_seconds"]
    cards = [
        (f"{data['rows']:,}", "rows scored" + (f" (+{data['rows_resumed']:,} resumed)"
                                               if data["rows_resumed"] else "")),
        (f"{data['wall_seconds']:,.1f} s", "from start to finish"),
        (f"{data['rows_per_second']:,.0f}", "rows/s while scoring"),
        ("none" if margin is None else f"{margin:+,.0f} s", "deadline margin"),
        ("yes" if data["rows_check"] else "NO",
         "rows out <= rows in (filtered)" if data.get("filter") else "rows out = rows in"),
    ]  # fmt: skip
    changes = data.get("changes")
    if changes is not None:  # an incremental job: what it covered and what it saved
        cards.insert(1, (changes["kind"], changes["said"] + (
            f"; {changes['saved_seconds']:,.0f} s saved against a full run"
            if changes.get("saved_seconds") else "")))  # fmt: skip
    items = "".join(f"<div class='card'><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>"
                    for v, k in cards)  # fmt: skip
    return f"<div class='cards'>{items}</div>"


def _stages(stages: dict[str, float]) -> str:
    """Plan, scoring and commit in order: the run's wall time."""
    return ", ".join(f"{k} {stages[k]:,.1f} s" for k in ("plan", "run", "commit") if k in stages)


def _thread_time(stages: dict[str, float]) -> str:
    """The pipelined stages' thread seconds: several threads read, score and write side
    by side, so these may add up to more than the run took."""
    steps = [f"{k} {stages[k]:,.1f} s" for k in ("prepare", "kernel", "outputs") if k in stages]
    busy = [f"{k} {stages[k]:,.1f} s" for k in ("read", "score", "write") if k in stages]
    if steps and "score" in stages:  # scoring's own steps, inside its busy seconds
        busy[busy.index(f"score {stages['score']:,.1f} s")] += f" ({', '.join(steps)})"
    if not busy:
        return "-"
    return ", ".join(busy) + "; summed over threads working side by side, so more than the run"


def _facts(data: dict[str, Any]) -> str:
    stages = _stages(data["stages"])
    return _table([
        ("started", data["started"]), ("finished", data["finished"]),
        ("deadline", data["deadline"] or "none"), ("wall time", stages),
        ("thread time", _thread_time(data["stages"])),
        ("model", data.get("model_label") or f"{data['model_ref']} = {data['model']}"),
        ("sha256", data["sha256"]),
        ("engine", f"{data['engine']}: {data['backend']} on {data['device']}"),
        ("parity", data.get("verified") or "not held to a registry record"),
        ("input", f"{data['input']} ({data['plan']['files']:,} files, "
                  f"{data['plan']['rows']:,} rows, {data['input_bytes']:,} bytes)"),
        ("output", f"{data['output']} ({', '.join(data['output_columns'])})"),
        ("attempts", str(data["attempts"])),
        ("plan", _planned(data)),
    ])  # fmt: skip


def _planned(data: dict[str, Any]) -> str:
    text = f"estimated {data['plan']['estimated_seconds']:,.1f} s"
    ratio = data["plan_vs_actual"]
    text += f"; the run took {ratio:.2f}x that" if ratio else ""
    pace = data.get("vs_io_alone")
    io_alone = data["plan"].get("io_rows_per_second")
    if pace and io_alone:  # what reading and writing the input alone would take
        text += (f"; scored at {pace:.0%} of the rate of reading and writing the same "
                 f"files without scoring ({io_alone:,.0f} rows/s per worker)")  # fmt: skip
    return text


def _files(files: list[dict[str, Any]]) -> str:
    """One row per input file; an engine's own committer (Spark's) writes part files of
    its own, so such a file has no output file or bytes of its own."""
    rows = [[f["relpath"], f"{f['rows']:,}", _count(f["bytes"]), f["output"] or "-"]
            for f in files]  # fmt: skip
    return _grid(["input file", "rows", "output bytes", "output file"], rows) if rows else ""


def _models(models: list[dict[str, Any]]) -> str:
    """A set's models (none for one model: the cards say it all)."""
    if not models:
        return ""
    rows = [
        [m["prefix"], m["ref"], m["backend"] + (f"/{m['strategy']}" if m["strategy"] else ""),
         f"{m['combined_with']}", f"{m['rows']:,}",
         "-" if m["seconds"] is None else f"{m['seconds']:,.1f}"]
        for m in models
    ]  # fmt: skip
    read = models[0]["read_seconds"]
    note = f'<p class="note">read once for all: {read:,.1f} s busy</p>' if read else ""
    head = ["prefix", "model", "backend", "scored with (models)", "rows", "score s"]
    return _section(f"Models ({len(models)}, one pass)", _grid(head, rows) + note)


def _workers(data: dict[str, Any]) -> str:
    workers = data["workers"]
    if len(workers) < 2:  # one worker: the cards say it all
        return ""
    rows = [[w, f"{v['rows']:,}", f"{v['rows_per_second']:,.0f}"] for w, v in workers.items()]
    table = _grid(["worker", "rows", "rows/s"], rows)
    return _section(f"Workers ({len(workers)})", table + _svg(_workers_plot, data))


def _scaling(scaling: dict[str, Any] | None) -> str:
    """``[autoscale]``: the workers needed, requested and granted over time."""
    if not scaling:
        return ""
    rows = [[f"{p['seconds']:,.1f}", "-" if p["needed"] is None else str(p["needed"]),
             str(p["requested"]), str(p["granted"])] for p in scaling["timeline"]]  # fmt: skip
    note = (
        f'<p class="note">bounds {scaling["min_workers"]} to {scaling["max_workers"]} '
        f"workers of {html.escape(str(scaling['shape']))}; "
        f"{scaling['worker_seconds']:,.0f} worker-seconds held</p>"
    )
    table = _grid(["seconds from the request", "needed", "requested", "granted"], rows)
    return _section("Autoscaling", table + note)


def _resources(data: dict[str, Any]) -> str:
    r, gpu = data["resources"], data["gpu"]
    cores = r["cpu_seconds"] / max(data["wall_seconds"], 1e-9)
    rows = [("CPU time", f"{r['cpu_seconds']:,.1f} s ({cores:.1f} cores on average)"),
            ("peak memory", f"{r['max_rss_mb']:,.0f} MiB (this process)")]  # fmt: skip
    if not gpu or "absent" in gpu:  # the sampler's one line, or a report of an older run
        rows.append(("GPU", gpu["absent"] if gpu else "none"))
        return _table(rows)
    for d in gpu["devices"]:
        power = (f", power {d['power_mean_w']:,.0f} W mean, {d['power_max_w']:,.0f} W max"
                 if d.get("power_mean_w") is not None else "")  # fmt: skip
        rows.append((
            f"GPU {d['device']} ({d['name']})",
            f"utilisation {d['utilisation_mean_pct']:,.0f}% mean, "
            f"{d['utilisation_max_pct']:,.0f}% max; memory {d['memory_max_mib']:,.0f} MiB "
            f"max, this process {d['process_memory_max_mib']:,.0f} MiB{power}",
        ))  # fmt: skip
    plot = _svg(_gpu_plot, gpu) if gpu.get("series") else ""
    return _table(rows) + plot


def _warnings(found: list[str], resolved: list[str]) -> str:
    """The warnings that held at the end; those that did not, struck through as resolved."""
    if not found and not resolved:
        return "<p>none</p>"
    items = [f"<li><code>{html.escape(w)}</code></li>" for w in found]
    items += [f"<li class='resolved'><code>{html.escape(w)}</code> resolved: the run met its "
              "deadline</li>" for w in resolved]  # fmt: skip
    return "<ul>" + "".join(items) + "</ul>"


def _checks(data: dict[str, Any]) -> str:
    checks = data.get("checks")
    if not checks:
        return ""
    found = checks["breaches"] or ["every check passed"]
    style = "note" if checks["breaches"] else "pass"  # a warning's amber only for a breach
    items = "".join(f"<li>{html.escape(b)}</li>" for b in found)
    parts = [f"<ul class='{style}'>{items}</ul>"]
    if checks["note"]:
        parts.append(f"<p>drift not measured: {html.escape(checks['note'])}</p>")
    if checks["histograms"]:
        parts.append(_svg(_histogram_plot, checks["histograms"]))
    if checks["drift"]:
        parts.append(_drift_table(checks["drift"], limit=checks["limits"]["max_psi"]))
    return _section("Checks: drift against the reference", "".join(parts))


def _drift_table(drift: list[dict[str, Any]], *, limit: float | None) -> str:
    """Every column, most drifted first; past the first :data:`DRIFT_ROWS`, folded."""
    ordered = sorted(drift, key=lambda d: -d["psi"])
    rows = [[d["column"], d["role"], f"{d['psi']:.3f}", f"{d['null_rate']:.1%}",
             f"{d['reference_null_rate']:.1%}",
             "-" if d["unseen_rate"] is None else f"{d['unseen_rate']:.1%}"]
            for d in ordered]  # fmt: skip
    bad = [limit is not None and d["psi"] > limit for d in ordered]
    head = ["column", "role", "PSI", "null", "reference null", "unseen"]
    table = _grid(head, rows[:DRIFT_ROWS], bad=bad[:DRIFT_ROWS])
    if len(rows) <= DRIFT_ROWS:
        return table
    rest = _grid(head, rows[DRIFT_ROWS:], bad=bad[DRIFT_ROWS:])
    return (
        f"{table}<details><summary>{len(rows) - DRIFT_ROWS} more columns</summary>{rest}</details>"
    )


def _history(data: dict[str, Any]) -> str:
    history = data.get("history")
    if not history:
        return ""
    text = f"<p>{len(history['runs'])} run(s) recorded; {html.escape(history['trend'])}</p>"
    plot = _svg(_history_plot, history) if len(history["runs"]) > 1 else ""
    return _section("History against the window", text + plot)


# -- plots (matplotlib, rendered to inline SVG) -------------------------------------


def _svg(draw: Any, data: Any) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display on a scheduler host
    import matplotlib.pyplot as plt

    # Text kept as text: a reader can select and search it, and it weighs less.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig = draw(plt, data)
        svg = io.StringIO()
        fig.tight_layout()
        fig.savefig(svg, format="svg", metadata={"Date": None})  # no stamp to the microsecond
        plt.close(fig)
    return f"<div class='plot'>{svg.getvalue()}</div>"


def _timeline_plot(plt: Any, data: dict[str, Any]) -> Any:
    """Rows written over seconds since the job started: the plan and commit stages
    shaded, the planned line, and the deadline."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    planned = data["stages"].get("plan", 0.0)
    seconds = [planned + t for t, _ in data["timeline"]] or [planned]
    done = [r for _, r in data["timeline"]] or [0]
    ax.axvspan(0, planned, color="#cfd8dc", label="plan: list, load, time the model")
    if "commit" in data["stages"]:
        end = planned + data["stages"].get("run", data["seconds"])
        ax.axvspan(end - data["stages"]["commit"], end, color="#b2dfdb", label="commit")
    ax.plot(seconds, done, color="#1565c0", label="rows written")
    ax.plot([planned, planned + data["plan"]["estimated_seconds"]], [0, data["rows"]], "--",
            color="#78909c", label="plan")  # fmt: skip
    if data["deadline_seconds"] is not None:
        ax.axvline(data["deadline_seconds"], color="#c62828", label="deadline")
    ax.set(xlabel="seconds since start", ylabel="rows")
    ax.legend(loc="lower right")
    return fig


def _gpu_plot(plt: Any, gpu: dict[str, Any]) -> Any:
    """Each GPU's utilisation and this process's memory on it over the run."""
    fig, (util, memory) = plt.subplots(1, 2, figsize=(11, 2.6))
    for d in gpu["devices"]:
        mine = [s for s in gpu["series"] if s[1] == d["device"]]
        util.plot([s[0] for s in mine], [s[2] for s in mine], label=f"GPU {d['device']}")
        memory.plot([s[0] for s in mine], [s[5] for s in mine], label=f"GPU {d['device']}")
    util.set(xlabel="seconds since scoring began", ylabel="utilisation %", ylim=(0, 100))
    memory.set(xlabel="seconds since scoring began", ylabel="this process, MiB")
    util.legend(loc="lower right")
    return fig


def _workers_plot(plt: Any, data: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(11, 0.5 + 0.35 * len(data["workers"])))
    ax.barh(list(data["workers"]), [w["rows_per_second"] for w in data["workers"].values()])
    ax.set(xlabel="rows/s")
    return fig


def _histogram_plot(plt: Any, histograms: list[dict[str, Any]]) -> Any:
    """Each score column's share of rows per reference bin: the reference and this run."""
    fig, axes = plt.subplots(1, len(histograms), figsize=(11, 3.2), squeeze=False)
    for ax, h in zip(axes[0], histograms, strict=True):
        bins = range(len(h["reference"]))
        ax.bar([b - 0.2 for b in bins], h["reference"], width=0.4, label="reference")
        ax.bar([b + 0.2 for b in bins], h["run"], width=0.4, label="this run")
        # The value axis: each tick a reference decile's edge, between the bins it parts,
        # and the last bar the nulls.
        edges = h.get("edges") or []
        ticks = [i + 0.5 for i in range(len(edges))] + [len(h["reference"]) - 1]
        ax.set_xticks(ticks, [f"{e:.3g}" for e in edges] + ["null"], rotation=60, fontsize=7)
        ax.set(title=h["column"], xlabel=f"{h['column']} (reference decile edges)",
               ylabel="share")  # fmt: skip
    axes[0][0].legend()
    return fig


def _history_plot(plt: Any, history: dict[str, Any]) -> Any:
    """The recorded runs' durations against the window."""
    runs = history["runs"]
    colours = {"ok": "#2e7d32", "late": "#ef6c00", "failed": "#c62828", "refused": "#90a4ae"}
    fig, ax = plt.subplots(figsize=(11, 3.2))
    ax.bar(range(len(runs)), [r["seconds"] for r in runs],
           color=[colours.get(r["outcome"], "#90a4ae") for r in runs])  # fmt: skip
    from matplotlib.patches import Patch

    # One legend entry per outcome shown (a refused run's grey bar included).
    handles: list[Any] = [Patch(color=colours.get(o, "#90a4ae"), label=f"run {o}")
                          for o in dict.fromkeys(r["outcome"] for r in runs)]  # fmt: skip
    if history["window_seconds"]:
        handles.append(ax.axhline(history["window_seconds"], color="#c62828", linestyle="--",
                                  label="window"))  # fmt: skip
    ax.legend(handles=handles, fontsize=8)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([r["started"][5:16].replace("T", " ") for r in runs], rotation=60,
                       fontsize=7)  # fmt: skip
    ax.set(xlabel=f"last {len(runs)} runs, by start (UTC)",
           ylabel="seconds")  # fmt: skip
    return fig

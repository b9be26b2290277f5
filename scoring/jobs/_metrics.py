"""A run's numbers for Prometheus: the job file's ``[metrics]`` (see :class:`Metrics`).

One gauge per fact, labelled with the job: rows, seconds from start to finish, the
deadline margin (negative when late), the exit code, whether it succeeded, the outcome
(one series per outcome, 1 for this run's), and when it finished, which alerting rules
compare with ``time()`` to notice a run that never happened.  Written for every outcome;
a failure to write is a warning, never the run's failure.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .._registry import OUTCOMES, RunRecord
from ..errors import DependencyError
from ._spec import Metrics

__all__ = ["publish_metrics"]

log = logging.getLogger("scoring.jobs")


def publish_metrics(metrics: Metrics, record: RunRecord) -> None:
    """Write ``record`` where ``metrics`` says, if anywhere."""
    if metrics.textfile is None and metrics.pushgateway is None:
        return
    target = "the metrics"
    try:
        registry = _gauges(record)
        import prometheus_client as prom

        if metrics.textfile is not None:
            target = f"the textfile {metrics.textfile}"
            os.makedirs(os.path.dirname(os.path.abspath(metrics.textfile)), exist_ok=True)
            prom.write_to_textfile(metrics.textfile, registry)  # a temporary, then renamed
        if metrics.pushgateway is not None:
            target = f"the Pushgateway {metrics.pushgateway}"
            prom.push_to_gateway(metrics.pushgateway, job=f"scoring_{record.job}",
                                 registry=registry)  # fmt: skip
    except Exception as exc:  # the run's outcome stands
        reason = " ".join(str(exc).split())
        log.warning("could not publish the run's metrics to %s: %s", target, reason)


def _gauges(record: RunRecord) -> Any:
    try:
        import prometheus_client as prom
    except ImportError as exc:
        raise DependencyError(
            "[metrics] needs prometheus-client: pip install 'scoring[metrics]'"
        ) from exc
    registry = prom.CollectorRegistry()

    def gauge(name: str, text: str, value: float, **labels: str) -> None:
        g = prom.Gauge(f"scoring_job_{name}", text, ["job", *labels], registry=registry)
        g.labels(job=record.job, **labels).set(value)

    gauge("rows", "Rows in the output (scored and resumed).", record.rows + record.rows_resumed)
    gauge("seconds", "Seconds from the run's start to its end.", record.seconds)
    gauge("exit_code", "The run's exit code (docs/reference/errors.md).", record.exit_code)
    gauge("success", "1 if the run published its output, else 0.",
          float(record.outcome in ("ok", "late")))  # fmt: skip
    gauge("last_run_timestamp_seconds", "When the run ended (Unix time).",
          record.finished_at.timestamp())  # fmt: skip
    if record.deadline is not None:
        margin = (record.deadline - record.finished_at).total_seconds()
        gauge("deadline_margin_seconds", "Seconds to spare at the end (< 0: late).", margin)
    _gpu_gauges(prom, registry, record)
    outcome = prom.Gauge("scoring_job_outcome", "1 for the run's outcome.", ["job", "outcome"],
                         registry=registry)  # fmt: skip
    for name in OUTCOMES:
        outcome.labels(job=record.job, outcome=name).set(float(record.outcome == name))
    return registry


#: Each device's summary in the metrics: (key in the sampler's summary, name, help).
_GPU = [
    ("utilisation_mean_pct", "utilisation_mean_percent", "The GPU's mean utilisation."),
    ("utilisation_max_pct", "utilisation_max_percent", "The GPU's highest utilisation sampled."),
    ("memory_max_mib", "memory_max_mebibytes", "The most memory used on the GPU, all processes."),
    ("process_memory_max_mib", "process_memory_max_mebibytes",
     "The most memory the run's own process held on the GPU."),
    ("power_mean_w", "power_mean_watts", "The GPU's mean power draw over the run."),
]  # fmt: skip


def _gpu_gauges(prom: Any, registry: Any, record: RunRecord) -> None:
    """``scoring_job_gpu_*{job, run, device}`` for each GPU the run sampled (``run``:
    its start time, which names it in the history and the report)."""
    devices = (record.gpu or {}).get("devices") or []
    run = record.started_at.isoformat()
    for key, name, text in _GPU:
        gauge = prom.Gauge(f"scoring_job_gpu_{name}", text, ["job", "run", "device"],
                           registry=registry)  # fmt: skip
        for d in devices:
            if d.get(key) is not None:
                gauge.labels(job=record.job, run=run, device=str(d["device"])).set(d[key])

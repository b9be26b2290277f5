"""Scheduled jobs with a deadline: job files, the planner, the runner and its reports.

``load_job`` reads and validates a TOML job file (:mod:`scoring.jobs._spec`),
``make_plan`` says whether and with how many workers it meets its deadline
(:mod:`scoring.jobs._planner`), ``run_job`` plans, runs, watches the projected finish and
writes ``_scoring_report.json`` / ``.html`` beside the output (:mod:`scoring.jobs._runner`),
and records every run in the registry's history, whose trend against the window
``trend`` fits (:mod:`scoring._registry.runs`).
"""

from __future__ import annotations

from .._registry import describe_trend, trend
from ._planner import Plan, make_plan
from ._report import REPORT_HTML, REPORT_JSON
from ._runner import (
    EXIT_CHECKS,
    EXIT_FAILED,
    EXIT_INFEASIBLE,
    EXIT_INPUT,
    EXIT_LATE,
    EXIT_OK,
    EXIT_USAGE,
    JobOutcome,
    run_job,
)
from ._spec import JobSpec, load_job

__all__ = [
    "EXIT_CHECKS", "EXIT_FAILED", "EXIT_INFEASIBLE", "EXIT_INPUT", "EXIT_LATE", "EXIT_OK",
    "EXIT_USAGE", "REPORT_HTML", "REPORT_JSON", "JobOutcome", "JobSpec", "Plan",
    "describe_trend", "load_job", "make_plan", "run_job", "trend",
]  # fmt: skip

"""Kubernetes manifests for one job file: a kustomize overlay over the repository's
``deploy/kubernetes/`` (``scoring deploy render``).

The overlay names every resource after the job (``nameSuffix``), replaces the example
job file in the ConfigMap with this one, and sets the CronJob's schedule, time zone and
``activeDeadlineSeconds``.  The last comes from the job's window: a duration deadline
(``45m``) is the window; a clock deadline (``01:45``) is the time from the schedule's
start to it (a schedule of the form ``M H * * *``), and a deadline dated from the run's
date (``${RUN_DATE}+1d 01:45``) the time from the start on that date, as the pod sets
``RUN_DATE`` to the day it starts in the job's time zone (``scoring run --run-date
today``), the zone of the schedule too; a night that changes the clocks counts, the
window being the longest of the year (:mod:`scoring._when`).  The pod gets the window plus a
quarter (at least ten minutes) so that a late run finishes and exits 4 (finished late,
output complete) rather than being killed mid-publication.  A GPU job adds the ``gpu``
component (``nvidia.com/gpu``, the pool's toleration and label), a Ray job the ``ray``
one (a KubeRay RayJob).  A Ray job's ``[autoscale]`` bounds its workers group
(``minReplicas`` and ``replicas``: ``min_workers``; ``maxReplicas``: ``max_workers``, one
worker per GPU pod): KubeRay's autoscaler, enabled in the component, adds the pods the job
asks for when it starts.  ``kubectl kustomize DIR`` renders it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._autoscale import Autoscale
from ._when import check_schedule, daily_start, parse_deadline, zone
from ._when import window_seconds as window_of
from .errors import ConfigError, JobFileError, file_key_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Rendered", "active_deadline", "render", "window_seconds"]


@dataclass(frozen=True)
class Rendered:
    folder: Path
    name: str  # the resources' names: scoring-<job>
    active_deadline_seconds: int | None


def window_seconds(deadline: str, *, schedule: str | None, timezone: str = "UTC") -> int:
    """Seconds from the job's start to its deadline (:mod:`scoring._when`): a duration as
    given; a time of day after the start of a daily schedule (``M H * * *``, in the job's
    time zone, where ``RUN_DATE`` is the start's date), the longest night of the year."""
    try:
        parsed = parse_deadline(deadline)
    except ValueError as exc:
        raise ConfigError(f"job file key 'deadline': {exc}") from None
    if parsed.duration is not None:
        return int(parsed.duration.total_seconds())
    if parsed.day is not None:
        raise ConfigError(
            f"deadline {deadline!r} is one day's: a CronJob runs every day, so give a duration "
            "(75m), a time of day (01:45) or one dated from the run's date (${RUN_DATE}+1d 01:45)"
        )
    start = daily_start(schedule or "")
    if start is None:
        raise ConfigError(
            f"deadline {deadline!r} is a time of day: its window needs a daily schedule "
            "('M H * * *'), or give the job a duration deadline (e.g. \"75m\")"
        )
    try:
        return window_of(parsed, start=start, zone_name=timezone)
    except ValueError as exc:
        raise ConfigError(f"deadline {deadline!r} {exc}") from None


def active_deadline(window: int) -> int:
    """The pod's ``activeDeadlineSeconds`` for a job window of ``window`` seconds."""
    return window + max(600, window // 4)


def render(
    job_file: Path, *, out: Path, base: Path, schedule: str | None = None,
    timezone: str | None = None, gpu: bool = False,
) -> Rendered:  # fmt: skip
    """Write ``out``: a kustomization over ``base`` (the repository's
    ``deploy/kubernetes``) for ``job_file``, and a copy of the job file."""
    job = _job(job_file)
    engine = str(job.get("engine", "local"))
    components = (["ray"] if engine == "ray" else []) + (["gpu"] if gpu and engine != "ray" else [])
    for part in ["base", *(f"components/{c}" for c in components)]:
        if not (base / part / "kustomization.yaml").is_file():
            raise ConfigError(
                f"{base / part} holds no kustomization.yaml: point --base at the "
                "repository's deploy/kubernetes"
            )
    name = _dns_name(str(job["name"]))
    deadline = job.get("deadline")
    if engine != "ray" and schedule is None:
        raise ConfigError("a CronJob needs a schedule: --schedule '30 0 * * *'")
    zone_name = _one_zone(str(job.get("timezone") or "UTC"), timezone)
    try:
        if schedule is not None:
            check_schedule(schedule)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    window = None if deadline is None else window_seconds(
        str(deadline), schedule=schedule, timezone=zone_name)  # fmt: skip
    seconds = None if window is None else active_deadline(window)
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.toml").write_text(job_file.read_text())
    kustomization = _kustomization(
        name=name, base=os.path.relpath(base, out), components=components,
        engine=engine, schedule=schedule, timezone=zone_name, seconds=seconds,
        autoscale=_autoscale(job, job_file),
    )  # fmt: skip
    (out / "kustomization.yaml").write_text(_yaml(kustomization))
    return Rendered(out, f"scoring-{name}", seconds)


def _one_zone(job_zone: str, given: str | None) -> str:
    """The one time zone of the schedule, the deadline and ``RUN_DATE`` (the pod's
    ``scoring run --run-date today`` dates the run in the job's zone)."""
    for name in {job_zone, given or job_zone}:
        try:
            zone(name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if given is not None and given != job_zone:
        raise ConfigError(
            f"--timezone {given!r} is not the job's timezone {job_zone!r}: the schedule, the "
            "deadline and RUN_DATE are read in one zone; set timezone in the job file"
        )
    return job_zone


def _job(path: Path) -> dict[str, Any]:
    """The job file's keys this needs (its name, engine, deadline, time zone); the rest
    is the job's to check when it runs (its ``${VAR}`` are set only in the pod)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise JobFileError(f"job file {str(path)!r} cannot be read: {exc}") from None
    if not isinstance(data.get("name"), str):
        raise JobFileError(f"job file {str(path)!r}, key 'name': required")
    return data


def _autoscale(job: dict[str, Any], path: Path) -> Autoscale | None:
    """The job's ``[autoscale]`` bounds, checked as the job checks them."""
    if "autoscale" not in job:
        return None
    try:
        return Autoscale.model_validate(job["autoscale"])
    except ValidationError as exc:  # worded as the job's own check words it
        key, reason = file_key_problem(exc, loc=["autoscale", *exc.errors()[0]["loc"]])
        raise JobFileError(f"job file {str(path)!r}, key {key!r}: {reason}") from None


def _worker_bounds(autoscale: Autoscale) -> list[dict[str, Any]]:
    """JSON patch operations bounding a RayJob's workers group by ``[autoscale]``."""
    group = "/spec/rayClusterSpec/workerGroupSpecs/0"
    values = {"replicas": autoscale.min_workers, "minReplicas": autoscale.min_workers,
              "maxReplicas": autoscale.max_workers}  # fmt: skip
    return [{"op": "replace", "path": f"{group}/{k}", "value": v} for k, v in values.items()]


def _dns_name(name: str) -> str:
    """The job's name as a Kubernetes name part (lowercase letters, digits, dashes)."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not text or len(text) > 44:  # a CronJob's name is at most 52 with "scoring-"
        raise JobFileError(
            f"job name {name!r} cannot name Kubernetes resources: use at most 44 "
            "letters, digits or dashes"
        )
    return text


def _kustomization(
    *, name: str, base: str, components: list[str], engine: str, schedule: str | None,
    timezone: str | None, seconds: int | None, autoscale: Autoscale | None,
) -> dict[str, Any]:  # fmt: skip
    kind = "RayJob" if engine == "ray" else "CronJob"
    prefix = "/spec" if kind == "RayJob" else "/spec/jobTemplate/spec"
    operations: list[dict[str, Any]] = []
    if seconds is not None:
        operations.append({"op": "replace", "path": f"{prefix}/activeDeadlineSeconds",
                           "value": seconds})  # fmt: skip
    if kind == "RayJob" and autoscale is not None:
        operations.extend(_worker_bounds(autoscale))
    if kind == "CronJob":
        operations.append({"op": "replace", "path": "/spec/schedule", "value": schedule})
        if timezone:
            operations.append({"op": "replace", "path": "/spec/timeZone", "value": timezone})
        else:
            operations.append({"op": "remove", "path": "/spec/timeZone"})
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "nameSuffix": f"-{name}",
        "resources": [f"{base}/base"],
        **({"components": [f"{base}/components/{c}" for c in components]} if components else {}),
        "configMapGenerator": [
            {"name": "scoring-job", "behavior": "replace", "files": ["job.toml"]}
        ],
        "patches": [{"target": {"kind": kind}, "patch": _yaml(operations)}],
    }


def _yaml(value: Any) -> str:
    """``value`` as YAML, text of several lines as a literal block (a patch reads as
    written)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    return str(yaml.dump(value, Dumper=Dumper, sort_keys=False, default_flow_style=False))

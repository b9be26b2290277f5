"""What a job's ``[autoscale]`` asks of an engine: workers of one shape, requested,
counted as they join, and released.

An engine that runs on a cluster gives an :class:`Autoscaler` (``Engine.autoscaler``):
Ray's asks its autoscaler for worker bundles and sees nodes join
(:mod:`scoring._engines.ray_autoscale`); Spark's sets dynamic allocation's bounds for
the session the job starts, and its cluster manager does the rest (it sees nothing
join: what it requested is what it reports).  The planning and the waiting are the
job's (:mod:`scoring.jobs._scaling`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .._autoscale import Autoscale

__all__ = ["Autoscale", "Autoscaler", "bundles_that_fit"]


class Autoscaler(Protocol):
    """Workers of one ``shape`` (the resources each asks for) requested of a cluster."""

    #: One worker's resources (``{"CPU": 1.0, "GPU": 1.0}``).
    shape: dict[str, float]
    #: It sees workers join (Ray); else ``granted`` is what was requested (Spark).
    observes: bool
    #: Seconds between re-sending the request while it is held (None: sent once).
    renew_seconds: float | None

    def request(self, workers: int) -> None:
        """Ask for ``workers`` workers in all (it replaces an earlier request)."""

    def granted(self) -> int:
        """Workers of ``shape`` the cluster's live nodes hold now."""

    def options(self, workers: int) -> Any:
        """The engine's options for a run on ``workers`` workers of ``shape``."""

    def release(self) -> None:
        """Withdraw the request: the cluster may scale down."""


def bundles_that_fit(nodes: Sequence[Mapping[str, float]], shape: Mapping[str, float]) -> int:
    """Workers of ``shape`` that ``nodes`` (each one's total resources) hold, a worker
    never split across nodes."""
    wanted = {k: v for k, v in shape.items() if v > 0}
    if not wanted:
        return 0
    return sum(int(min(node.get(k, 0.0) / v for k, v in wanted.items()) + 1e-9) for node in nodes)

"""A job's ``[autoscale]`` table: the bounds within which the planner sizes a cluster
from the deadline.  One model for the job file (:mod:`scoring.jobs._spec`), the engines'
autoscalers (:mod:`scoring._engines.scaling`) and the Kubernetes overlay's bounds
(:mod:`scoring._deploy`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._when import parse_duration

__all__ = ["Autoscale"]


class Autoscale(BaseModel):
    """``[autoscale]``: the planner sizes the cluster from the deadline.  It computes
    the workers the window needs from the measured rate per worker and the fixed costs,
    within ``min_workers`` and ``max_workers``; on Ray it asks the autoscaler for them,
    waits at most ``wait`` for them to join and runs with those that did; on Spark it
    sets dynamic allocation's bounds and initial executors.  A window that even
    ``max_workers`` cannot meet is refused before anything runs (exit 3)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    min_workers: int = Field(default=1, ge=1)
    """The fewest workers asked for, even when fewer would meet the deadline."""
    max_workers: int = Field(ge=1)
    """The most workers asked for: a plan that needs more is refused (exit 3)."""
    wait: str = "10m"
    """How long workers may take to join (Ray), a duration (``"90s"``, ``"10m"``)."""

    @field_validator("wait")
    @classmethod
    def _wait(cls, value: str) -> str:
        if parse_duration(value).total_seconds() <= 0:
            raise ValueError(f'wait {value!r}: give a positive duration ("90s", "10m")')
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Autoscale:
        if self.min_workers > self.max_workers:
            raise ValueError(
                f"min_workers {self.min_workers} is more than max_workers {self.max_workers}"
            )
        return self

    @property
    def wait_seconds(self) -> float:
        return parse_duration(self.wait).total_seconds()

    def clamp(self, workers: int) -> int:
        """``workers`` within the bounds."""
        return max(self.min_workers, min(self.max_workers, workers))

"""Timing helpers shared by the demo, the CLI and benchmarks/ (warm-up, then best of N)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["rows_per_second"]


def rows_per_second(fn: Callable[[Any], Any], X: Any, *, repeats: int = 3) -> float:
    """Best-of-``repeats`` throughput of ``fn(X)`` after one warm-up call."""
    fn(X[: min(len(X), 1024)])
    best = float("inf")
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(X)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return len(X) / best

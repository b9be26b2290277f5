"""Reference model recipes: the one list the demo, the tests and the benchmarks build from.

A :class:`Recipe` names a framework, an estimator, a task and a size; ``build()`` makes
reproducible training data for it (with NaN where the estimator accepts missing values,
and integer-coded categorical columns where it has categorical features) and fits it.
"""

from __future__ import annotations

from models.recipes import (
    BENCHMARK_RECIPES,
    DEMO_RECIPE,
    EXPLAIN_RECIPES,
    GPU_RECIPES,
    SMALL_RECIPES,
    Recipe,
    make_data,
)

__all__ = [
    "BENCHMARK_RECIPES",
    "DEMO_RECIPE",
    "EXPLAIN_RECIPES",
    "GPU_RECIPES",
    "SMALL_RECIPES",
    "Recipe",
    "make_data",
]

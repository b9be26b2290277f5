"""Shared fixtures: every recipe in models.SMALL_RECIPES built once per session."""

from __future__ import annotations

import os
import warnings
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
import pytest

from models import SMALL_RECIPES, Recipe
from scoring._backends.native import NativeBackend
from scoring._frameworks import import_model, model_object
from scoring._ir import Forest

warnings.filterwarnings("ignore", category=UserWarning)
# No background package builders (scoring/_compiler/packages.py) for every fused model
# the suite compiles: test_packages.py turns them on where it tests them.
os.environ["SCORING_COMPILE_CACHE"] = "off"

RECIPES = {r.name: r for r in SMALL_RECIPES}


@cache
def built(name: str) -> tuple[Any, Forest, NativeBackend]:
    if not RECIPES[name].available:  # an optional extra (CatBoost) that is not installed
        pytest.skip(f"{RECIPES[name].framework} is not installed")
    model = RECIPES[name].build()  # a search or a Pipeline as fitted: the user's object
    forest = import_model(model)
    return model, forest, NativeBackend(model_object(model), forest)


def as_model_input(recipe: Recipe, rows: np.ndarray, forest: Forest) -> Any:
    """Rows as the model was trained: a frame with category columns for frame recipes.

    A categorical code that is not a known category becomes an unseen label (999.0).
    """
    if not recipe.frame:
        return rows
    frame = pd.DataFrame(rows, columns=[f"feat_{i}" for i in range(rows.shape[1])])
    if recipe.categorical:
        labels = [float(v) for v in forest.categories.get(0, [])]
        frame["feat_0"] = pd.Categorical(
            [_label(v, labels) for v in rows[:, 0]], categories=[*labels, 999.0]
        )
    return frame


def _label(code: float, labels: list[float]) -> float:
    if np.isnan(code):
        return np.nan
    if code >= 0 and float(code).is_integer() and int(code) < len(labels):
        return labels[int(code)]
    return 999.0


@pytest.fixture(params=sorted(RECIPES))
def recipe_name(request: pytest.FixtureRequest) -> str:
    return request.param

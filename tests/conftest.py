"""Shared fixtures: every recipe in models.SMALL_RECIPES built once per session."""

from __future__ import annotations

import os
import warnings
from functools import cache
from typing import Any

import numpy as np
import pytest

from models import SMALL_RECIPES, Recipe
from scoring._backends.native import NativeBackend
from scoring._frameworks import import_model, model_object
from scoring._ir import Forest
from scoring._parity import as_frame

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
    """Rows as the model was trained: for frame recipes a frame with category columns
    (or an encoder's labels), an unknown code becoming a label never seen."""
    return as_frame(rows, forest) if recipe.frame else rows


@pytest.fixture(params=sorted(RECIPES))
def recipe_name(request: pytest.FixtureRequest) -> str:
    return request.param

"""scikit-learn's meta-estimators around tree models, taken apart before import.

- A search (``GridSearchCV``, ``RandomizedSearchCV``, the halving ones) predicts with its
  refit ``best_estimator_``: that estimator is what is imported, stored and scored.
- A ``Pipeline`` whose earlier steps are all ``"passthrough"`` is its last step; one
  that selects columns and fills missing values before a scikit-learn tree model is
  compiled with it (:mod:`._pipeline`).
- ``MultiOutputRegressor``/``MultiOutputClassifier`` fit one clone of a tree model per
  target: their forests are stacked into one Forest of several targets
  (:func:`stack_targets`), whose outputs are the targets' side by side, each summed from
  its own trees in their order, so every target's bits are its estimator's.
- ``RegressorChain``/``ClassifierChain`` run their estimators in order, each reading the
  rows and the predictions before it: a Forest of stages (:func:`chain_of`).

Pipelines with other steps are refused naming the step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .._ir import Forest, Tree
from ..errors import UnsupportedModelError
from ._pipeline import pipeline_supported

__all__ = [
    "CHAIN_KINDS",
    "MULTI_OUTPUT_KINDS",
    "chain_of",
    "fitted_model",
    "stack_targets",
    "target_estimators",
]

MULTI_OUTPUT_KINDS = frozenset({"MultiOutputRegressor", "MultiOutputClassifier"})
CHAIN_KINDS = frozenset({"RegressorChain", "ClassifierChain"})
_SEARCHES = frozenset({
    "GridSearchCV", "RandomizedSearchCV", "HalvingGridSearchCV", "HalvingRandomSearchCV",
})  # fmt: skip


def fitted_model(model: Any) -> Any:
    """The estimator that does the predicting inside a search or a trivial Pipeline."""
    kind = type(model).__name__
    if kind in _SEARCHES:
        if not hasattr(model, "best_estimator_"):
            raise UnsupportedModelError(
                f"{kind} was fitted with refit=False and has no best_estimator_ to score: "
                "refit it, or pass the estimator you chose"
            )
        return fitted_model(model.best_estimator_)
    if kind == "Pipeline":
        if all(step in (None, "passthrough") for _, step in model.steps[:-1]):
            return fitted_model(model.steps[-1][1])
        if not pipeline_supported(model):
            final = type(model.steps[-1][1]).__name__
            raise UnsupportedModelError(
                f"a Pipeline whose steps change the data before {final} is not supported "
                "(only before scikit-learn tree models): apply the steps to the data before "
                "scoring, or pass the final estimator"
            )
    return model


def target_estimators(model: Any) -> list[Any]:
    """The per-target estimators of a multi-output wrapper: scikit-learn's own only, since
    the wrapper is stored as one scikit-learn object."""
    kind = type(model).__name__
    for est in model.estimators_:
        if type(est).__module__.split(".")[0] != "sklearn":
            raise UnsupportedModelError(
                f"{kind} of {type(est).__name__} is not supported: fit "
                f"{type(est).__name__} on every target at once (it takes a 2-D y), or "
                "register one model per target"
            )
    return list(model.estimators_)


def chain_of(forests: list[Forest], model: Any) -> Forest:
    """A chain's Forest: its estimators' Forests as stages (see
    :class:`scoring._compiler.chain.ChainForest`), their trees together for whoever
    reads the trees (probes, leaf ids)."""
    kind = type(model).__name__
    classifier = kind == "ClassifierChain"
    if getattr(model, "chain_method_", "predict") != "predict":
        raise UnsupportedModelError(
            f"{kind} with chain_method={model.chain_method_!r} is not supported: only "
            "'predict' (each estimator reads the labels predicted before it)"
        )
    wanted = "binary" if classifier else "regression"
    for forest in forests:
        if forest.task != wanted or (not classifier and forest.n_outputs != 1):
            raise UnsupportedModelError(
                f"{kind} of {forest.model_kind} ({forest.task}) is not supported: its "
                f"estimators must be {'binary classifiers' if classifier else 'regressors'}"
            )
    first = forests[0]
    return Forest(
        framework=first.framework,
        model_kind=kind,
        task="multilabel" if classifier else "regression",
        trees=[tree for forest in forests for tree in forest.trees],
        n_features=int(model.n_features_in_),
        n_outputs=len(forests),
        base_score=np.zeros(len(forests)),
        objective=first.objective,
        input_dtype=first.input_dtype,
        stages=forests,
        stage_targets=[int(t) for t in model.order_],
    )


def stack_targets(forests: list[Forest], *, kind: str) -> Forest:
    """One Forest of several targets from one single-target Forest per target."""
    first = forests[0]
    _check_stackable(forests, kind)
    widths = [f.n_outputs for f in forests]
    offsets = np.concatenate([[0], np.cumsum(widths)])
    trees = [
        _widened(tree, int(offsets[k]), int(offsets[-1]))
        for k, forest in enumerate(forests)
        for tree in forest.trees
    ]
    classifier = first.task in ("binary", "multiclass")
    return replace(
        first,
        model_kind=kind,
        task="multioutput" if classifier else "regression",
        trees=trees,
        n_outputs=int(offsets[-1]),
        base_score=np.concatenate([f.base_score for f in forests]),
        classes=None,
        targets=[np.asarray(f.classes).tolist() for f in forests] if classifier else [],
        # averaging forests: each target's sum is divided by its own estimator's count
        average_over=first.n_trees if first.average else None,
    )


def _widened(tree: Tree, offset: int, width: int) -> Tree:
    """``tree`` adding its values to outputs ``offset ...`` of ``width``."""
    value = np.zeros((tree.value.shape[0], width))
    value[:, offset : offset + tree.value.shape[1]] = tree.value
    return replace(tree, value=value)


#: What every stacked Forest must share, since one compiled program runs them all.
_SHARED = ("framework", "post_transform", "sigmoid_alpha", "average", "input_dtype",
           "accumulate_dtype", "zero_snap", "missing_value", "recode_categories")  # fmt: skip


def _check_stackable(forests: list[Forest], kind: str) -> None:
    first = forests[0]
    if first.task not in ("binary", "multiclass", "regression"):
        raise UnsupportedModelError(f"{kind} of {first.model_kind} ({first.task}) is not supported")
    if first.task in ("binary", "multiclass") and first.post_transform != "identity":
        raise UnsupportedModelError(
            f"{kind} of {first.model_kind} is not supported: only forests whose "
            "probabilities are their trees' class fractions (trees, forests) stack"
        )
    for forest in forests[1:]:
        differ = [a for a in _SHARED if getattr(forest, a) != getattr(first, a)]
        if differ or (first.average and forest.n_trees != first.n_trees):
            raise UnsupportedModelError(
                f"{kind}: its estimators differ ({', '.join(differ) or 'tree counts'}); "
                "only clones of one tree model stack"
            )

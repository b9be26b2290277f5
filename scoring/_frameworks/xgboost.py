"""XGBoost importer, from the model's own JSON serialisation (schema of XGBoost >= 2).

XGBoost reads features as float32 and goes left iff ``x < t`` (t float32): normalised
here to ``x <= largest float32 below t``.  Missing values (NaN, or the model's
``missing`` value) take ``default_left``.  A categorical node lists the categories that
go *right*; every other category, and an invalid one (``c < 0`` before truncation, or
past the bitset), goes left.  Leaves are added in float32 in tree order to
``base_score``, converted to margin space by the objective's link as XGBoost converts
it; a DART tree's leaves are weighted as XGBoost weights them (:func:`_dart_leaves`).
+-inf goes past every threshold when scoring (``inplace_predict``, which the wrappers
call); leaf ids come through a DMatrix, which refuses it (asked at import).
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import itertools
import json
import math
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._ir import SPLIT_CATEGORICAL, Forest, Tree, largest_float32_below
from ..errors import UnsupportedModelError
from ._common import bitset_words, numeric_tree, probe_refusals
from ._protocol import Framework, NativeModel, native_input, register

__all__ = ["FRAMEWORK", "import_xgboost"]

_BOOSTER = "xgboost.Booster"

_LOGISTIC = {"binary:logistic", "reg:logistic"}
_LOG_LINK = {"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft"}
_IDENTITY = {
    "reg:squarederror", "reg:squaredlogerror", "reg:pseudohubererror", "reg:absoluteerror",
    "reg:quantileerror", "reg:linear", "binary:logitraw",
    "rank:pairwise", "rank:ndcg", "rank:map",
}  # fmt: skip
_MULTI = {"multi:softprob", "multi:softmax"}


def import_xgboost(model: Any) -> Forest:
    """Import an XGBModel (sklearn API) or an ``xgboost.Booster``."""
    import xgboost

    is_booster = isinstance(model, xgboost.Booster)
    booster = model if is_booster else model.get_booster()
    doc = json.loads(bytes(booster.save_raw(raw_format="json")))
    learner = doc["learner"]
    objective = learner["objective"]["name"]
    forest = _forest_from_learner(learner, objective, kind=_kind(model, is_booster))
    if not is_booster:
        missing = getattr(model, "missing", np.nan)
        if missing is not None and not (isinstance(missing, float) and math.isnan(missing)):
            forest.missing_value = float(missing)
        _limit_to_best_iteration(forest, learner)
        if forest.task in ("binary", "multiclass", "multilabel") and hasattr(model, "classes_"):
            forest.classes = np.asarray(model.classes_)
            forest.predict_returns = "label"
    elif objective == "multi:softmax":
        forest.predict_returns = "class_index"

    # Scores come from inplace_predict (what the wrappers call), which takes +-inf past
    # every threshold; leaf ids only through a DMatrix, which refuses them.
    def leaves(row: np.ndarray) -> Any:
        return booster.predict(_dmatrix(booster, row), pred_leaf=True)

    forest.refuses = probe_refusals(forest, booster.inplace_predict, leaves)
    return forest


def _dmatrix(booster: Any, X: Any, *, missing: float | None = None) -> Any:
    import xgboost

    missing = np.nan if missing is None else missing
    if isinstance(X, pd.DataFrame):
        return xgboost.DMatrix(X, enable_categorical=True, missing=missing)
    return xgboost.DMatrix(
        X,
        missing=missing,
        feature_names=booster.feature_names,
        feature_types=booster.feature_types,
        enable_categorical="c" in (booster.feature_types or []),
    )


def _kind(model: Any, is_booster: bool) -> str:
    return _BOOSTER if is_booster else type(model).__name__


def _task(objective: str, n_outputs: int) -> str:
    if objective in _MULTI:
        return "multiclass"
    if objective in _LOGISTIC or objective.startswith("binary:"):
        return "binary" if n_outputs == 1 else "multilabel"  # one probability per label
    return "ranking" if objective.startswith("rank:") else "regression"


def _post_transform(objective: str) -> str:
    if objective in _LOGISTIC:
        return "sigmoid"
    if objective in _MULTI:
        return "softmax"
    if objective in _LOG_LINK:
        return "exp"
    if objective == "binary:hinge":
        return "hinge"
    if objective in _IDENTITY:
        return "identity"
    raise UnsupportedModelError(f"XGBoost objective {objective!r} is not supported")


#: XGBoost keeps a logistic model's base_score inside (eps, 1 - eps): a classifier
#: fitted on one class has base_score 0, and a margin of -13.81551, not -inf.
_PROB_EPS = np.float32(1e-6)


def _logit(p: np.ndarray) -> np.ndarray:
    """XGBoost's ``-logf(1.0f / p - 1.0f)`` in float32, with the C library's ``logf``
    as XGBoost calls it (numpy's float32 log differs from it in the last bit)."""
    one = np.float32(1.0)
    clamped = np.clip(p.astype(np.float32), _PROB_EPS, one - _PROB_EPS)
    odds = one / clamped - one
    return np.array([-_logf(float(v)) for v in odds], dtype=np.float32).astype(np.float64)


def _libm_logf() -> Any:
    library = ctypes.util.find_library("m")
    if library is None:  # no separate C math library (Windows): round the double log
        return lambda v: float(np.float32(math.log(v)))
    logf = ctypes.CDLL(library).logf
    logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
    return logf


_logf = _libm_logf()


def _base_margin(learner: dict[str, Any], objective: str, n_outputs: int) -> np.ndarray:
    text = str(learner["learner_model_param"]["base_score"]).strip("[]")
    values = np.array([float(v) for v in text.split(",")], dtype=np.float32).astype(np.float64)
    values = np.broadcast_to(values, (n_outputs,)).copy() if values.size == 1 else values
    if objective in _LOGISTIC:
        return _logit(values)
    if objective in _LOG_LINK:
        return np.log(values).astype(np.float32).astype(np.float64)
    return values


def _forest_from_learner(learner: dict[str, Any], objective: str, *, kind: str) -> Forest:
    booster = learner["gradient_booster"]
    if booster["name"] not in ("gbtree", "dart"):
        raise UnsupportedModelError(f"XGBoost booster {booster['name']!r} is not supported")
    model = _gbtree(learner)["model"]
    params = learner["learner_model_param"]
    n_outputs = max(int(params.get("num_class", 0)), int(params.get("num_target", 1)), 1)
    weights = booster.get("weight_drop") if booster["name"] == "dart" else None
    base = _base_margin(learner, objective, n_outputs)
    trees = []
    for i, (tree, group) in enumerate(zip(model["trees"], model["tree_info"], strict=True)):
        dart = None if weights is None else (float(weights[i]), float(base[group]))
        trees.append(_convert_tree(tree, group, n_outputs, dart))
    names = learner.get("feature_names") or None
    types = learner.get("feature_types") or []
    forest = Forest(
        framework="xgboost",
        model_kind=kind,
        task=_task(objective, n_outputs),  # type: ignore[arg-type]
        trees=trees,
        n_features=int(params["num_feature"]),
        n_outputs=n_outputs,
        base_score=base,
        post_transform=_post_transform(objective),  # type: ignore[arg-type]
        feature_names=list(names) if names else None,
        categorical_features=[i for i, t in enumerate(types) if t == "c"],
        objective=objective,
        input_dtype="float32",
        accumulate_dtype="float32",
        cat_check_before_trunc=True,
    )
    forest.categories = _stored_categories(model.get("cats"))
    forest.reject_unknown_categories = bool(forest.categories)
    return forest


def _stored_categories(cats: dict[str, Any] | None) -> dict[int, list[object]]:
    """Category labels XGBoost >= 3 keeps for data frames, per feature, in code order.

    String categories are stored as UTF-8 bytes cut by ``offsets``; numeric ones as values.
    """
    out: dict[int, list[object]] = {}
    for feature, enc in enumerate((cats or {}).get("enc", [])):
        values, offsets = enc.get("values", []), enc.get("offsets", [])
        if offsets:
            raw = bytes(int(v) for v in values)
            out[feature] = [raw[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets)]
        elif values:
            out[feature] = list(values)
    return out


def _gbtree(learner: dict[str, Any]) -> dict[str, Any]:
    booster = learner["gradient_booster"]
    return booster["gbtree"] if booster["name"] == "dart" else booster


def _limit_to_best_iteration(forest: Forest, learner: dict[str, Any]) -> None:
    """The sklearn API predicts with the trees up to ``best_iteration`` (early stopping)."""
    best = learner.get("attributes", {}).get("best_iteration")
    if best is None:
        return
    model = _gbtree(learner)["model"]
    indptr = model.get("iteration_indptr")
    if not indptr:  # before XGBoost 2: trees per iteration from the model parameters
        per_iter = int(model["gbtree_model_param"].get("num_parallel_tree", 1)) * forest.n_outputs
        indptr = list(range(0, len(forest.trees) + 1, per_iter))
    forest.trees = forest.trees[: int(indptr[min(int(best) + 1, len(indptr) - 1)])]


def _convert_tree(
    tree: dict[str, Any], group: int, n_outputs: int, dart: tuple[float, float] | None
) -> Tree:
    """``dart``: the tree's weight and its group's base margin (see :func:`_dart_leaves`)."""
    left = np.asarray(tree["left_children"], dtype=np.int64)
    right = np.asarray(tree["right_children"], dtype=np.int64)
    cond = np.asarray(tree["split_conditions"], dtype=np.float32)
    if int(tree["tree_param"].get("size_leaf_vector", "1")) > 1:
        value = _leaf_vectors(tree, left, right, n_outputs, dart)
        right = np.where(left < 0, -1, right)  # a leaf's right child is its vector's index
    else:
        value = np.zeros((left.size, n_outputs))
        leaves = cond if dart is None else _dart_leaves(cond, *dart)
        value[:, group] = leaves.astype(np.float64)
    out = numeric_tree(
        feature=np.asarray(tree["split_indices"], dtype=np.int64),
        threshold=largest_float32_below(cond),
        left=left,
        right=right,
        default_left=np.asarray(tree["default_left"], dtype=bool),
        value=value,
        cover=np.asarray(tree["sum_hessian"], dtype=np.float32) if "sum_hessian" in tree else None,
    )
    _add_categorical_splits(out, tree)
    return out


def _leaf_vectors(
    tree: dict[str, Any],
    left: np.ndarray,
    right: np.ndarray,
    n_outputs: int,
    dart: tuple[float, float] | None,
) -> np.ndarray:
    """A multi-output tree (``multi_strategy='multi_output_tree'``): leaf ``i`` holds
    the vector ``leaf_weights[j * K : (j + 1) * K]`` where ``j`` is its right child."""
    if dart is not None:
        raise UnsupportedModelError("XGBoost DART with multi-output trees is not supported")
    weights = np.asarray(tree["leaf_weights"], dtype=np.float32).reshape(-1, n_outputs)
    value = np.zeros((left.size, n_outputs))
    leaves = np.flatnonzero(left < 0)
    value[leaves] = weights[right[leaves]].astype(np.float64)
    return value


def _dart_leaves(leaves: np.ndarray, weight: float, base: float) -> np.ndarray:
    """A DART tree's weighted leaves as XGBoost adds them: it predicts the one tree from
    the base margin, takes the base off again and weights what is left, all in float32
    (so ``(base + leaf) - base`` is not always ``leaf``)."""
    b = np.float32(base)
    return ((leaves + b) - b) * np.float32(weight)


def _add_categorical_splits(out: Tree, tree: dict[str, Any]) -> None:
    nodes = tree.get("categories_nodes") or []
    if not nodes:
        return
    cats = np.asarray(tree["categories"], dtype=np.int64)
    out.cat_unknown_left = np.ones(out.n_nodes, dtype=bool)
    for node, start, size in zip(
        nodes, tree["categories_segments"], tree["categories_sizes"], strict=True
    ):
        right = cats[int(start) : int(start) + int(size)]
        n_words = int(right.max()) // 32 + 1 if right.size else 1
        known = np.full(n_words, 0xFFFFFFFF, dtype=np.uint32)
        out.split_kind[node] = SPLIT_CATEGORICAL
        out.cat_left[int(node)] = ~bitset_words(right.tolist(), n_words) & known
        out.cat_known[int(node)] = known


class XGBoostNative(NativeModel):
    """XGBoost's predictor: the wrappers take numpy or pandas, a Booster scores through
    ``inplace_predict`` and gives leaf ids through a DMatrix."""

    has_contributions = True

    def one_thread(self) -> NativeModel | None:
        if not self.sklearn_api:
            booster = self.model.copy()
            booster.set_param("nthread", 1)
            return XGBoostNative(booster, self.forest)
        clone = copy.deepcopy(self.model)
        clone.set_params(n_jobs=1)
        return XGBoostNative(clone, self.forest)

    def call(self, method: str, X: Any, **kwargs: Any) -> np.ndarray:
        if not self.sklearn_api and method == "predict" and not kwargs.get("pred_leaf"):
            # A Booster scores through inplace_predict, as the wrappers do: a DMatrix
            # refuses the +-inf that XGBoost's predictor takes past every threshold.
            kind = "margin" if kwargs.get("output_margin") else "value"
            return super().call("inplace_predict", X, predict_type=kind)
        return super().call(method, X, **kwargs)

    def prepare(self, X: Any, method: str) -> Any:
        return X if self.sklearn_api or method == "inplace_predict" else _dmatrix(self.model, X)

    def predict_raw(self, X: Any) -> np.ndarray:
        return self.call("predict", X, output_margin=True)

    def predict_leaf(self, X: Any) -> np.ndarray:
        if self.sklearn_api:
            return self.call("apply", X).astype(np.int64)
        return self.call("predict", X, pred_leaf=True).astype(np.int64)

    @cached_property
    def _vector_leaves(self) -> bool:
        """Whether a leaf adds to several outputs (``multi_output_tree``)."""
        return any(np.count_nonzero(t.value[t.is_leaf].any(axis=0)) > 1 for t in self.forest.trees)

    def predict_contributions(self, X: Any) -> np.ndarray:
        """``pred_contribs``, through a DMatrix as XGBoost computes them (the trees the
        wrapper predicts with: up to ``best_iteration``)."""
        if self._vector_leaves:
            raise UnsupportedModelError(
                f"XGBoost computes no contributions for {self.forest.model_kind} with "
                "multi-output trees (multi_strategy='multi_output_tree'); use backend='tensor'"
            )
        booster = self.model.get_booster() if self.sklearn_api else self.model
        best = getattr(self.model, "best_iteration", None) if self.sklearn_api else None
        limit = (0, int(best) + 1) if best is not None else (0, 0)
        missing = self.forest.missing_value

        def contribs() -> Any:
            rows = _dmatrix(booster, native_input(X), missing=missing)
            return booster.predict(rows, pred_contribs=True, iteration_range=limit)

        values = np.asarray(self.asked(contribs))
        return values.reshape(len(values), -1, values.shape[-1])


class XGBoost(Framework):
    name = "xgboost"
    distribution = "xgboost"
    artifact = "model.ubj"
    suffixes = (".json", ".ubj")

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        import xgboost

        return xgboost.Booster(model_file=str(path))

    def to_forest(self, model: Any) -> Forest:
        return import_xgboost(model)

    def dump(self, model: Any) -> bytes:
        import xgboost

        if isinstance(model, xgboost.Booster):
            return bytes(model.save_raw(raw_format="ubj"))
        with tempfile.TemporaryDirectory() as tmp:  # the wrappers only save to a file
            path = Path(tmp) / "model.ubj"
            model.save_model(path)
            return path.read_bytes()

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        import xgboost

        if kind == _BOOSTER:
            model = xgboost.Booster(model_file=bytearray(data))
        else:
            wrapper = getattr(xgboost, kind, None)
            if wrapper is None:
                raise UnsupportedModelError(f"xgboost has no model class {kind!r}")
            model = wrapper()
            model.load_model(bytearray(data))
        return model, import_xgboost(model)

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return XGBoostNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        import xgboost

        if isinstance(model, xgboost.XGBModel):  # the wrapper's names are its booster's
            model.get_booster().feature_names = names
        elif isinstance(model, xgboost.Booster):
            model.feature_names = names
        else:
            return None
        return model


FRAMEWORK = register(XGBoost())

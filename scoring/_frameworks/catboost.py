"""CatBoost importer, from the model's own JSON serialisation.

CatBoost grows oblivious (symmetric) trees: one split per level, the same across the
level.  Split ``i`` of a tree sets bit ``i`` of the leaf index when ``x > border``,
with ``x`` read as float32; NaN sets it or not by the feature's ``nan_value_treatment``
(``AsTrue``: nan_mode Max; ``AsFalse``: Min; ``AsIs``: Forbidden, where NaN compares
false).  As an IR tree that is a complete tree whose root tests the last split, so the
leaf at heap position ``2**depth - 1 + j`` is leaf ``j``.  Leaves are added in float64
in tree order from zero; then the margin is ``scale * sum + bias`` (``base_last``).
Categorical, text and embedding features go through CatBoost's own hashing and CTR
statistics, which are not reproduced: such models are refused naming the feature.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .._ir import Forest, Tree, largest_float32_at_most
from ..errors import UnsupportedModelError
from ._common import numeric_tree, probe_refusals
from ._protocol import Framework, NativeModel, register

__all__ = ["FRAMEWORK", "import_catboost"]

#: loss function -> (task, post transform); the name before any ``:param=value``.
_LOSSES = {
    "Logloss": ("binary", "sigmoid"), "CrossEntropy": ("binary", "sigmoid"),
    "MultiClass": ("multiclass", "softmax"), "MultiClassOneVsAll": ("multiclass", "ova_sigmoid"),
    "RMSE": ("regression", "identity"), "MAE": ("regression", "identity"),
    "Quantile": ("regression", "identity"), "MAPE": ("regression", "identity"),
    "Huber": ("regression", "identity"), "Expectile": ("regression", "identity"),
    "MultiRMSE": ("regression", "identity"), "Lq": ("regression", "identity"),
    "Poisson": ("regression", "exp"), "Tweedie": ("regression", "exp"),
    "YetiRank": ("ranking", "identity"), "YetiRankPairwise": ("ranking", "identity"),
    "PairLogit": ("ranking", "identity"), "PairLogitPairwise": ("ranking", "identity"),
    "QueryRMSE": ("ranking", "identity"), "QuerySoftMax": ("ranking", "identity"),
}  # fmt: skip
_CLASSIFIER_LOSSES = {"Logloss", "CrossEntropy", "MultiClass", "MultiClassOneVsAll"}


def import_catboost(model: Any) -> Forest:
    """Import a fitted CatBoost, CatBoostClassifier, CatBoostRegressor or CatBoostRanker."""
    doc = _model_json(model)
    loss = str(model.get_all_params()["loss_function"]).split(":")[0]
    if loss not in _LOSSES:
        raise UnsupportedModelError(f"CatBoost loss function {loss!r} is not supported")
    _refuse_non_float_features(doc.get("features_info", {}))
    floats = doc["features_info"].get("float_features", [])
    scale, bias = doc.get("scale_and_bias", [1.0, [0.0]])
    bias = np.atleast_1d(np.asarray(bias, dtype=np.float64))
    task, post = _LOSSES[loss]
    kind = type(model).__name__
    forest = Forest(
        framework="catboost",
        model_kind=kind,
        task=task,  # type: ignore[arg-type]
        trees=[_convert_tree(t, floats, bias.size) for t in doc.get("oblivious_trees", [])],
        n_features=_n_features(model, floats),
        n_outputs=int(bias.size),
        base_score=bias,
        post_transform=post,  # type: ignore[arg-type]
        feature_names=_feature_names(model),
        objective=loss,
        input_dtype="float32",
        accumulate_dtype="float64",
        base_last=True,
        scale=float(scale),
    )
    if loss in _CLASSIFIER_LOSSES and getattr(model, "classes_", None) is not None:
        forest.classes = np.asarray(model.classes_)
        forest.predict_returns = "label" if kind == "CatBoostClassifier" else "value"
        forest.labels_as_column = task == "multiclass"  # CatBoost predicts [rows, 1] there
    forest.refuses = probe_refusals(forest, model.predict, lambda row: _leaf_indexes(model, row))
    return forest


def _model_json(model: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        model.save_model(str(path), format="json")
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc


def _refuse_non_float_features(info: dict[str, Any]) -> None:
    for key, what in (("categorical_features", "categorical"), ("text_features", "text"),
                      ("embedding_features", "embedding")):  # fmt: skip
        features = info.get(key) or []
        if features:
            name = features[0].get("feature_id") or f"column {features[0]['flat_feature_index']}"
            raise UnsupportedModelError(
                f"CatBoost {what} feature {name!r} is scored through CatBoost's own hashing "
                "and CTR statistics, which are not reproduced exactly: use backend='native', "
                "or encode it as a number before training"
            )


def _n_features(model: Any, floats: list[dict[str, Any]]) -> int:
    names = model.feature_names_ or []
    found = max((int(f["flat_feature_index"]) + 1 for f in floats), default=0)
    return max(len(names), found)


def _feature_names(model: Any) -> list[str] | None:
    names = [str(n) for n in (model.feature_names_ or [])]
    # Without names in the training data CatBoost calls its features "0", "1", ...
    return None if names == [str(i) for i in range(len(names))] else names or None


def _convert_tree(tree: dict[str, Any], floats: list[dict[str, Any]], dim: int) -> Tree:
    splits = tree.get("splits", [])
    depth = len(splits)
    inner = 2**depth - 1
    n = inner + 2**depth
    nodes = np.arange(n)
    level = np.floor(np.log2(nodes + 1)).astype(np.int64)
    feature, threshold = np.zeros(n, np.int64), np.zeros(n)
    default_left = np.ones(n, dtype=bool)
    for lvl in range(depth):
        split = splits[depth - 1 - lvl]  # the root tests the last split (the leaf's top bit)
        if split.get("split_type", "FloatFeature") != "FloatFeature":
            raise UnsupportedModelError(f"CatBoost split {split['split_type']!r} is not supported")
        info = floats[int(split["float_feature_index"])]
        at = level == lvl
        feature[at] = int(info["flat_feature_index"])
        threshold[at] = largest_float32_at_most(np.array([split["border"]]))[0]
        default_left[at] = info.get("nan_value_treatment", "AsIs") != "AsTrue"
    value = np.zeros((n, dim))
    value[inner:] = np.asarray(tree["leaf_values"], dtype=np.float64).reshape(-1, dim)
    is_inner = nodes < inner
    leaf_id = np.where(is_inner, 0, nodes - inner)
    return numeric_tree(
        feature=feature,
        threshold=threshold,
        left=np.where(is_inner, 2 * nodes + 1, -1),
        right=np.where(is_inner, 2 * nodes + 2, -1),
        default_left=default_left,
        value=value,
        leaf_id=leaf_id,
    )


def _leaf_indexes(model: Any, X: Any) -> np.ndarray:
    import catboost

    return np.asarray(model.calc_leaf_indexes(catboost.Pool(X)), dtype=np.int64)


class CatBoostNative(NativeModel):
    """CatBoost's predictor; leaf ids through ``calc_leaf_indexes``."""

    def predict(self, X: Any) -> np.ndarray:
        if self.forest.post_transform == "exp":
            # A model restored from its bytes has no loss function among its parameters,
            # so its predict() would default to raw margins (log scale): ask for what the
            # trained model's predict() returns.
            return self.call("predict", X, prediction_type="Exponent")
        return super().predict(X)

    def predict_raw(self, X: Any) -> np.ndarray:
        if self.forest.task == "ranking":  # a ranker predicts raw values, and takes no type
            return self.call("predict", X)
        return self.call("predict", X, prediction_type="RawFormulaVal")

    def predict_proba(self, X: Any) -> np.ndarray:
        if self.forest.predict_returns == "label":
            return self.call("predict_proba", X)
        return self.call("predict", X, prediction_type="Probability")

    def predict_leaf(self, X: Any) -> np.ndarray:
        return np.asarray(self.answer("calc_leaf_indexes", X), dtype=np.int64)

    def prepare(self, X: Any, method: str) -> Any:
        if method != "calc_leaf_indexes":
            return X
        import catboost

        return catboost.Pool(X)


class CatBoost(Framework):
    """Stored as CatBoost's own binary model file (``.cbm``), restored into the class it
    was registered as."""

    name = "catboost"
    distribution = "catboost"
    artifact = "model.cbm"
    suffixes = (".cbm", ".json")
    hummingbird = False

    def claims(self, path: Path) -> bool:
        """A ``.cbm`` file, or JSON that opens with CatBoost's keys (XGBoost's with
        ``learner`` or ``version``)."""
        if path.suffix.lower() == ".cbm":
            return True
        with path.open("rb") as f:
            head = f.read(4096)
        return b'"features_info"' in head or b'"oblivious_trees"' in head

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        import catboost

        fmt = "json" if path.suffix.lower() == ".json" else "cbm"
        loss = catboost.CatBoost().load_model(str(path), format=fmt).get_all_params()
        kind = _class_for(str(loss["loss_function"]))
        return getattr(catboost, kind)().load_model(str(path), format=fmt)

    def to_forest(self, model: Any) -> Forest:
        if not model.is_fitted():
            raise UnsupportedModelError(f"{type(model).__name__} is not fitted")
        return import_catboost(model)

    def dump(self, model: Any) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / self.artifact
            model.save_model(str(path), format="cbm")
            return path.read_bytes()

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        import catboost

        cls = getattr(catboost, kind, None)
        if cls is None:
            raise UnsupportedModelError(f"catboost has no model class {kind!r}")
        model = cls().load_model(blob=data)
        return model, import_catboost(model)

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return CatBoostNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        model.set_feature_names(names)
        return model


def _class_for(loss_function: str) -> str:
    """A model file holds no class: its loss function says which one predicts with it."""
    loss = loss_function.split(":")[0]
    if loss in _CLASSIFIER_LOSSES:
        return "CatBoostClassifier"
    return "CatBoostRanker" if _LOSSES.get(loss, ("",))[0] == "ranking" else "CatBoostRegressor"


FRAMEWORK = register(CatBoost())

"""scikit-learn importer: decision trees, forests, gradient boosting, HGB, IsolationForest.

scikit-learn casts X to float32 for its tree models and tests ``x <= t`` against float64
thresholds; HistGradientBoosting reads X as float64.  Missing values follow each node's
``missing_go_to_left``.  Whether NaN or inf is accepted at all is read from the fitted
estimator itself (a one-row probe of its own ``predict``) so that we refuse exactly
what it refuses.
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._ir import Forest, Tree, largest_float32_at_most
from .._outputs import squeeze
from ..errors import InputError, UnsupportedModelError, UntrustedModelError, translated
from ._common import numeric_tree, probe_refusals, sklearn_forest
from ._pipeline import import_pipeline, pipeline_input
from ._protocol import Framework, NativeModel, native_input, register
from ._sklearn_hgb import import_hist_gradient_boosting
from ._wrappers import (
    CHAIN_KINDS,
    MULTI_OUTPUT_KINDS,
    chain_of,
    stack_targets,
    target_estimators,
)

__all__ = ["FRAMEWORK", "SKOPS_TRUSTED", "import_sklearn", "load_skops_bytes"]

_FOREST_KINDS = {
    "DecisionTreeClassifier", "DecisionTreeRegressor", "ExtraTreeClassifier",
    "ExtraTreeRegressor", "RandomForestClassifier", "RandomForestRegressor",
    "ExtraTreesClassifier", "ExtraTreesRegressor",
}  # fmt: skip
_GB_KINDS = {"GradientBoostingClassifier", "GradientBoostingRegressor"}
_HGB_KINDS = {"HistGradientBoostingClassifier", "HistGradientBoostingRegressor"}


def import_sklearn(model: Any) -> Forest:
    kind = type(model).__name__
    if getattr(model, "n_outputs_", 1) != 1 and kind not in _FOREST_KINDS:
        raise UnsupportedModelError(f"{kind} with {model.n_outputs_} outputs is not supported")
    if kind in _FOREST_KINDS:
        forest = _import_forest(model, kind)
    elif kind in _GB_KINDS:
        forest = _import_gradient_boosting(model, kind)
    elif kind in _HGB_KINDS:
        forest = import_hist_gradient_boosting(model, kind)
    elif kind == "IsolationForest":
        forest = _import_isolation_forest(model)
    elif kind == "Pipeline":
        forest = import_pipeline(model, import_sklearn)
    elif kind in MULTI_OUTPUT_KINDS:
        forests = [import_sklearn(e) for e in target_estimators(model)]
        forest = stack_targets(forests, kind=kind)
    elif kind in CHAIN_KINDS:
        forest = chain_of([import_sklearn(e) for e in target_estimators(model)], model)
    else:
        raise UnsupportedModelError(f"scikit-learn model {kind} is not a supported tree model")
    forest.feature_names = _feature_names(model)
    labelled = kind == "Pipeline" or forest.recode_categories
    rows = pipeline_input(model, forest) if labelled else (lambda row: row)
    leaves = (lambda row: _leaves(model, rows(row))) if _reports_leaves(model) else None
    forest.refuses = probe_refusals(forest, lambda row: model.predict(rows(row)), leaves)
    return forest


def _feature_names(model: Any) -> list[str] | None:
    names = getattr(model, "feature_names_in_", None)
    return None if names is None else [str(n) for n in names]


def _convert_tree(tree: Any, *, values: np.ndarray, features: np.ndarray | None = None) -> Tree:
    """One sklearn ``tree_`` with its leaf values (already scaled as the ensemble uses them)."""
    feature = tree.feature.astype(np.int64)
    if features is not None:  # IsolationForest / bagging: tree features index a subset
        feature = np.where(feature >= 0, features[np.maximum(feature, 0)], -1)
    missing_left = getattr(tree, "missing_go_to_left", np.zeros(tree.node_count, dtype=bool))
    return numeric_tree(
        feature=feature,
        threshold=largest_float32_at_most(tree.threshold),
        left=tree.children_left,
        right=tree.children_right,
        default_left=np.asarray(missing_left, dtype=bool),
        value=values,
        cover=tree.weighted_n_node_samples,
    )


def _classes_task(model: Any) -> tuple[str, np.ndarray | None]:
    classes = getattr(model, "classes_", None)
    if classes is None:
        return "regression", None
    return ("binary" if len(classes) == 2 else "multiclass"), np.asarray(classes)


def _import_forest(model: Any, kind: str) -> Forest:
    """Trees and forests, of one target or several (``n_outputs_ > 1``): a leaf holds
    each target's mean, or each target's class fractions side by side."""
    estimators = getattr(model, "estimators_", [model])
    if int(getattr(model, "n_outputs_", 1)) == 1:
        task, classes = _classes_task(model)
    else:
        task, classes = ("multioutput" if hasattr(model, "classes_") else "regression"), None
    trees = [_convert_tree(est.tree_, values=_leaf_values(est.tree_, model)) for est in estimators]
    n_out = trees[0].value.shape[1]
    return sklearn_forest(
        model, kind=kind, task=task, trees=trees, n_outputs=n_out,
        base_score=np.zeros(n_out),
        average=True,
        classes=classes,
        targets=[np.asarray(c).tolist() for c in model.classes_] if task == "multioutput" else [],
        objective="proportion" if task != "regression" else "mean",
        predict_returns="label" if task != "regression" else "value",
    )  # fmt: skip


def _leaf_values(tree: Any, model: Any) -> np.ndarray:
    """``[nodes, outputs]``: the target means, or the class fractions of every target
    (each target's own classes: ``tree_.value`` pads them to the largest count)."""
    value = tree.value.astype(np.float64)  # [nodes, targets, classes]
    counts = getattr(model, "n_classes_", None)
    if counts is None:
        return value[:, :, 0]
    counts = np.atleast_1d(counts)
    return np.concatenate([value[:, k, : int(c)] for k, c in enumerate(counts)], axis=1)


def _import_gradient_boosting(model: Any, kind: str) -> Forest:
    if model.init_ != "zero" and type(model.init_).__name__ not in (
        "DummyClassifier",
        "DummyRegressor",
    ):
        raise UnsupportedModelError(
            f"{kind} with a custom init estimator ({type(model.init_).__name__}) is not supported"
        )
    task, classes = _classes_task(model)
    n_out = model.estimators_.shape[1]
    # The init prediction is constant for the supported inits; read it as the model does.
    base = model._raw_predict_init(np.zeros((1, model.n_features_in_), dtype=np.float32))[0]
    trees = []
    for stage in model.estimators_:
        for k, est in enumerate(stage):
            value = np.zeros((est.tree_.node_count, n_out))
            value[:, k] = model.learning_rate * est.tree_.value[:, 0, 0]
            trees.append(_convert_tree(est.tree_, values=value))
    loss = getattr(model, "loss", "")
    if task == "regression":
        post = "identity"
    elif loss == "exponential":
        post, alpha = "sigmoid", 2.0
    else:
        post = "sigmoid" if task == "binary" else "softmax"
    forest = sklearn_forest(
        model, kind=kind, task=task, trees=trees, n_outputs=n_out,
        base_score=np.asarray(base, dtype=np.float64).reshape(n_out),
        post_transform=post,
        classes=classes,
        objective=str(loss),
        predict_returns="label" if classes is not None else "value",
    )  # fmt: skip
    if loss == "exponential":
        forest.sigmoid_alpha = alpha
    return forest


def _isolation_path_lengths(model: Any, index: int, tree: Any) -> np.ndarray:
    """Per node, what scikit-learn adds for a row ending there (its own per-tree tables
    where the fitted model keeps them, so that the sum has scikit-learn's bits)."""
    nodes = getattr(model, "_decision_path_lengths", None)
    average = getattr(model, "_average_path_length_per_tree", None)
    if nodes is None or average is None:
        depth = np.zeros(tree.node_count)
        for node in range(tree.node_count):
            if tree.children_left[node] >= 0:
                depth[tree.children_left[node]] = depth[node] + 1
                depth[tree.children_right[node]] = depth[node] + 1
        nodes, average = [depth + 1.0], [_average_path_length(tree.n_node_samples)]
        index = 0
    return np.asarray(nodes[index], dtype=np.float64) + np.asarray(average[index]) - 1.0


def _average_path_length(n_samples: np.ndarray) -> np.ndarray:
    """scikit-learn's c(n): the expected path length of an unsuccessful BST search."""
    n = np.asarray(n_samples, dtype=np.float64)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


def _import_isolation_forest(model: Any) -> Forest:
    """Leaves hold a row's path length through the tree, as IsolationForest adds it up:
    ``(nodes on the path + c(samples in the leaf)) - 1``, summed over the trees in order
    and divided once by ``n_trees * c(max_samples)`` (``isolation_norm``)."""
    trees = []
    fitted = zip(model.estimators_, model.estimators_features_, strict=True)
    for index, (est, feats) in enumerate(fitted):
        path = _isolation_path_lengths(model, index, est.tree_)
        trees.append(_convert_tree(est.tree_, values=path[:, None], features=np.asarray(feats)))
    return Forest(
        framework="sklearn",
        model_kind="IsolationForest",
        task="anomaly",
        trees=trees,
        n_features=int(model.n_features_in_),
        n_outputs=1,
        base_score=np.zeros(1),
        post_transform="isolation",
        objective="isolation",
        predict_returns="label",
        isolation_norm=len(model.estimators_)
        * float(_average_path_length(np.array([model.max_samples_]))[0]),
        isolation_offset=float(model.offset_),
        classes=np.array([-1, 1]),
    )


def _reports_leaves(model: Any) -> bool:
    """HistGradientBoosting has no ``apply`` (nor a wrapper of it)."""
    kind = type(model).__name__
    if kind == "Pipeline":
        return _reports_leaves(model.steps[-1][1])
    parts = model.estimators_ if kind in MULTI_OUTPUT_KINDS | CHAIN_KINDS else [model]
    return kind == "IsolationForest" or all(hasattr(m, "apply") for m in parts)


def _chain_leaves(chain: Any, X: np.ndarray) -> np.ndarray:
    """Each estimator's leaves, of the rows and the predictions before it, as the chain
    predicts (``predict``: labels for classifiers)."""
    passed = np.zeros((len(X), len(chain.estimators_)))
    leaves = []
    for k, estimator in enumerate(chain.estimators_):
        rows = np.hstack([np.asarray(X, dtype=np.float64), passed[:, :k]])
        leaves.append(_leaves(estimator, rows.astype(np.float32)))
        passed[:, k] = estimator.predict(rows)
    return np.hstack(leaves)


def _leaves(model: Any, X: np.ndarray) -> np.ndarray:
    if type(model).__name__ == "Pipeline":  # its final model's leaves, of the steps' output
        steps = model[:-1].transform(X)  # X as the Pipeline reads it: labels too
        return _leaves(model.steps[-1][1], steps.toarray() if hasattr(steps, "toarray") else steps)
    X = np.asarray(X, dtype=np.float32)
    if type(model).__name__ in CHAIN_KINDS:
        return _chain_leaves(model, X)
    if type(model).__name__ in MULTI_OUTPUT_KINDS:  # each target's trees, in target order
        return np.hstack([_leaves(e, X) for e in model.estimators_])
    if type(model).__name__ == "IsolationForest":  # it accepts inf: read leaves as it does
        pairs = zip(model.estimators_, model.estimators_features_, strict=True)
        return np.column_stack([e.tree_.apply(np.ascontiguousarray(X[:, f])) for e, f in pairs])
    leaves = np.asarray(model.apply(X))
    return leaves.reshape(len(X), -1).astype(np.int64)


class SklearnNative(NativeModel):
    """scikit-learn's predictor; forests predict on the calling thread unless ``n_jobs``
    says otherwise, HistGradientBoosting on OpenMP threads that follow the process."""

    def one_thread(self) -> NativeModel | None:
        kind = self.forest.model_kind
        if kind in _HGB_KINDS:
            return None
        if getattr(self.model, "n_jobs", None) in (None, 1):
            return self
        clone = copy.deepcopy(self.model)
        clone.set_params(n_jobs=1)
        return SklearnNative(clone, self.forest)

    def prepare(self, X: Any, method: str) -> Any:
        """An array as a frame of the names the model was fitted with: its columns are
        already those features in order (matched by name before), and scikit-learn
        warns on every call of a frame-fitted model asked with an array."""
        names = list(getattr(self.model, "feature_names_in_", []))
        if names and isinstance(X, np.ndarray) and X.ndim == 2 and len(names) == X.shape[1]:
            return pd.DataFrame(X, columns=names, copy=False)
        return X

    def predict_proba(self, X: Any) -> Any:
        if self.forest.task == "multioutput":  # a list: one array per target
            return [np.asarray(p) for p in self.answer("predict_proba", X)]
        return super().predict_proba(X)

    def predict_raw(self, X: Any) -> np.ndarray:
        if self.forest.task == "multioutput":  # the class fractions, side by side
            return np.hstack(self.predict_proba(X))
        if self.forest.stages:  # a chain: predictions, or probabilities of the 2nd class
            return self.call("predict_proba" if self.forest.task == "multilabel" else "predict", X)
        kind, classifier = self.forest.model_kind, self.forest.task in ("binary", "multiclass")
        if kind == "IsolationForest" or (kind in _GB_KINDS | _HGB_KINDS and classifier):
            return self.call("decision_function", X)
        if kind in _HGB_KINDS:  # regressors: the margin before the link
            return squeeze(self.call("_raw_predict", X))
        # A forest's margins are its class fractions: one column (one class) as a vector.
        return squeeze(self.call("predict_proba" if classifier else "predict", X))

    def predict_leaf(self, X: Any) -> np.ndarray:
        if not _reports_leaves(self.model):
            raise InputError(f"{self.forest.model_kind} does not report leaves")
        return _leaves(self.model, native_input(X))


class Sklearn(Framework):
    """Stored with skops; only the types in :data:`SKOPS_TRUSTED` (and skops' own
    defaults) load without ``trusted=True``."""

    name = "sklearn"
    distribution = "scikit-learn"
    artifact = "model.skops"
    suffixes = (".skops",)

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        return load_skops_bytes(path.read_bytes(), what=str(path), trusted=trusted)

    def to_forest(self, model: Any) -> Forest:
        _require_fitted(model)
        return import_sklearn(model)

    def dump(self, model: Any) -> bytes:
        import skops.io as sio

        return _canonical_zip(bytes(sio.dumps(model)))

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        model = load_skops_bytes(data, what=f"stored {kind}", trusted=trusted)
        return model, self.to_forest(model)

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return SklearnNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        if not hasattr(model, "n_features_in_"):
            return None
        try:
            model.feature_names_in_ = np.asarray(names, dtype=object)
        except AttributeError:  # a Pipeline's or a search's names are read from a step
            return None
        return model


#: Types a supported tree model's skops file references beyond skops' defaults.
SKOPS_TRUSTED = frozenset({
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.utils.validation.check_array",
    "functools.partial",  # IsolationForest's partial of check_array, listed above
    "numpy.dtype",  # a Pipeline's SimpleImputer keeps the dtype it was fitted on
    # LightGBM's scikit-learn estimators as MLflow's lightgbm flavor writes them: the
    # Booster restores itself from its model text, the format .txt files are read in.
    "lightgbm.sklearn.LGBMClassifier",
    "lightgbm.sklearn.LGBMRegressor",
    "lightgbm.sklearn.LGBMRanker",
    "lightgbm.basic.Booster",
    "collections.OrderedDict",
})  # fmt: skip


def load_skops_bytes(data: bytes, *, what: str, trusted: bool = False) -> Any:
    """A skops payload; a type outside :data:`SKOPS_TRUSTED` needs ``trusted=True``."""
    import skops.io as sio

    untrusted = sio.get_untrusted_types(data=data)
    foreign = sorted(set(untrusted) - SKOPS_TRUSTED)
    if foreign and not trusted:
        raise UntrustedModelError(
            f"{what} references types outside the tree models scoring loads: "
            f"{', '.join(foreign)}; pass trusted=True only if you trust its author"
        )
    return sio.loads(data, trusted=untrusted)


#: Where skops writes an object's ``id()``: its ``__id__`` and its array file's name.
_SKOPS_ID = re.compile(r'("__id__": |")(\d+)(\.npy")?')


def _canonical_zip(data: bytes) -> bytes:
    """skops names objects and array files by ``id()`` and stamps each archive member
    with the current time: number the ids in order of appearance and fix the times and
    the member order, so that one model always has the same bytes and one sha256."""
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        schema = src.read("schema.json").decode("utf-8")
        numbers: dict[str, str] = {}

        def renumber(match: re.Match[str]) -> str:
            head, ident, tail = match.groups()
            if head == '"' and tail is None:  # a quoted number that is no file name
                return match.group(0)
            new = numbers.setdefault(ident, str(len(numbers) + 1))
            return f"{head}{new}{tail or ''}"

        members = {"schema.json": _SKOPS_ID.sub(renumber, schema).encode("utf-8")}
        for info in src.infolist():
            name = info.filename
            if name != "schema.json":
                stem = name.removesuffix(".npy")
                members[f"{numbers.get(stem, stem)}.npy"] = src.read(info)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for name in sorted(members):
            dst.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), members[name],
                         compress_type=zipfile.ZIP_DEFLATED)  # fmt: skip
    return out.getvalue()


def _require_fitted(model: Any) -> None:
    from sklearn.utils.validation import check_is_fitted

    with translated("fitted model", f"{type(model).__name__} cannot be scored"):
        check_is_fitted(model)


FRAMEWORK = register(Sklearn())

"""ONNX-ML importer: a graph whose model is one ``ai.onnx.ml`` ``TreeEnsembleClassifier``
or ``TreeEnsembleRegressor`` (as skl2onnx, onnxmltools and other exporters write them).

What ONNX Runtime computes, made explicit in the IR:

* The input is one float tensor ``[N, features]``, read as float32 (the operator's
  input type), whose columns go by position (or by the names :meth:`Onnx.named` kept);
  or one ``[N, 1]`` float input per column joined by a ``Concat`` on axis 1 (skl2onnx's
  ``ColumnTransformer``), the inputs' names the features'.  Other input types are
  refused by name.
* Each node's mode decides its test: ``BRANCH_LEQ`` (``x <= v``) and ``BRANCH_LT``
  (``x < v``, the largest float32 below ``v``) send a true test left; ``BRANCH_GT`` and
  ``BRANCH_GTE`` the same tests with the branches swapped.  NaN fails every test and
  takes the false branch, or the true one where ``nodes_missing_value_tracks_true``
  says so.  ``BRANCH_EQ`` and ``BRANCH_NEQ`` are refused by name.
* Leaves add their weights to the output they name (``class_ids`` / ``target_ids``),
  in float32, one tree at a time in tree order from zero, then (after ``AVERAGE``'s
  division) ``base_values``: ONNX Runtime on one thread.  On several it may add
  partial sums of the trees, which can differ in the last bit (a vote of exactly one
  half then falls either way).  A regressor's ``AVERAGE`` divides by the tree count.
  ``post_transform``: ``NONE``, ``LOGISTIC`` (binary: the one score is the second
  class's, the first its complement) or ``SOFTMAX``; ``SOFTMAX_ZERO``, ``PROBIT``,
  ``MIN`` or ``MAX`` aggregation, and base values other than one per score are refused
  by name.
* The graph may carry what exporters put after the ensemble (``ZipMap``, ``Cast``,
  ``Identity`` of its outputs); any other operator is refused by name.

The native predictor is ONNX Runtime itself; its margins come from the same graph with
``post_transform`` set to ``NONE``.  It reports no leaf ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._ir import Forest, Tree, largest_float32_below
from ..errors import ModelFileError, UnsupportedModelError
from ._common import numeric_tree
from ._protocol import Framework, NativeModel, register

__all__ = ["FRAMEWORK", "import_onnx"]

_DOMAIN = "ai.onnx.ml"
_ENSEMBLES = ("TreeEnsembleClassifier", "TreeEnsembleRegressor")
#: What exporters put after the ensemble: reshaping its outputs, never its values.
_AROUND = ("ZipMap", "Cast", "Identity")
_TRUE_LEFT = {"BRANCH_LEQ": False, "BRANCH_LT": True}  # mode -> threshold lowered
_TRUE_RIGHT = {"BRANCH_GT": False, "BRANCH_GTE": True}
_POST = {"NONE": "identity", "LOGISTIC": "sigmoid", "SOFTMAX": "softmax"}
#: Where a model's feature names are kept (the graph's one tensor names no columns).
_NAMES = "feature_names"


@dataclass(frozen=True)
class _Ensemble:
    """The ensemble node's attributes, by name, what kind it is, and the graph's
    per-column inputs it reads (None: one tensor of every feature)."""

    kind: str
    attrs: dict[str, Any]
    columns: list[str] | None = None

    @property
    def classifier(self) -> bool:
        return self.kind == "TreeEnsembleClassifier"

    def get(self, name: str, default: Any = None) -> Any:
        """An attribute (``name`` or its ``_as_tensor`` twin), bytes as text."""
        value = self.attrs.get(name, self.attrs.get(f"{name}_as_tensor", default))
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode() for v in value]
        return value


def _ensemble(model: Any) -> _Ensemble:
    """The one tree ensemble of ``model``'s graph, reading the graph's one input, or its
    per-column inputs joined by one ``Concat`` (:func:`_columns`)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    ensembles = [n for n in graph.node if n.domain == _DOMAIN and n.op_type in _ENSEMBLES]
    joins = [n for n in graph.node if n.op_type == "Concat" and not n.domain]
    allowed = [*ensembles, *joins[:1]]
    others = [n for n in graph.node if n not in allowed and n.op_type not in _AROUND]
    if len(ensembles) != 1 or others:
        found = sorted({f"{n.domain or 'ai.onnx'}.{n.op_type}" for n in (others or graph.node)})
        raise UnsupportedModelError(
            f"ONNX graph {graph.name!r}: expected one ai.onnx.ml TreeEnsembleClassifier or "
            f"TreeEnsembleRegressor (with ZipMap, Cast or Identity after it); it holds "
            f"{', '.join(found)}: export the tree model alone"
        )
    node = ensembles[0]
    columns = _columns(model, node, joins[0] if joins else None)  # refuses other wiring
    attrs = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        attrs[a.name] = numpy_helper.to_array(value).tolist() if a.type == a.TENSOR else value
    return _Ensemble(node.op_type, attrs, columns)


def _inputs(model: Any) -> list[Any]:
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _columns(model: Any, node: Any, join: Any) -> list[str] | None:
    """The graph's inputs as the ensemble reads them: None for one float tensor of every
    feature; for per-column inputs (``[N, 1]`` each) joined by a ``Concat`` on axis 1
    (skl2onnx's ColumnTransformer), their names in the order joined: the features'."""
    from onnx import TensorProto, helper

    graph, inputs = model.graph, _inputs(model)
    for i in inputs:
        if i.type.tensor_type.elem_type != TensorProto.FLOAT:
            kind = TensorProto.DataType.Name(i.type.tensor_type.elem_type).lower()
            raise UnsupportedModelError(
                f"ONNX graph {graph.name!r}: input {i.name!r} is a {kind} tensor; the trees "
                "are read from float tensors (export with FloatTensorType)"
            )
    names = [i.name for i in inputs]
    if join is None and list(node.input) == names[:1] and len(names) == 1:
        return None
    axis = (
        {a.name: helper.get_attribute_value(a) for a in join.attribute}.get("axis")
        if join
        else None
    )
    widths = [[d.dim_value for d in i.type.tensor_type.shape.dim][1:] for i in inputs]
    if (join is None or list(node.input) != list(join.output) or axis not in (1, -1)
            or sorted(join.input) != sorted(names) or any(w != [1] for w in widths)):  # fmt: skip
        raise UnsupportedModelError(
            f"ONNX graph {graph.name!r}: the tree ensemble must read the graph's one input "
            f"tensor, or its one-column inputs joined by one Concat on axis 1 (it reads "
            f"{list(node.input)}; the graph's inputs are {names})"
        )
    return list(join.input)


def _n_features(model: Any, ensemble: _Ensemble) -> int:
    if ensemble.columns is not None:  # one input per column
        return len(ensemble.columns)
    shape = _inputs(model)[0].type.tensor_type.shape.dim
    if len(shape) == 2 and shape[1].dim_value > 0:
        return int(shape[1].dim_value)
    return int(max(ensemble.get("nodes_featureids"), default=-1)) + 1


def _feature_names(model: Any, ensemble: _Ensemble, n_features: int) -> list[str] | None:
    """The per-column inputs' names, or the names :meth:`Onnx.named` kept in the model's
    metadata, if any."""
    if ensemble.columns is not None:
        return ensemble.columns
    kept = {p.key: p.value for p in model.metadata_props}
    if _NAMES not in kept:
        return None
    names = json.loads(kept[_NAMES])
    if not isinstance(names, list) or len(names) != n_features:
        raise UnsupportedModelError(
            f"ONNX model metadata {_NAMES!r} names {len(names)} features, its input has "
            f"{n_features}"
        )
    return [str(n) for n in names]


def import_onnx(model: Any) -> Forest:
    """An ONNX ModelProto's tree ensemble as a Forest (see the module docstring)."""
    ensemble = _ensemble(model)
    post = ensemble.get("post_transform", "NONE") or "NONE"
    if post not in _POST:
        raise UnsupportedModelError(
            f"ONNX {ensemble.kind} post_transform {post!r} is not supported "
            f"(supported: {', '.join(_POST)})"
        )
    aggregate = ensemble.get("aggregate_function", "SUM") or "SUM"
    if aggregate not in ("SUM", "AVERAGE"):
        raise UnsupportedModelError(
            f"ONNX {ensemble.kind} aggregate_function {aggregate!r} is not supported "
            "(supported: SUM, AVERAGE)"
        )
    prefix = "class" if ensemble.classifier else "target"
    classes = ensemble.get("classlabels_int64s") or ensemble.get("classlabels_strings")
    outputs = sorted(set(ensemble.get(f"{prefix}_ids")))
    n_out = len(outputs) if ensemble.classifier else int(ensemble.get("n_targets", 1) or 1)
    if ensemble.classifier:
        binary = len(classes) == 2 and n_out == 1
        task = "binary" if binary else "multiclass"
        if binary and outputs != [0]:
            raise UnsupportedModelError(
                f"ONNX TreeEnsembleClassifier of two classes scores class id {outputs[0]}: "
                "ONNX Runtime reads a binary score from class id 0"
            )
        if not binary and n_out != len(classes):
            raise UnsupportedModelError(
                f"ONNX TreeEnsembleClassifier scores {n_out} of its {len(classes)} classes"
            )
    else:
        task = "regression"
    trees = _trees(ensemble, prefix, n_out)
    base = np.asarray(ensemble.get("base_values") or [0.0] * n_out, dtype=np.float64)
    if len(base) != n_out:  # ONNX Runtime then scores each class on its own, not a pair
        raise UnsupportedModelError(
            f"ONNX {ensemble.kind}: {len(base)} base values for {n_out} scores; export "
            "one base value per score"
        )
    n_features = _n_features(model, ensemble)
    return Forest(
        framework="onnx",
        model_kind=f"onnx.{ensemble.kind}",
        task=task,  # type: ignore[arg-type]
        trees=trees,
        n_features=n_features,
        feature_names=_feature_names(model, ensemble, n_features),
        n_outputs=n_out,
        base_score=base.reshape(n_out),
        base_last=True,  # ONNX Runtime adds the trees from zero, then the base values
        post_transform=_POST[post],  # type: ignore[arg-type]
        average=aggregate == "AVERAGE",
        classes=None if classes is None else np.asarray(classes),
        objective=post,
        input_dtype="float32",
        accumulate_dtype="float32",
        predict_returns="label" if ensemble.classifier else "value",
    )


def _trees(ensemble: _Ensemble, prefix: str, n_out: int) -> list[Tree]:
    """Each tree of the ensemble, its nodes in their ids' order (the root first)."""
    tree_ids = ensemble.get("nodes_treeids")
    columns = {name: ensemble.get(f"nodes_{name}") for name in (
        "nodeids", "modes", "featureids", "values", "truenodeids", "falsenodeids")}  # fmt: skip
    tracks = ensemble.get("nodes_missing_value_tracks_true") or [0] * len(tree_ids)
    weights: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for t, n, k, w in zip(ensemble.get(f"{prefix}_treeids"), ensemble.get(f"{prefix}_nodeids"),
                          ensemble.get(f"{prefix}_ids"), ensemble.get(f"{prefix}_weights"),
                          strict=True):  # fmt: skip
        weights.setdefault((t, n), []).append((k, w))
    outputs = sorted({k for pairs in weights.values() for k, _ in pairs})
    column_of = {k: i for i, k in enumerate(outputs)} if len(outputs) == n_out else None
    rows: dict[int, list[int]] = {}
    for i, t in enumerate(tree_ids):
        rows.setdefault(t, []).append(i)
    return [_tree(t, rows[t], columns, tracks, weights, n_out, column_of) for t in sorted(rows)]


def _tree(
    tree_id: int, rows: list[int], columns: dict[str, list[Any]], tracks: list[int],
    weights: dict[tuple[int, int], list[tuple[int, float]]], n_out: int,
    column_of: dict[int, int] | None,
) -> Tree:  # fmt: skip
    ids = [columns["nodeids"][i] for i in rows]
    index = {node: j for j, node in enumerate(sorted(ids))}
    if 0 not in index:  # the root: ONNX numbers a tree's nodes from 0
        raise UnsupportedModelError(f"ONNX tree {tree_id} has no node 0 (its root)")
    n = len(ids)
    feature, threshold = np.zeros(n, np.int64), np.zeros(n)
    left, right = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    default_left = np.zeros(n, dtype=bool)
    value = np.zeros((n, n_out))
    for i in rows:
        j, mode = index[columns["nodeids"][i]], columns["modes"][i]
        if mode == "LEAF":
            for k, w in weights.get((tree_id, columns["nodeids"][i]), []):
                value[j, column_of[k] if column_of is not None else k] += w
            continue
        true, false = index[columns["truenodeids"][i]], index[columns["falsenodeids"][i]]
        v = np.float32(columns["values"][i])
        if mode in _TRUE_LEFT:
            lowered, left[j], right[j] = _TRUE_LEFT[mode], true, false
        elif mode in _TRUE_RIGHT:
            lowered, left[j], right[j] = _TRUE_RIGHT[mode], false, true
        else:
            raise UnsupportedModelError(
                f"ONNX tree {tree_id} node {columns['nodeids'][i]}: mode {mode!r} is not "
                "supported (BRANCH_LEQ, BRANCH_LT, BRANCH_GT, BRANCH_GTE)"
            )
        threshold[j] = float(largest_float32_below(np.array([v]))[0]) if lowered else float(v)
        feature[j] = int(columns["featureids"][i])
        nan_true = bool(tracks[i])  # NaN fails every test: the false branch, unless tracked
        default_left[j] = nan_true if mode in _TRUE_LEFT else not nan_true
    return numeric_tree(feature=feature, threshold=threshold, left=left, right=right,
                        default_left=default_left, value=value)  # fmt: skip


class OnnxNative(NativeModel):
    """ONNX Runtime on the graph as it is (probabilities, predictions) and with its
    ``post_transform`` set to ``NONE`` (margins)."""

    def __init__(self, model: Any, forest: Forest):
        super().__init__(model, forest)
        self._sessions: dict[bool, Any] = {}

    def _session(self, raw: bool) -> Any:
        if raw not in self._sessions:
            self._sessions[raw] = _session(_raw_graph(self.model) if raw else self.model)
        return self._sessions[raw]

    def _run(self, X: Any, *, raw: bool) -> list[Any]:
        session = self._session(raw)
        rows = np.asarray(X, dtype=np.float32).reshape(-1, self.forest.n_features)
        names = [i.name for i in session.get_inputs()]
        if len(names) == 1:
            feed = {names[0]: rows}
        else:  # one column per input, in the features' order (the Concat's)
            order = self.forest.feature_names or names
            feed = {name: rows[:, [j]] for j, name in enumerate(order)}
        return list(self.asked(lambda: session.run(None, feed)))

    def _scores(self, X: Any, *, raw: bool) -> np.ndarray:
        """The ensemble's score output: probabilities or values, ``[N, outputs]``."""
        outputs = self._run(X, raw=raw)
        scores = outputs[-1] if self.forest.task != "regression" else outputs[0]
        if isinstance(scores, list):  # ZipMap's list of {label: probability}
            labels = list(self.forest.classes) if self.forest.classes is not None else []
            scores = np.array([[row[c] for c in labels] for row in scores], dtype=np.float32)
        scores = np.asarray(scores)
        if scores.ndim == 2:
            return scores
        classes = self.forest.classes  # an empty ZipMap list: the width is the model's
        width = len(classes) if classes is not None else self.forest.n_outputs
        return scores.reshape(-1, width)

    def predict(self, X: Any) -> np.ndarray:
        if self.forest.task == "regression":
            values = self._scores(X, raw=False)
            return values[:, 0] if self.forest.n_outputs == 1 else values
        return np.asarray(self._run(X, raw=False)[0])

    def predict_proba(self, X: Any) -> np.ndarray:
        return self._scores(X, raw=False)

    def predict_raw(self, X: Any) -> np.ndarray:
        scores = self._scores(X, raw=True)
        if self.forest.task == "binary":
            return scores[:, -1]
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_leaf(self, X: Any) -> np.ndarray:
        raise UnsupportedModelError("ONNX Runtime reports no leaf ids")


def _session(model: Any) -> Any:
    try:
        import onnxruntime
    except ImportError:
        from ..errors import DependencyError

        raise DependencyError(
            "ONNX models are checked against ONNX Runtime: pip install 'scoring[onnx]'"
        ) from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])  # fmt: skip


def _raw_graph(model: Any) -> Any:
    """``model`` with its ensemble's ``post_transform`` set to ``NONE``."""
    from onnx import ModelProto, helper

    raw = ModelProto()
    raw.CopyFrom(model)
    for node in raw.graph.node:
        if node.domain == _DOMAIN and node.op_type in _ENSEMBLES:
            kept = [a for a in node.attribute if a.name != "post_transform"]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute("post_transform", "NONE")])
    return raw


class Onnx(Framework):
    """Stored as the ONNX file itself (protobuf: nothing executes when it is read)."""

    name = "onnx"
    distribution = "onnx"
    artifact = "model.onnx"
    suffixes = (".onnx",)
    hummingbird = False

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        import onnx
        from google.protobuf.message import DecodeError

        try:
            return onnx.load_model(str(path), load_external_data=False)
        except DecodeError as exc:
            raise ModelFileError(
                f"cannot read ONNX model file {str(path)!r}: {exc}; it is damaged or not an "
                "ONNX model: export it again"
            ) from None

    def to_forest(self, model: Any) -> Forest:
        """The forest, without ONNX Runtime: it refuses no value (NaN and +-inf take
        their branches, ``tests/test_onnx.py`` holds it), so nothing is asked of it."""
        return import_onnx(model)

    def dump(self, model: Any) -> bytes:
        return bytes(model.SerializeToString(deterministic=True))

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        import onnx

        model = onnx.load_model_from_string(data)
        return model, self.to_forest(model)

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return OnnxNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        """``model`` with ``names`` in its own metadata (``metadata_props``
        ``feature_names``, a JSON list), which the import reads back."""
        from onnx import ModelProto

        copy = ModelProto()
        copy.CopyFrom(model)
        kept = [p for p in copy.metadata_props if p.key != _NAMES]
        del copy.metadata_props[:]
        copy.metadata_props.extend(kept)
        entry = copy.metadata_props.add()
        entry.key, entry.value = _NAMES, json.dumps(list(names))
        return copy


FRAMEWORK = register(Onnx())

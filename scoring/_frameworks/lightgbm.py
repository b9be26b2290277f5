"""LightGBM importer, from the model text format (thresholds written at full precision).

LightGBM reads features as float64 and goes left iff ``x <= t``.  Per node missing type:
None reads NaN as 0.0 (folded into ``default_left``); Zero sends NaN and ``|x| <= 1e-35``
to the default child; NaN sends NaN there.  A categorical node holds a bitset of the
categories that go left; the value is truncated to an integer and NaN, negatives and
categories past the bitset go right.  Leaves sum in float64; ``boosting=rf`` averages
over iterations (each iteration holds one tree per class), not over every tree.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .._ir import SPLIT_CATEGORICAL, Forest, Tree
from ..errors import ModelFileError, UnsupportedModelError
from ._common import numeric_tree, probe_refusals
from ._protocol import Framework, NativeModel, register

__all__ = ["FRAMEWORK", "forest_from_text", "import_lightgbm", "model_text"]

_BOOSTER = "lightgbm.Booster"

_CATEGORICAL_MASK = 1
_DEFAULT_LEFT_MASK = 2
_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2

_IDENTITY = {
    "regression", "regression_l1", "huber", "fair", "quantile", "mape",
    "lambdarank", "rank_xendcg", "custom",
}  # fmt: skip
_EXP = {"poisson", "gamma", "tweedie"}


def import_lightgbm(model: Any) -> Forest:
    """Import an LGBMModel (sklearn API) or a ``lightgbm.Booster``."""
    import lightgbm

    is_booster = isinstance(model, lightgbm.Booster)
    kind = _BOOSTER if is_booster else type(model).__name__
    forest = forest_from_text(model_text(model), kind=kind)
    # A regressor may learn cross-entropy too: it predicts the probability, not labels.
    if hasattr(model, "classes_") and forest.task in ("binary", "multiclass"):
        forest.classes = np.asarray(model.classes_)
        forest.predict_returns = "label"
    booster = model if is_booster else model.booster_
    forest.refuses = probe_refusals(
        forest, booster.predict, lambda row: booster.predict(row, pred_leaf=True)
    )
    return forest


def model_text(model: Any) -> str:
    """The model text of the iterations ``predict`` uses (the best one, if recorded)."""
    import lightgbm

    is_booster = isinstance(model, lightgbm.Booster)
    booster = model if is_booster else model.booster_
    best = booster.best_iteration if is_booster else getattr(model, "best_iteration_", None)
    text: str = booster.model_to_string(num_iteration=best if best and best > 0 else None)
    return text


def forest_from_text(text: str, *, kind: str) -> Forest:
    header, blocks, tail = _split_model_text(text)
    objective = header.get("objective", "regression").split()
    n_outputs = int(header.get("num_tree_per_iteration", header.get("num_class", "1")))
    trees = [_convert_tree(block, i % n_outputs, n_outputs) for i, block in enumerate(blocks)]
    names = header.get("feature_names", "").split()
    forest = Forest(
        framework="lightgbm",
        model_kind=kind,
        task=_task(objective[0]),  # type: ignore[arg-type]
        trees=trees,
        n_features=int(header["max_feature_idx"]) + 1,
        n_outputs=n_outputs,
        base_score=np.zeros(n_outputs),
        average="average_output" in header,
        average_over=max(len(trees) // n_outputs, 1),
        feature_names=names or None,
        objective=" ".join(objective),
        input_dtype="float64",
        zero_snap=True,
    )
    _set_post_transform(forest, objective)
    _record_categories(forest, tail)
    return forest


def complete_model_text(data: bytes, *, name: str) -> str:
    """The text of a LightGBM model file, refused only where LightGBM itself cannot load it.

    LightGBM's own parser kills the process (SIGSEGV or SIGABRT) on a file it cannot
    read, so its reading is followed here first: with a ``tree_sizes`` header, tree
    ``i`` starts where the sizes before it end and the header counts the trees; without
    one, trees follow each other until a line that starts none.  Every tree must hold
    each of its arrays whole, and a parameters section must end on a whole line.  What LightGBM
    reads is taken: older writers' headers (no ``tree_sizes``, no ``end of trees``), no
    newline at the end, and Windows line ends (which LightGBM's offsets would miss)."""
    try:
        text = data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        reason = f"LightGBM model file {name!r} is not UTF-8 text; {_SAVE_AGAIN}"
        raise ModelFileError(reason) from exc
    head, found, rest = text.partition("\nTree=")
    blocks = _tree_blocks("Tree=" + rest if found else "", _key_values(head).get("tree_sizes"),
                          name=name)  # fmt: skip
    for i, block in enumerate(blocks):
        problem = _incomplete_tree(block)
        if problem:
            raise ModelFileError(f"LightGBM model file {name!r}: tree {i} {problem}; {_SAVE_AGAIN}")
    _, params, after = rest.partition("\nparameters:")
    last = after.rstrip("\n").rpartition("\n")[2]
    if params and "\nend of parameters" not in after and not re.fullmatch(r"\[.*\]|", last):
        raise ModelFileError(
            f"LightGBM model file {name!r}: its parameters are cut short; {_SAVE_AGAIN}"
        )
    return text


_SAVE_AGAIN = "the file is incomplete or corrupt; save the model again (booster.save_model)"


def _tree_blocks(body: str, sizes: str | None, *, name: str) -> list[str]:
    """The text from where each tree starts, found as LightGBM finds it (``body``
    starts at ``Tree=0``; a tree's text ends at its first blank line)."""
    if sizes is None:
        return [b for b in re.split(r"^(?=Tree=)", body, flags=re.MULTILINE) if b]
    blocks, at = [], 0
    for i, size in enumerate(int(s) for s in sizes.split()):
        if not body.startswith("Tree=", at):
            raise ModelFileError(
                f"LightGBM model file {name!r}: tree {i} is not where its header "
                f"(tree_sizes) says; {_SAVE_AGAIN}"
            )
        blocks.append(body[at:])  # LightGBM reads on to the tree's end, whatever the size
        at += size
    return blocks


#: A tree's arrays and their lengths in internal nodes (``num_leaves - 1``) or leaves.
_INNER = ("split_feature", "split_gain", "threshold", "decision_type", "left_child",
          "right_child", "internal_value", "internal_weight", "internal_count")  # fmt: skip
_LEAF = ("leaf_value", "leaf_weight", "leaf_count")


def _incomplete_tree(block: str) -> str | None:
    """What a tree's text lacks (an array cut short, a field missing), or None."""
    text, end, _ = block.partition("\n\n")
    if not end:  # LightGBM reads on past the end of the file for a tree's last line
        return "is not followed by a blank line (cut short)"
    fields = _key_values(text)
    try:
        n_leaves, n_cat = int(fields["num_leaves"]), int(fields.get("num_cat", "0"))
    except (KeyError, ValueError):
        return "has no valid num_leaves"
    if n_leaves == 1:  # a constant tree: LightGBM reads its one leaf_value, nothing else
        return None if len(fields.get("leaf_value", "").split()) == 1 else "has no leaf_value"
    wanted = {k: n_leaves for k in _LEAF} | {k: n_leaves - 1 for k in _INNER}
    required = {"leaf_value"} | ({"split_feature", "threshold", "decision_type", "left_child",
                                 "right_child"} if n_leaves > 1 else set())  # fmt: skip
    if n_cat > 0:
        bounds = fields.get("cat_boundaries", "").split()
        wanted["cat_boundaries"] = n_cat + 1
        wanted["cat_threshold"] = int(bounds[-1]) if bounds and bounds[-1].isdigit() else -1
        required |= {"cat_boundaries", "cat_threshold"}
    for key, count in wanted.items():
        present = key in fields or key in required
        if present and len(fields.get(key, "").split()) != count:
            return f"has {key} cut short"
    return None


def _split_model_text(text: str) -> tuple[dict[str, str], list[dict[str, str]], str]:
    """Header key/values, one key/value dict per tree, and the trailing JSON section."""
    head_text, _, rest = text.partition("\nTree=")
    header = _key_values(head_text)
    if "average_output" in head_text.split():
        header["average_output"] = "1"
    body, _, tail = ("Tree=" + rest).partition("end of trees")
    blocks = [_key_values(chunk) for chunk in body.split("Tree=")[1:]]
    return header, blocks, tail


def _key_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _task(objective: str) -> str:
    if objective in ("binary", "cross_entropy", "xentropy"):
        return "binary"
    if objective in ("multiclass", "softmax", "multiclassova", "multiclass_ova", "ova", "ovr"):
        return "multiclass"
    if objective in ("lambdarank", "rank_xendcg"):
        return "ranking"
    return "regression"


def _set_post_transform(forest: Forest, objective: list[str]) -> None:
    name = objective[0]
    options = dict(o.split(":", 1) for o in objective[1:] if ":" in o)
    if name == "binary":
        forest.post_transform = "sigmoid"
        forest.sigmoid_alpha = float(options.get("sigmoid", 1.0))
    elif name in ("cross_entropy", "xentropy"):
        forest.post_transform = "sigmoid"
    elif name in ("multiclass", "softmax"):
        forest.post_transform = "softmax"
    elif name in ("multiclassova", "multiclass_ova", "ova", "ovr"):
        forest.post_transform = "ova_sigmoid"
        forest.sigmoid_alpha = float(options.get("sigmoid", 1.0))
    elif name in _EXP:
        forest.post_transform = "exp"
    elif name in ("cross_entropy_lambda", "xentlambda"):
        forest.post_transform = "softplus"  # the intensity: log(1 + exp(raw))
    elif name in _IDENTITY:
        forest.post_transform = "square" if "sqrt" in objective else "identity"
    else:
        raise UnsupportedModelError(f"LightGBM objective {name!r} is not supported")


def _record_categories(forest: Forest, tail: str) -> None:
    """Categorical columns, and the pandas categories the sklearn API recorded for them.

    ``pandas_categorical`` lists the categories of each category-dtype column of the
    training frame in order; those columns are the ``categorical_feature`` parameter.
    """
    params = dict(re.findall(r"^\[(\w+): ?(.*)\]$", tail, flags=re.MULTILINE))
    columns = [int(c) for c in params.get("categorical_feature", "").split(",") if c.strip()]
    used = {int(t.feature[n]) for t in forest.trees for n in np.flatnonzero(t.split_kind == 1)}
    forest.categorical_features = sorted(set(columns) | used)
    _, _, raw = tail.partition("pandas_categorical:")
    cats = json.loads(raw.strip() or "null")
    if cats and len(cats) == len(columns):
        forest.categories = {col: list(c) for col, c in zip(columns, cats, strict=True)}


def _array(block: dict[str, str], key: str, dtype: type) -> np.ndarray:
    text = block.get(key, "")
    return np.array(text.split(), dtype=dtype) if text else np.zeros(0, dtype=dtype)


def _convert_tree(block: dict[str, str], output: int, n_outputs: int) -> Tree:
    if block.get("is_linear", "0") != "0":
        raise UnsupportedModelError("LightGBM linear trees (linear_tree=True) are not supported")
    leaf_value = _array(block, "leaf_value", np.float64)
    n_inner = int(block["num_leaves"]) - 1
    n = n_inner + leaf_value.size

    def node_of(child: np.ndarray) -> np.ndarray:  # a negative child ~j is leaf j
        return np.where(child < 0, n_inner + (-child - 1), child)

    decision = _array(block, "decision_type", np.int64)
    threshold = _array(block, "threshold", np.float64)
    missing = (decision >> 2) & 3
    default_left = (decision & _DEFAULT_LEFT_MASK) > 0
    # Missing type None reads NaN as 0.0: it goes where 0.0 goes.
    default_left = np.where(missing == _MISSING_NONE, threshold >= 0.0, default_left)
    pad = np.zeros(leaf_value.size)
    value = np.zeros((n, n_outputs))
    value[n_inner:, output] = leaf_value
    tree = numeric_tree(
        feature=np.concatenate([_array(block, "split_feature", np.int64), pad]).astype(np.int64),
        threshold=np.concatenate([threshold, pad]),
        left=np.concatenate([node_of(_array(block, "left_child", np.int64)), pad - 1]),
        right=np.concatenate([node_of(_array(block, "right_child", np.int64)), pad - 1]),
        default_left=np.concatenate([default_left, pad.astype(bool)]),
        value=value,
        leaf_id=np.concatenate([np.full(n_inner, -1), np.arange(leaf_value.size)]),
        cover=_counts(block, n_inner, leaf_value.size),
    )
    tree.missing_zero = np.concatenate([missing == _MISSING_ZERO, pad.astype(bool)])
    _add_categorical_splits(tree, block, decision, threshold)
    return tree


def _counts(block: dict[str, str], n_inner: int, n_leaves: int) -> np.ndarray | None:
    """Training rows per node (inner nodes, then leaves), what LightGBM's TreeSHAP reads."""
    inner = _array(block, "internal_count", np.float64)
    leaves = _array(block, "leaf_count", np.float64)
    if inner.size != n_inner or leaves.size != n_leaves:
        return None  # a model written without counts
    return np.concatenate([inner, leaves])


def _add_categorical_splits(
    tree: Tree, block: dict[str, str], decision: np.ndarray, threshold: np.ndarray
) -> None:
    cat_nodes = np.flatnonzero(decision & _CATEGORICAL_MASK)
    if not cat_nodes.size:
        return
    bounds = _array(block, "cat_boundaries", np.int64)
    words = _array(block, "cat_threshold", np.uint64).astype(np.uint32)
    tree.cat_unknown_left = np.zeros(tree.n_nodes, dtype=bool)
    for node in cat_nodes:
        i = int(threshold[node])
        left = words[bounds[i] : bounds[i + 1]]
        tree.split_kind[node] = SPLIT_CATEGORICAL
        tree.default_left[node] = False  # NaN goes right on categorical nodes
        tree.missing_zero[node] = False  # type: ignore[index]
        tree.cat_left[int(node)] = left.copy()
        tree.cat_known[int(node)] = np.full(left.size, 0xFFFFFFFF, dtype=np.uint32)


class LightGBMNative(NativeModel):
    """LightGBM's predictor; a Booster has no thread setting of its own per call."""

    has_contributions = True

    def one_thread(self) -> NativeModel | None:
        if not self.sklearn_api:
            return None
        clone = copy.deepcopy(self.model)
        clone.set_params(n_jobs=1)
        return LightGBMNative(clone, self.forest)

    def predict_raw(self, X: Any) -> np.ndarray:
        raw = self.call("predict", X, raw_score=True)
        # boosting=rf: raw_score is the sum; the link is applied to the average.
        return raw / self._iterations if self.forest.average else raw

    @property
    def _iterations(self) -> int:
        """What boosting=rf divides each class's sum by: its tree count."""
        return self.forest.average_over or self.forest.n_trees

    def predict_leaf(self, X: Any) -> np.ndarray:
        return self.call("predict", X, pred_leaf=True).astype(np.int64)

    def predict_contributions(self, X: Any) -> np.ndarray:
        """``pred_contrib`` (each output's features and bias side by side), per output."""
        values = self.call("predict", X, pred_contrib=True)
        values = values / self._iterations if self.forest.average else values
        return values.reshape(len(values), self.forest.n_outputs, -1)


class LightGBM(Framework):
    """Stored as the model text of the iterations ``predict`` uses; the sklearn wrappers
    come back as a Booster whose class labels are restored from the recorded schema."""

    name = "lightgbm"
    distribution = "lightgbm"
    artifact = "model.txt"
    suffixes = (".txt",)

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        import lightgbm

        text = complete_model_text(path.read_bytes(), name=str(path))
        return lightgbm.Booster(model_str=text)

    def to_forest(self, model: Any) -> Forest:
        return import_lightgbm(model)

    def dump(self, model: Any) -> bytes:
        return model_text(model).encode("utf-8")

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        import lightgbm

        model = lightgbm.Booster(model_str=data.decode("utf-8"))
        forest = import_lightgbm(model)
        forest.model_kind = kind
        if kind != _BOOSTER and classes is not None:
            forest.classes = np.asarray(classes)
            forest.predict_returns = "label"
        return model, forest

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return LightGBMNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        import lightgbm

        if isinstance(model, lightgbm.Booster):
            return _renamed_booster(model, names)
        if isinstance(model, lightgbm.LGBMModel):  # its names are its booster's
            model._Booster = _renamed_booster(model.booster_, names)
            return model
        return None


def _renamed_booster(booster: Any, names: list[str]) -> Any:
    """A booster whose model text names its features ``names`` (the text is where
    LightGBM keeps them; it has no setter)."""
    import lightgbm

    lines = booster.model_to_string().splitlines()
    lines = [f"feature_names={' '.join(names)}" if line.startswith("feature_names=") else line
             for line in lines]  # fmt: skip
    return lightgbm.Booster(model_str="\n".join(lines) + "\n")


FRAMEWORK = register(LightGBM())

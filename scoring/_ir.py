"""Forest IR: the plain-array form every importer produces and every compiler reads.

Framework semantics are made explicit here so that the compilers need no knowledge
of XGBoost, LightGBM or scikit-learn:

* Numeric test: go left iff ``x <= threshold``, with ``x`` read at the precision the
  native predictor uses (:attr:`Forest.input_dtype`).  Strict ``<`` tests (XGBoost) are
  normalised at import to the largest float32 below the threshold.
* Inputs: with :attr:`Forest.zero_snap` (LightGBM) ``|x| <= 1e-35`` is read as 0.0.
* Missing: NaN (and, for LightGBM's Zero missing type, ``|x| <= 1e-35``) takes
  :attr:`Tree.default_left`.  LightGBM's None type (NaN read as 0.0) is folded in.
* Categorical: ``c`` is truncated to an integer; if it is a valid category
  (``0 <= c < 32 * words`` and in the known bitset) it goes left iff its bit is set in
  the left bitset; otherwise it takes :attr:`Tree.cat_unknown_left`.
* Encoded (:attr:`Forest.encoded`, a Pipeline's encoder): the input value is a label,
  matched exactly against :attr:`Forest.categories` to its code; any other value reads as
  code -1 (the unknown branch of every split) or is refused with the encoder's reason.
* Leaves carry a value vector of length :attr:`Forest.n_outputs`; the model output is
  ``base_score`` plus each tree's leaf value, added one tree at a time in tree order
  and rounded to :attr:`Forest.accumulate_dtype` after each addition, as the frameworks
  add them (when ``average``: from zero, then divided by the tree count; when
  ``base_last``: from zero, then ``scale * sum + base_score``), then
  :attr:`Forest.post_transform`.
* Values the native predictor refuses (:attr:`Forest.refuses`) are refused before any
  tree sees them, with the native predictor's reason; everything else is scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "Forest",
    "PostTransform",
    "REFUSABLE",
    "Task",
    "Tree",
    "ZERO_THRESHOLD",
    "largest_float32_at_most",
    "largest_float32_below",
]

#: LightGBM's kZeroThreshold, a float32 1e-35 read as double: a value this close to zero
#: counts as zero (and its dense-row reader turns it into exactly 0.0).
ZERO_THRESHOLD = float(np.float32(1e-35))

PostTransform = Literal[
    "identity",
    "sigmoid",
    "softmax",
    "exp",
    "ova_sigmoid",
    "isolation",
    "square",
    "hinge",
    "softplus",
]
#: ``multioutput``: a classifier of several targets at once (scikit-learn trees fitted
#: on a 2-D y); its outputs are each target's class probabilities side by side.
#: ``multilabel``: several yes/no labels (XGBoost on a 2-D 0/1 y), one probability each.
Task = Literal[
    "binary", "multiclass", "multioutput", "multilabel", "regression", "ranking", "anomaly"
]

#: Kinds of value a native predictor may refuse: NaN, and +-inf (with, for float32
#: readers, finite float64 values past float32's range) in numeric, in categorical or in
#: filled (:attr:`Forest.fill_missing`) columns.  The same kinds after ``leaf_`` are what
#: it refuses when giving leaf ids, which can differ (XGBoost's DMatrix refuses inf;
#: GradientBoosting's apply takes NaN).
REFUSABLE = ("nan", "inf", "categorical_inf", "filled_inf")

SPLIT_NUMERIC = 0
SPLIT_CATEGORICAL = 1


@dataclass
class Tree:
    """One decision tree as parallel node arrays (node 0 is the root).

    Leaves have ``feature == -1`` and ``left == right == -1``.
    """

    feature: np.ndarray  # int32 [n_nodes]
    threshold: np.ndarray  # float64 [n_nodes]: go left iff x <= threshold
    left: np.ndarray  # int32 [n_nodes]
    right: np.ndarray  # int32 [n_nodes]
    default_left: np.ndarray  # bool [n_nodes]: where NaN (missing) goes
    split_kind: np.ndarray  # int8 [n_nodes]: SPLIT_NUMERIC or SPLIT_CATEGORICAL
    value: np.ndarray  # float64 [n_nodes, n_outputs]: leaf values (0 at inner nodes)
    leaf_id: np.ndarray  # int64 [n_nodes]: the native predictor's id for each leaf
    missing_zero: np.ndarray | None = None  # bool [n_nodes]: |x| <= 1e-35 is missing
    cat_left: dict[int, np.ndarray] = field(default_factory=dict)  # node -> uint32 words
    cat_known: dict[int, np.ndarray] = field(default_factory=dict)  # node -> uint32 words
    cat_unknown_left: np.ndarray | None = None  # bool [n_nodes]
    #: The training weight that reached each node (XGBoost's hessian sum, LightGBM's and
    #: scikit-learn's sample counts), as the framework's own TreeSHAP reads it: the
    #: share of a node's cover each child holds is where an absent feature goes.
    cover: np.ndarray | None = None  # float64 [n_nodes]

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def is_leaf(self) -> np.ndarray:
        return np.asarray(self.left < 0)

    def depth(self) -> int:
        """Edges on the longest root-to-leaf path (level by level from the root)."""
        depth, level = -1, np.zeros(1, dtype=np.int64)
        while level.size:
            depth += 1
            inner = level[self.left[level] >= 0]
            level = np.concatenate([self.left[inner], self.right[inner]])
        return depth


@dataclass
class Forest:
    """A whole tree ensemble with its framework's semantics made explicit."""

    framework: str  # the name of its module in scoring._frameworks
    model_kind: str  # e.g. "XGBClassifier", "lightgbm.Booster", "RandomForestRegressor"
    task: Task
    trees: list[Tree]
    n_features: int
    n_outputs: int
    base_score: np.ndarray  # float64 [n_outputs], added in margin space
    post_transform: PostTransform = "identity"
    sigmoid_alpha: float = 1.0
    average: bool = False
    #: The margin is ``scale * (sum of the trees from zero) + base_score`` (CatBoost),
    #: not the trees added to the base score.
    base_last: bool = False
    scale: float = 1.0
    #: With ``average``: the count each output's sum is divided by (default: every
    #: tree; a stack of forests, one per target: each target's own tree count).
    average_over: int | None = None
    feature_names: list[str] | None = None
    categorical_features: list[int] = field(default_factory=list)
    #: Per categorical feature: the category labels in code order, when the model knows.
    categories: dict[int, list[object]] = field(default_factory=dict)
    #: Numeric inputs are raw category values to recode to codes by exact match, as
    #: scikit-learn's HGB OrdinalEncoder does (unknown -> missing); else they are codes.
    recode_categories: bool = False
    #: A named input holding a category label the model never saw is refused (XGBoost 3).
    reject_unknown_categories: bool = False
    classes: np.ndarray | None = None
    #: ``multioutput``: each target's class labels, in the order of the outputs.
    targets: list[list[object]] = field(default_factory=list)
    objective: str = ""
    #: Precision at which the native predictor compares features against thresholds.
    input_dtype: Literal["float32", "float64"] = "float32"
    accumulate_dtype: Literal["float32", "float64"] = "float64"
    missing_value: float | None = None  # a value read as missing besides NaN
    #: Per input column: what a missing value reads as (a Pipeline's SimpleImputer).
    fill_missing: dict[int, float] = field(default_factory=dict)
    #: Input columns a Pipeline drops before the model: whatever they hold is accepted.
    dropped: list[int] = field(default_factory=list)
    #: Input columns a Pipeline's OrdinalEncoder or OneHotEncoder reads (also in
    #: :attr:`categorical_features`): their values are labels, matched exactly against
    #: :attr:`categories` (NaN, None and +-inf are labels where the encoder answers them);
    #: any other value reads as code -1.  Per column, what the encoder refuses: a kind
    #: ("unknown", "nan", "none", "inf", "-inf") -> its reason.
    encoded: dict[int, dict[str, str]] = field(default_factory=dict)
    #: A chain (scikit-learn's RegressorChain/ClassifierChain): one Forest per target,
    #: run in order, each reading the input columns and then what the ones before it
    #: predicted (labels for classifiers); :attr:`trees` holds all of theirs, in order.
    stages: list[Forest] = field(default_factory=list)
    #: The target each stage predicts (the chain's ``order_``).
    stage_targets: list[int] = field(default_factory=list)
    #: LightGBM: inputs with |x| <= ZERO_THRESHOLD become 0.0 before any tree sees them.
    zero_snap: bool = False
    #: What the native predictor refuses, asked of the predictor itself at import: a
    #: kind of value (see :data:`REFUSABLE`) -> the predictor's own reason.
    refuses: dict[str, str] = field(default_factory=dict)
    #: XGBoost calls a category invalid when c < 0 before truncation, LightGBM after.
    cat_check_before_trunc: bool = False
    #: Predict of a classifier returns class labels; a Booster returns transformed values.
    predict_returns: Literal["label", "value", "class_index"] = "value"
    #: ``predict``'s labels come as a ``[rows, 1]`` column (CatBoost's multiclass).
    labels_as_column: bool = False
    #: IsolationForest: decision_function = -2 ** (-mean_path / norm) - offset.
    isolation_norm: float = 1.0
    isolation_offset: float = 0.0

    #: The registered reference (``churn@3``) a registry version was compiled from:
    #: errors name the model by it (see :attr:`described`), as its user knows it.
    registered_as: str | None = None

    @property
    def described(self) -> str:
        """The model as errors name it: ``model 'churn@3' (XGBClassifier)``, or its class."""
        if self.registered_as is None:
            return self.model_kind
        return f"model '{self.registered_as}' ({self.model_kind})"

    @property
    def n_trees(self) -> int:
        return len(self.trees)

    @property
    def max_depth(self) -> int:
        return max((t.depth() for t in self.trees), default=0)

    @property
    def multi_target(self) -> bool:
        """Fitted on several targets (or labels) at once."""
        several = self.task == "regression" and self.n_outputs > 1
        return several or self.task in ("multioutput", "multilabel")

    @property
    def accepts_nan(self) -> bool:
        return "nan" not in self.refuses

    def column_groups(self) -> dict[str, list[int]]:
        """Input columns by what native may treat differently: numeric, categorical, and
        filled by a Pipeline's imputer (a Pipeline's encoded columns are in none: what
        their encoder refuses is :attr:`encoded`)."""
        categorical = set(self.categorical_features) - set(self.encoded)
        filled = set(self.fill_missing)
        unread = set(self.categorical_features) | filled | set(self.dropped)
        numeric = [j for j in range(self.n_features) if j not in unread]
        return {"": numeric, "categorical_": sorted(categorical), "filled_": sorted(filled)}

    def accepts_inf(self, feature: int) -> bool:
        """Whether native scores +-inf (and float32 overflow) in this feature's column."""
        groups = self.column_groups().items()
        return all(f"{g}inf" not in self.refuses for g, cols in groups if feature in cols)

    @property
    def has_categorical(self) -> bool:
        return any(t.cat_left for t in self.trees)

    @property
    def has_missing_zero(self) -> bool:
        return any(t.missing_zero is not None and t.missing_zero.any() for t in self.trees)


def largest_float32_at_most(t: np.ndarray) -> np.ndarray:
    """The largest float32 ``<= t`` (as float64), so ``x32 <= t  <=>  x32 <= result``.

    Rounding ``t`` to the nearest float32 instead would send a value lying between the
    two to the wrong branch.
    """
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore"):
        t32 = t.astype(np.float32)
    above = t32.astype(np.float64) > t
    t32[above] = np.nextafter(t32[above], np.float32(-np.inf))
    return t32.astype(np.float64)


def largest_float32_below(t: np.ndarray) -> np.ndarray:
    """For a strict float32 test ``x < t``: the largest float32 strictly below ``t``."""
    t32 = np.asarray(t, dtype=np.float32)
    return np.nextafter(t32, np.float32(-np.inf)).astype(np.float64)

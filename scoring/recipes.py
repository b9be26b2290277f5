"""Reference model recipes: the one list the demo, the tests and the benchmarks build from.

A :class:`Recipe` names a framework, an estimator, a task and a size; ``build()`` makes
reproducible training data for it (with NaN where the estimator accepts missing values,
and integer-coded categorical columns where it has categorical features) and fits it.

Kept inside the package (a top-level ``models`` package in site-packages would shadow a
user's own ``models`` module); the product itself never imports it but for the demo.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "BENCHMARK_RECIPES",
    "DEMO_RECIPE",
    "EXCHANGE_RECIPES",
    "EXPLAIN_RECIPES",
    "GPU_RECIPES",
    "SMALL_RECIPES",
    "Recipe",
    "make_data",
]


@dataclass(frozen=True)
class Recipe:
    name: str
    #: sklearn | xgboost | lightgbm | catboost (an optional extra) | onnx (a model of
    #: ``params["source"]``'s exported) | spark (Spark ML, fitted in a local session)
    framework: str
    estimator: str  # class name, or "Booster" for the native training API
    # binary | multiclass | one_class | multioutput (two targets) | multilabel (three) |
    # regression | multi_regression (two targets) | poisson | ranking | anomaly
    task: str
    n_trees: int = 10
    depth: int = 4
    n_features: int = 6
    n_rows: int = 600
    missing: bool = True  # put NaN in the training data
    categorical: bool = False  # column 0 is an integer-coded category
    frame: bool = False  # train on a pandas DataFrame (named / category columns)
    #: With ``frame``: column 0 holds text labels ("c0".."c11", some missing) rather than
    #: a pandas category column, for a Pipeline's encoder.
    text: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    #: Columns 1 and 2 rounded to whole numbers: XGBoost's histogram then splits at 0,
    #: stored as the float32 denormal -1.4e-45 (a build that flushes denormals to zero
    #: sends every 0 the other way), and rows hold -0.0.
    rounded: bool = False
    #: A scikit-learn meta-estimator the model is fitted through (see :func:`_wrapped`).
    wrapper: str = ""

    @property
    def available(self) -> bool:
        """Whether its framework is installed (CatBoost is an optional extra; Spark needs
        a Java runtime, ONNX recipes their exporters)."""
        needs = _NEEDS.get(self.framework, (self.framework,))
        if not all(importlib.util.find_spec(module) is not None for module in needs):
            return False
        java = bool(shutil.which("java") or os.environ.get("JAVA_HOME"))
        return self.framework != "spark" or java

    def data(self, *, seed: int = 0) -> tuple[Any, np.ndarray]:
        return make_data(self, seed=seed)

    def build(self, *, seed: int = 0) -> Any:
        """Train the model on reproducible data."""
        X, y = self.data(seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _FIT[self.framework](self, X, y, seed)


def make_data(
    recipe: Recipe, *, seed: int = 0, n_rows: int | None = None
) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, f = n_rows or recipe.n_rows, recipe.n_features
    X = rng.normal(size=(n, f))
    if recipe.categorical:
        X[:, 0] = rng.integers(0, 12, n)
    if recipe.rounded:
        X[:, 1:3] = np.round(X[:, 1:3])
    signal = (
        X[:, 1] + 0.5 * X[:, 2] ** 2 + (np.isin(X[:, 0], [1, 4, 7]) if recipe.categorical else 0)
    )
    if recipe.missing:
        X[rng.random(X.shape) < 0.08] = np.nan
    signal = np.nan_to_num(signal) + 0.3 * rng.normal(size=n)
    y = _target(recipe.task, signal, rng)
    if recipe.frame:
        frame = pd.DataFrame(X, columns=[f"feat_{i}" for i in range(f)])
        if recipe.categorical and recipe.text:
            frame["feat_0"] = np.array([f"c{c:.0f}" for c in X[:, 0]], dtype=object)
            frame.loc[np.isnan(X[:, 0]), "feat_0"] = np.nan
        elif recipe.categorical:
            frame["feat_0"] = pd.Categorical(X[:, 0])
        return frame, y
    return X, y


def _target(task: str, signal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if task == "binary":
        return (signal > np.quantile(signal, 0.8)).astype(int)  # imbalanced on purpose
    if task == "one_class":  # a classifier fitted on a segment where one class is left
        return np.zeros(len(signal), dtype=int)
    if task == "multiclass":
        return np.digitize(signal, np.quantile(signal, [0.3, 0.7]))
    if task == "multioutput":  # two targets: a binary one, and one of three classes
        second = np.array([10, 20, 30])[np.digitize(-signal, np.quantile(signal, [0.3, 0.7]))]
        return np.column_stack([signal > np.median(signal), second]).astype(int)
    if task == "multilabel":  # three yes/no labels
        return np.column_stack([signal > 0, signal > 1, np.sin(signal) > 0]).astype(int)
    if task == "multi_regression":
        return np.column_stack([3.0 * signal, signal**2 - rng.normal(size=len(signal))])
    if task in ("poisson", "gamma"):
        counts = rng.poisson(np.exp(np.clip(signal, -3, 3) / 2)).astype(float)
        return counts + 0.5 if task == "gamma" else counts  # gamma needs y > 0
    if task == "ranking":
        return np.digitize(signal, np.quantile(signal, [0.5, 0.8, 0.95]))
    return 3.0 * signal


def _fit_sklearn(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    from sklearn import ensemble, tree

    cls = getattr(ensemble, r.estimator, None) or getattr(tree, r.estimator)
    params: dict[str, Any] = {"random_state": seed, **r.params}
    if "Tree" not in r.estimator or "Trees" in r.estimator:
        key = "max_iter" if r.estimator.startswith("Hist") else "n_estimators"
        params.setdefault(key, r.n_trees)
    if r.estimator != "IsolationForest":
        params.setdefault("max_depth", r.depth)
    if r.categorical and r.estimator.startswith("Hist"):
        params.setdefault("categorical_features", "from_dtype" if r.frame else [0])
    model = _wrapped(r, cls(**params))
    return model.fit(X) if r.task == "anomaly" else model.fit(X, y)


def _wrapped(r: Recipe, model: Any) -> Any:
    """``model`` inside the recipe's wrapper: a search over its tree count (refit on
    the best), one clone per target, or a Pipeline behind a passthrough step."""
    if not r.wrapper:
        return model
    from sklearn import model_selection, multioutput, pipeline

    if r.wrapper == "Pipeline":
        return pipeline.Pipeline([("columns", "passthrough"), ("model", model)])
    if r.wrapper == "ImputingPipeline":  # columns filled, dropped and reordered
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer

        prep = ColumnTransformer([("fill", SimpleImputer(strategy="median"), [3, 1]),
                                  ("skip", "drop", [5])], remainder="passthrough")  # fmt: skip
        return pipeline.Pipeline([("prep", prep), ("model", model)])
    if r.wrapper in ("OneHotPipeline", "OrdinalPipeline"):
        return pipeline.Pipeline([("prep", _encoding_steps(r.wrapper)), ("model", model)])
    if r.wrapper == "Imputer":
        from sklearn.impute import SimpleImputer

        return pipeline.Pipeline([("fill", SimpleImputer()), ("model", model)])
    if r.wrapper.endswith("CV"):
        grid = {"n_estimators": [max(1, r.n_trees // 2), r.n_trees]}
        search = getattr(model_selection, r.wrapper)
        extra = {"n_iter": 2, "random_state": 0} if r.wrapper.startswith("Randomized") else {}
        return search(model, grid, cv=2, **extra)
    return getattr(multioutput, r.wrapper)(model)


def _encoding_steps(wrapper: str) -> Any:
    """Text labels imputed then one-hot encoded (rare labels merged), a numeric column
    ordinal-encoded (unseen: -1, missing: -2), one dropped, the rest passed through; or
    text labels ordinal-encoded (unseen refused) then filled, the numbers imputed."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    if wrapper == "OneHotPipeline":
        text = Pipeline([("fill", SimpleImputer(strategy="most_frequent")),
                         ("onehot", OneHotEncoder(handle_unknown="infrequent_if_exist",
                                                  min_frequency=45))])  # fmt: skip
        codes = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1,
                               encoded_missing_value=-2)  # fmt: skip
        parts = [("text", text, ["feat_0"]), ("codes", codes, ["feat_4"]),
                 ("skip", "drop", ["feat_5"])]  # fmt: skip
        return ColumnTransformer(parts, remainder="passthrough")
    text = Pipeline([("codes", OrdinalEncoder()),
                     ("fill", SimpleImputer(strategy="constant", fill_value=-1))])  # fmt: skip
    numbers = ["feat_1", "feat_2", "feat_3", "feat_4", "feat_5"]
    return ColumnTransformer([("text", text, ["feat_0"]), ("numbers", SimpleImputer(), numbers)])


def _fit_xgboost(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    import xgboost as xgb

    params: dict[str, Any] = {"max_depth": r.depth, "random_state": seed, **r.params}
    if r.estimator == "Booster":
        types = ["c" if r.categorical and i == 0 else "q" for i in range(r.n_features)]
        train = xgb.DMatrix(X, y, feature_types=types, enable_categorical=r.categorical)
        return xgb.train(params, train, num_boost_round=r.n_trees)
    params.update(n_estimators=r.n_trees, enable_categorical=r.categorical)
    model = _wrapped(r, getattr(xgb, r.estimator)(**params))
    if r.task == "ranking":
        return model.fit(X, y, qid=np.repeat(np.arange(len(y) // 20 + 1), 20)[: len(y)])
    return model.fit(X, y)


def _fit_lightgbm(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    import lightgbm as lgb

    params: dict[str, Any] = {
        "max_depth": r.depth, "num_leaves": min(2**r.depth, 64), "random_state": seed,
        "verbose": -1, "min_child_samples": 5, **r.params,
    }  # fmt: skip
    cat: Any = [0] if r.categorical and not r.frame else "auto"
    if r.estimator == "Booster":
        train = lgb.Dataset(X, y, categorical_feature=cat)
        return lgb.train(params, train, num_boost_round=r.n_trees)
    model = _wrapped(r, getattr(lgb, r.estimator)(n_estimators=r.n_trees, **params))
    if r.task == "ranking":
        return model.fit(X, y, group=[20] * (len(y) // 20), categorical_feature=cat)
    return model.fit(X, y) if r.wrapper else model.fit(X, y, categorical_feature=cat)


def _fit_catboost(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    import catboost as cb

    params: dict[str, Any] = {"iterations": r.n_trees, "depth": r.depth, "random_seed": seed,
                              "verbose": 0, "thread_count": 1, "allow_writing_files": False,
                              **r.params}  # fmt: skip
    model = getattr(cb, r.estimator)(**params)
    if r.task == "ranking":
        return model.fit(X, y, group_id=np.repeat(np.arange(len(y) // 20 + 1), 20)[: len(y)])
    return model.fit(X, y)


def _fit_onnx(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    """The recipe's model fitted by its ``source`` framework, exported to ONNX-ML
    (skl2onnx for scikit-learn, onnxmltools for LightGBM and XGBoost)."""
    params = {k: v for k, v in r.params.items() if k != "source"}
    source = replace(r, framework=r.params["source"], params=params)
    model = _FIT[source.framework](source, X, y, seed)
    rows = np.asarray(X, dtype=np.float32)
    if source.framework == "sklearn":
        import skl2onnx

        return skl2onnx.to_onnx(model, rows[:1], options={"zipmap": False})
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    typed = [("X", FloatTensorType([None, r.n_features]))]
    convert = getattr(onnxmltools, f"convert_{source.framework}")
    return convert(model, initial_types=typed)


def _fit_spark(r: Recipe, X: Any, y: np.ndarray, seed: int) -> Any:
    """A Spark ML model fitted in a local session: on a VectorAssembler's vector of the
    columns, or (``frame``) as a PipelineModel of the assembler and the model."""
    import pyarrow as pa
    from pyspark.ml import Pipeline, classification, regression
    from pyspark.ml.feature import VectorAssembler

    from .spark import local_session

    names = list(X.columns) if r.frame else [f"f{j}" for j in range(r.n_features)]
    rows = np.asarray(X, dtype=np.float64)
    table = pa.table({**{n: rows[:, j] for j, n in enumerate(names)}, "label": y.astype(float)})
    frame = local_session("local[1]").createDataFrame(table)
    module = classification if r.estimator.endswith("Classifier") else regression
    params: dict[str, Any] = {"maxDepth": r.depth, "seed": seed, **r.params}
    if not r.estimator.startswith("DecisionTree"):
        params["maxIter" if r.estimator.startswith("GBT") else "numTrees"] = r.n_trees
    estimator = getattr(module, r.estimator)(**params)
    assembler = VectorAssembler(inputCols=names, outputCol="features", handleInvalid="keep")
    if r.frame:
        return Pipeline(stages=[assembler, estimator]).fit(frame)
    return estimator.fit(assembler.transform(frame))


#: What a framework's recipes need installed, where that is not the framework's name.
_NEEDS = {"onnx": ("onnx", "onnxruntime", "skl2onnx", "onnxmltools"), "spark": ("pyspark",)}
_FIT = {"sklearn": _fit_sklearn, "xgboost": _fit_xgboost, "lightgbm": _fit_lightgbm,
        "catboost": _fit_catboost, "onnx": _fit_onnx, "spark": _fit_spark}  # fmt: skip


def _r(name: str, framework: str, estimator: str, task: str, **kw: Any) -> Recipe:
    return Recipe(name=name, framework=framework, estimator=estimator, task=task, **kw)


#: Small models covering every supported kind; the parity suite runs over all of them.
SMALL_RECIPES: list[Recipe] = [
    _r("sk_dt_clf", "sklearn", "DecisionTreeClassifier", "binary", depth=6),
    _r("sk_dt_reg", "sklearn", "DecisionTreeRegressor", "regression", depth=6),
    _r("sk_rf_clf", "sklearn", "RandomForestClassifier", "multiclass"),
    _r("sk_rf_reg", "sklearn", "RandomForestRegressor", "regression"),
    _r("sk_et_clf", "sklearn", "ExtraTreesClassifier", "binary"),
    _r("sk_et_reg", "sklearn", "ExtraTreesRegressor", "regression"),
    _r("sk_rf_one", "sklearn", "RandomForestClassifier", "one_class"),
    _r("sk_dt_multi_clf", "sklearn", "DecisionTreeClassifier", "multioutput", depth=6),
    _r("sk_et_multi_clf", "sklearn", "ExtraTreesClassifier", "multioutput"),
    _r("sk_rf_multi_reg", "sklearn", "RandomForestRegressor", "multi_regression"),
    _r("sk_mo_rf_reg", "sklearn", "RandomForestRegressor", "multi_regression",
       wrapper="MultiOutputRegressor"),
    _r("sk_mo_hgb_reg", "sklearn", "HistGradientBoostingRegressor", "multi_regression",
       wrapper="MultiOutputRegressor"),
    _r("sk_mo_et_clf", "sklearn", "ExtraTreesClassifier", "multioutput",
       wrapper="MultiOutputClassifier"),
    _r("sk_grid_rf", "sklearn", "RandomForestClassifier", "binary", wrapper="GridSearchCV"),
    _r("sk_pipe_rf", "sklearn", "RandomForestClassifier", "binary", wrapper="ImputingPipeline"),
    _r("sk_pipe_onehot", "sklearn", "RandomForestClassifier", "multiclass", categorical=True,
       frame=True, text=True, wrapper="OneHotPipeline"),
    _r("sk_pipe_ordinal", "sklearn", "GradientBoostingRegressor", "regression", depth=3,
       categorical=True, frame=True, text=True, wrapper="OrdinalPipeline"),
    _r("sk_chain_reg", "sklearn", "RandomForestRegressor", "multi_regression", missing=False,
       wrapper="RegressorChain"),
    _r("sk_chain_clf", "sklearn", "ExtraTreesClassifier", "multilabel", missing=False,
       wrapper="ClassifierChain"),
    _r("sk_pipe_gb", "sklearn", "GradientBoostingRegressor", "regression", depth=3,
       wrapper="Imputer"),
    _r("sk_gb_clf", "sklearn", "GradientBoostingClassifier", "binary", missing=False, depth=3),
    _r("sk_gb_multi", "sklearn", "GradientBoostingClassifier", "multiclass",
       missing=False, depth=3),
    _r("sk_gb_reg", "sklearn", "GradientBoostingRegressor", "regression", missing=False, depth=3),
    _r("sk_hgb_clf", "sklearn", "HistGradientBoostingClassifier", "binary", categorical=True),
    _r("sk_hgb_multi", "sklearn", "HistGradientBoostingClassifier", "multiclass"),
    _r("sk_hgb_frame", "sklearn", "HistGradientBoostingClassifier", "binary",
       categorical=True, frame=True),
    _r("sk_hgb_poisson", "sklearn", "HistGradientBoostingRegressor", "poisson",
       params={"loss": "poisson"}),
    _r("sk_iforest", "sklearn", "IsolationForest", "anomaly", params={"max_samples": 128}),
    _r("xgb_clf", "xgboost", "XGBClassifier", "binary"),
    _r("xgb_multi", "xgboost", "XGBClassifier", "multiclass"),
    _r("xgb_zero_split", "xgboost", "XGBClassifier", "binary", rounded=True),
    _r("xgb_one", "xgboost", "XGBClassifier", "one_class"),
    _r("xgb_softmax", "xgboost", "Booster", "multiclass",
       params={"objective": "multi:softmax", "num_class": 3}),
    _r("xgb_reg", "xgboost", "XGBRegressor", "regression"),
    _r("xgb_multi_reg", "xgboost", "XGBRegressor", "multi_regression"),
    _r("xgb_multilabel", "xgboost", "XGBClassifier", "multilabel"),
    _r("xgb_search", "xgboost", "XGBClassifier", "binary", wrapper="RandomizedSearchCV"),
    _r("xgb_vector_leaves", "xgboost", "XGBRegressor", "multi_regression",
       params={"multi_strategy": "multi_output_tree", "tree_method": "hist"}),
    _r("xgb_poisson", "xgboost", "XGBRegressor", "poisson", params={"objective": "count:poisson"}),
    _r("xgb_gamma", "xgboost", "XGBRegressor", "gamma",
       params={"objective": "reg:gamma"}),
    _r("xgb_tweedie", "xgboost", "XGBRegressor", "poisson", params={"objective": "reg:tweedie"}),
    _r("xgb_rank", "xgboost", "XGBRanker", "ranking", params={"objective": "rank:ndcg"}),
    _r("xgb_booster_cat", "xgboost", "Booster", "binary", categorical=True,
       params={"objective": "binary:logistic", "max_cat_to_onehot": 1}),
    _r("xgb_missing_value", "xgboost", "XGBRegressor", "regression", missing=False,
       params={"missing": 0.0}),
    _r("xgb_dart", "xgboost", "XGBClassifier", "binary",
       params={"booster": "dart", "rate_drop": 0.3}),
    _r("lgb_clf", "lightgbm", "LGBMClassifier", "binary"),
    _r("lgb_multi", "lightgbm", "LGBMClassifier", "multiclass"),
    _r("lgb_ova", "lightgbm", "LGBMClassifier", "multiclass",
       params={"objective": "multiclassova"}),
    _r("lgb_reg", "lightgbm", "LGBMRegressor", "regression"),
    _r("lgb_pipeline", "lightgbm", "LGBMRegressor", "regression", wrapper="Pipeline"),
    _r("lgb_l1", "lightgbm", "LGBMRegressor", "regression", params={"objective": "regression_l1"}),
    _r("lgb_poisson", "lightgbm", "LGBMRegressor", "poisson", params={"objective": "poisson"}),
    _r("lgb_gamma", "lightgbm", "LGBMRegressor", "gamma", params={"objective": "gamma"}),
    _r("lgb_tweedie", "lightgbm", "LGBMRegressor", "poisson", params={"objective": "tweedie"}),
    _r("lgb_xentropy", "lightgbm", "Booster", "binary", params={"objective": "cross_entropy"}),
    _r("lgb_rank", "lightgbm", "LGBMRanker", "ranking"),
    _r("lgb_rf", "lightgbm", "LGBMRegressor", "regression",
       params={"boosting_type": "rf", "bagging_freq": 1, "bagging_fraction": 0.6}),
    _r("lgb_zero_missing", "lightgbm", "LGBMRegressor", "regression",
       params={"zero_as_missing": True}),
    _r("lgb_no_missing", "lightgbm", "LGBMRegressor", "regression", params={"use_missing": False}),
    _r("lgb_cat", "lightgbm", "LGBMClassifier", "binary", categorical=True,
       params={"min_data_per_group": 5, "cat_smooth": 1.0}),
    _r("lgb_cat_frame", "lightgbm", "LGBMClassifier", "multiclass", categorical=True, frame=True,
       params={"min_data_per_group": 5, "cat_smooth": 1.0}),
    _r("cb_clf", "catboost", "CatBoostClassifier", "binary"),
    _r("cb_nan_max", "catboost", "CatBoostClassifier", "binary", depth=6,
       params={"nan_mode": "Max"}),
    _r("cb_multi", "catboost", "CatBoostClassifier", "multiclass",
       params={"loss_function": "MultiClass"}),
    _r("cb_reg", "catboost", "CatBoostRegressor", "regression", n_trees=30),
    _r("cb_poisson", "catboost", "CatBoostRegressor", "poisson",
       params={"loss_function": "Poisson"}),
    _r("cb_multi_reg", "catboost", "CatBoostRegressor", "multi_regression",
       params={"loss_function": "MultiRMSE"}),
    _r("cb_rank", "catboost", "CatBoostRanker", "ranking"),
    _r("cb_frame", "catboost", "CatBoostRegressor", "regression", frame=True),
    _r("lgb_booster", "lightgbm", "Booster", "binary",
       params={"objective": "binary", "sigmoid": 0.7}),
]  # fmt: skip

#: Models that come from another system's format: ONNX-ML exports (held to ONNX Runtime)
#: and Spark ML models (held to Spark's transform, in a JVM).  The parity suite runs over
#: them beside the small recipes; the suites that read a framework's own Python API (its
#: predict, its contributions) do not.
EXCHANGE_RECIPES: list[Recipe] = [
    _r("onnx_rf_clf", "onnx", "RandomForestClassifier", "multiclass", params={"source": "sklearn"}),
    _r("onnx_lgb_clf", "onnx", "LGBMClassifier", "binary", params={"source": "lightgbm"}),
    _r("onnx_xgb_reg", "onnx", "XGBRegressor", "regression", params={"source": "xgboost"}),
    _r("spark_gbt_clf", "spark", "GBTClassifier", "binary", missing=False, frame=True),
    _r("spark_rf_clf", "spark", "RandomForestClassifier", "multiclass", missing=False),
    _r("spark_dt_reg", "spark", "DecisionTreeRegressor", "regression", missing=False, depth=6),
]  # fmt: skip

#: The Hummingbird benchmark shape: 500 trees of depth 8 on 28 features.
BENCHMARK_RECIPES: list[Recipe] = [
    _r("xgb_500x8", "xgboost", "XGBClassifier", "binary", n_trees=500, depth=8,
       n_features=28, n_rows=20_000),
    _r("lgb_500x256", "lightgbm", "LGBMClassifier", "binary", n_trees=500, depth=8,
       n_features=28, n_rows=20_000, params={"num_leaves": 256, "max_depth": -1}),
    _r("rf_500x8", "sklearn", "RandomForestClassifier", "binary", n_trees=500, depth=8,
       n_features=28, n_rows=20_000, params={"n_jobs": -1}),
]  # fmt: skip

#: The GPU suite's shapes: the two above, and a random forest of deep trees.
GPU_RECIPES: list[Recipe] = [
    *BENCHMARK_RECIPES[:2],
    _r("rf_100x12", "sklearn", "RandomForestClassifier", "binary", n_trees=100, depth=12,
       n_features=28, n_rows=20_000, params={"n_jobs": -1}),
]  # fmt: skip

#: The contributions benchmark's shapes (TreeSHAP: benchmarks/explain_throughput.py).
EXPLAIN_RECIPES: list[Recipe] = [
    _r("xgb_100x6", "xgboost", "XGBClassifier", "binary", n_trees=100, depth=6,
       n_features=28, n_rows=20_000),
    *BENCHMARK_RECIPES[:2],
]  # fmt: skip

#: The model the demo scores.
DEMO_RECIPE = BENCHMARK_RECIPES[0]

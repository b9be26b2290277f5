"""Every categorical mode, through a model object, its saved file and Parquet.

scikit-learn's HistGradientBoosting: ``categorical_features="from_dtype"`` with pandas
categories of text, integers and floats, an index list, a boolean mask and a list of
column names (integer codes).  LightGBM: pandas category columns of text and integers
(the sklearn API and a Booster trained on a frame).  The rows scored hold labels the
model never saw, missing values, and category columns whose categories come in another
order than in training (a user's frame is built from its own data): every backend is
held to the framework's own predictor on the same frame.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scoring

ROWS = 400
LABELS = {"text": ["red", "green", "blue", "cyan", "grey"], "int": [3, 7, 11, 20, 42],
          "float": [0.5, 1.5, 2.5, 3.5, 4.5]}  # fmt: skip
UNSEEN = {"text": "mauve", "int": 99, "float": 9.5}


def _frame(kind: str, *, seed: int, unseen: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """``cat`` holds labels (some missing; with ``unseen``, some never seen in training),
    as a pandas category built from the values themselves; two numeric columns."""
    rng = np.random.default_rng(seed)
    labels = LABELS[kind] + ([UNSEEN[kind]] if unseen else [])
    picked = np.array(labels, dtype=object)[rng.integers(0, len(labels), ROWS)]
    picked[rng.random(ROWS) < 0.1] = None
    x = rng.normal(size=(ROWS, 2))
    x[rng.random(x.shape) < 0.05] = np.nan
    frame = pd.DataFrame({"num0": x[:, 0], "cat": pd.Categorical(picked), "num1": x[:, 1]})
    hot = np.isin(picked, LABELS[kind][1:3])
    y = (np.nan_to_num(x[:, 0]) + 1.5 * hot > 0.7).astype(int)
    return frame, y


def _codes(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The category column as numbers (its labels for int/float, codes for text)."""
    out = frame.copy()
    values = frame["cat"].astype(object)
    if kind == "text":
        out["cat"] = [LABELS[kind].index(v) if v in LABELS[kind] else np.nan for v in values]
    else:
        out["cat"] = pd.to_numeric(values.where(values.notna(), np.nan)).astype(float)
    return out


def _hgb(mode: str, kind: str) -> tuple[Any, pd.DataFrame, pd.DataFrame]:
    """The fitted model, what it scores (labels never seen included) and as what."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    train, y = _frame(kind, seed=0, unseen=False)
    score, _ = _frame(kind, seed=1, unseen=True)
    if mode != "from_dtype":
        train, score = _codes(train, kind), _codes(score, kind)
    spec: Any = {"from_dtype": "from_dtype", "index": [1], "mask": [False, True, False],
                 "names": ["cat"]}[mode]  # fmt: skip
    model = HistGradientBoostingClassifier(max_iter=8, categorical_features=spec, random_state=0)
    return model.fit(train, y), score, train


def _lightgbm(api: str, kind: str) -> tuple[Any, pd.DataFrame, pd.DataFrame]:
    import lightgbm as lgb

    train, y = _frame(kind, seed=0, unseen=False)
    score, _ = _frame(kind, seed=1, unseen=True)
    params = {"num_leaves": 7, "min_data_per_group": 5, "cat_smooth": 1.0, "verbose": -1,
              "min_data_in_leaf": 5}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if api == "Booster":
            model = lgb.train({"objective": "binary", **params}, lgb.Dataset(train, y), 8)
        else:
            model = lgb.LGBMClassifier(n_estimators=8, **params).fit(train, y)
    return model, score, train


CASES = [
    ("hgb", mode, kind)
    for mode in ("from_dtype", "index", "mask", "names")
    for kind in ("text", "int", "float")
    if not (mode != "from_dtype" and kind == "text")
]
CASES += [("hgb", "index", "text")]  # text labels as codes 0..4: an index list reads codes
CASES += [("lightgbm", api, kind) for api in ("sklearn", "Booster") for kind in ("text", "int")]


def _built(framework: str, mode: str, kind: str) -> tuple[Any, pd.DataFrame, pd.DataFrame]:
    return (_hgb if framework == "hgb" else _lightgbm)(mode, kind)


def _native(model: Any, frame: pd.DataFrame) -> np.ndarray:
    if hasattr(model, "predict_proba"):
        return np.asarray(model.predict_proba(frame))[:, 1]
    return np.asarray(model.predict(frame))


def _shuffled_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """The same labels, their categories listed in reverse (codes differ from training)."""
    out = frame.copy()
    if isinstance(out["cat"].dtype, pd.CategoricalDtype):
        out["cat"] = out["cat"].cat.reorder_categories(out["cat"].cat.categories[::-1])
    return out


@pytest.mark.parametrize(("framework", "mode", "kind"), CASES)
@pytest.mark.parametrize("backend", ["tensor", "native"])
def test_the_model_object_scores_every_label_as_native(
    framework: str, mode: str, kind: str, backend: str
) -> None:
    model, score, _ = _built(framework, mode, kind)
    cm = scoring.compile(model, backend=backend, device="cpu")
    reference = _native(model, score)
    for frame in (score, _shuffled_categories(score)):
        ours = cm.predict_proba(frame)[:, 1]
        np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)


def _saved(model: Any, framework: str, path: Path) -> Path:
    if framework == "lightgbm":
        booster = model if not hasattr(model, "booster_") else model.booster_
        booster.save_model(path / "model.txt")
        return path / "model.txt"
    import skops.io

    skops.io.dump(model, path / "model.skops")
    return path / "model.skops"


@pytest.mark.parametrize(("framework", "mode", "kind"), CASES)
def test_the_saved_file_and_parquet_score_every_label_as_native(
    tmp_path: Path, framework: str, mode: str, kind: str
) -> None:
    """The saved file compiled, then a Parquet file (the category column as Arrow
    dictionary, or as plain text/numbers) scored through it: the object's answers."""
    model, score, _ = _built(framework, mode, kind)
    reference = _native(model, score)
    path = _saved(model, framework, tmp_path)
    cm = scoring.compile(path, backend="tensor", device="cpu", trusted=True)
    np.testing.assert_allclose(cm.predict_proba(score)[:, 1], reference, rtol=0, atol=1e-9)
    for dictionary in (True, False):
        table = pa.Table.from_pandas(score, preserve_index=False)
        column = table.column("cat")
        if pa.types.is_dictionary(column.type) and not dictionary:
            column = column.cast(column.type.value_type)
        elif dictionary and not pa.types.is_dictionary(column.type):
            column = column.dictionary_encode()
        table = table.set_column(1, "cat", column)
        source = tmp_path / f"in-{dictionary}"
        source.mkdir()
        pq.write_table(table.append_column("id", pa.array(np.arange(ROWS))), source / "a.parquet")
        out = tmp_path / f"out-{dictionary}"
        scoring.score_parquet(source, out, cm, keep=["id"], progress=False)
        scored = pq.read_table(out).to_pandas().sort_values("id")
        np.testing.assert_allclose(scored["probability"], reference, rtol=0, atol=1e-9)


def _hgb_text_categories() -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(4)
    X = pd.DataFrame({"x": rng.normal(size=600),
                      "c": pd.Categorical(rng.choice(["a", "b", "c"], 600))})  # fmt: skip
    y = ((X.x > 0) ^ (X.c == "b")).astype(int)
    return HistGradientBoostingClassifier(max_iter=8, categorical_features="from_dtype").fit(X, y)


#: What a user may pass for a column trained on text categories, by kind.
REFUSALS: dict[str, Any] = {
    "labels": lambda: pd.DataFrame({"x": [0.1, -1.0], "c": pd.Categorical(["a", "c"])}),
    "unseen label": lambda: pd.DataFrame({"x": [0.1], "c": pd.Categorical(["z"])}),
    "labels as text": lambda: pd.DataFrame({"x": [0.1], "c": ["b"]}),
    "mixed text and number": lambda: pd.DataFrame({"x": [0.1, 0.2],
                                                   "c": pd.Series(["a", 1], dtype=object)}),
    "integer codes": lambda: pd.DataFrame({"x": [0.1, 0.2], "c": [0, 1]}),
    "negative code": lambda: pd.DataFrame({"x": [0.1], "c": [-1]}),
    "huge code": lambda: pd.DataFrame({"x": [0.1], "c": [10**12]}),
    "float codes": lambda: pd.DataFrame({"x": [0.1, 0.2], "c": [0.0, np.nan]}),
    "float past float32": lambda: pd.DataFrame({"x": [0.1], "c": [1e300]}),
    "all missing": lambda: pd.DataFrame({"x": [0.1], "c": [np.nan]}),
    "numpy numbers": lambda: np.array([[0.1, 0.0]]),
    "numpy text": lambda: np.array([[0.1, "a"]], dtype=object),
    "feature past float32": lambda: pd.DataFrame({"x": [1e300], "c": pd.Categorical(["a"])}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_hgb_from_dtype_refuses_what_scikit_learn_refuses(case: str) -> None:
    """Every kind of value in a text-categorical column: the same numbers as scikit-learn,
    or, where it refuses, a one-line InputError naming the column (never a TypeError)."""
    from scoring.errors import InputError

    model, X = _hgb_text_categories(), REFUSALS[case]()
    try:
        expected = model.predict_proba(X)
    except (TypeError, ValueError):
        expected = None
    for backend in ("native", "tensor"):
        cm = scoring.compile(model, backend=backend, device="cpu")
        if expected is None:
            with pytest.raises(InputError, match="'c'"):
                cm.predict_proba(X)
        else:
            np.testing.assert_allclose(cm.predict_proba(X), expected, rtol=1e-6, atol=1e-9)

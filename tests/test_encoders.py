"""Pipelines whose OrdinalEncoder or OneHotEncoder steps read text or numeric labels,
compiled into the trees: every option that changes what an encoder outputs, held to the
Pipeline's own predictions value by value (known labels, labels never seen, None, NaN,
+-inf, numbers in a text column), stored in the registry and scored from Parquet.  The
recipes ``sk_pipe_onehot`` and ``sk_pipe_ordinal`` run the parity suite on every
strategy; this file covers the options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesRegressor,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.multioutput import RegressorChain
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

import scoring
from scoring.errors import InvalidValueError, ScoringError, UnsupportedModelError

RNG = np.random.default_rng(4)
N = 900
CITY = np.array([f"city_{k}" for k in range(9)], dtype=object)[RNG.integers(0, 9, N)]
CITY[RNG.random(N) < 0.08] = np.nan
GRADE = RNG.integers(0, 6, N).astype(np.float64)  # numbers used as labels
X_NUM = RNG.normal(size=N)
FRAME = pd.DataFrame({"city": CITY, "grade": GRADE, "x": X_NUM})
TARGET = (
    np.isin(CITY, ["city_1", "city_4", "city_7"]).astype(float) + (GRADE > 2) + X_NUM
    + 0.2 * RNG.normal(size=N)
)  # fmt: skip

#: Values to put in each labelled column: every kind an encoder may treat apart.
PROBES: dict[str, list[Any]] = {
    "city": ["city_3", "city_8", "nowhere", None, np.nan, np.inf, 7.0],
    "grade": [0.0, 5.0, 2.5, 99.0, np.nan, np.inf, -np.inf, 1e39],
}

ENCODERS = {
    "onehot-error": OneHotEncoder(),
    "onehot-ignore": OneHotEncoder(handle_unknown="ignore", sparse_output=False),
    "onehot-drop-first": OneHotEncoder(drop="first", handle_unknown="ignore"),
    "onehot-drop-binary": OneHotEncoder(drop="if_binary"),
    "onehot-infrequent": OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=100),
    "onehot-max-categories": OneHotEncoder(handle_unknown="warn", max_categories=4),
    "ordinal-error": OrdinalEncoder(),
    "ordinal-unknown": OrdinalEncoder(
        handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-7
    ),
    "ordinal-infrequent": OrdinalEncoder(
        handle_unknown="use_encoded_value", unknown_value=np.nan, min_frequency=100
    ),
}


def pipeline(encoder: Any, model: Any) -> Pipeline:
    prep = ColumnTransformer([("labels", encoder, ["city", "grade"])], remainder="passthrough")
    return Pipeline([("prep", prep), ("model", model)])


def decision(call: Any, X: pd.DataFrame) -> np.ndarray | str:
    try:
        return np.asarray(call(X), dtype=np.float64)
    except (ValueError, ScoringError) as exc:
        return str(exc).splitlines()[0]


def with_value(column: str, value: Any) -> pd.DataFrame:
    X = FRAME.iloc[:4].copy()
    if isinstance(value, str):
        X[column] = X[column].astype(object)
    X.iloc[:2, X.columns.get_loc(column)] = value
    return X


@pytest.mark.parametrize("backend", ["tensor", "native"])
@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_every_encoder_option_scores_and_refuses_as_the_pipeline(name: str, backend: str) -> None:
    model = pipeline(ENCODERS[name], RandomForestRegressor(n_estimators=8, max_depth=6,
                                                           random_state=0))  # fmt: skip
    model.fit(FRAME, TARGET)
    cm = scoring.compile(model, backend=backend, device="cpu")
    np.testing.assert_array_equal(cm.predict(FRAME), model.predict(FRAME))
    refused = 0
    for column, values in PROBES.items():
        for value in values:
            X = with_value(column, value)
            ours, native = decision(cm.predict, X), decision(model.predict, X)
            what = f"{name}: {value!r} in {column}"
            if isinstance(native, str):
                refused += 1
                assert isinstance(ours, str), f"{what}: native refuses ({native}), we scored"
                assert backend == "native" or column in ours  # native's own words, else ours
            else:
                assert not isinstance(ours, str), f"{what}: native scores, we refuse: {ours}"
                np.testing.assert_array_equal(ours, native, what)
    assert refused > 0  # every option refuses something: inf, at least, in "grade"


def test_a_tree_split_on_an_encoded_column_is_a_categorical_split_on_the_labels() -> None:
    model = pipeline(OneHotEncoder(handle_unknown="ignore"), RandomForestClassifier(
        n_estimators=5, max_depth=5, random_state=0)).fit(FRAME, TARGET > 1)  # fmt: skip
    forest = scoring.compile(model, backend="tensor", device="cpu").forest
    assert forest.n_features == 3 and forest.categorical_features == [0, 1]
    assert forest.categories[0][:9] == [f"city_{k}" for k in range(9)]
    assert forest.encoded[0] == {}  # "ignore": an unseen label is scored as all zeros
    assert "inf" in forest.encoded[1]  # numbers: inf is refused by the encoder's check
    assert any(tree.cat_left for tree in forest.trees)


def test_labels_in_parquet_are_scored_and_stored_models_keep_their_encoders(
    tmp_path: Path,
) -> None:
    model = pipeline(OneHotEncoder(handle_unknown="ignore"), ExtraTreesRegressor(
        n_estimators=6, max_depth=6, random_state=0)).fit(FRAME, TARGET)  # fmt: skip
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("price", model)
    source = tmp_path / "in"
    source.mkdir()
    city = pa.array([None if pd.isna(c) else c for c in CITY])  # Parquet's nulls
    table = pa.table({"id": np.arange(N), "city": city, "grade": GRADE.astype(np.int64),
                      "x": X_NUM})  # fmt: skip
    pq.write_table(table.slice(0, 500), source / "a.parquet")
    coded = table.slice(500).set_column(1, "city", table.column("city").slice(500)
                                        .dictionary_encode())  # fmt: skip
    pq.write_table(coded, source / "b.parquet")
    expected = model.predict(table.to_pandas())
    for backend in ("tensor", "native"):
        cm = scoring.compile(registry.bundle("price"), backend=backend, device="cpu")
        out = tmp_path / f"out-{backend}"
        scoring.score_parquet(source, out, cm, keep=["id"], progress=False)
        scored = pq.read_table(out).sort_by("id")
        np.testing.assert_array_equal(scored.column("prediction").to_numpy(), expected)


def test_an_unseen_label_is_refused_by_name_when_the_encoder_refuses_it() -> None:
    model = pipeline(OrdinalEncoder(), HistGradientBoostingClassifier(max_iter=5))
    model.fit(FRAME, TARGET > 1)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    X = with_value("city", "atlantis")
    with pytest.raises(InvalidValueError) as refused:
        cm.predict_proba(X)
    message = str(refused.value)
    assert "'city'" in message and "['atlantis']" in message and "prep.labels" in message
    assert "Found unknown categories in column 0" in message
    with pytest.raises(ValueError, match=re.escape("Found unknown categories ['atlantis']")):
        model.predict_proba(X)  # native refuses it too


def test_an_imputer_before_and_after_an_encoder_is_part_of_the_encoding() -> None:
    text = Pipeline([("fill", SimpleImputer(strategy="constant", fill_value="city_2")),
                     ("codes", OrdinalEncoder(handle_unknown="use_encoded_value",
                                              unknown_value=np.nan)),
                     ("refill", SimpleImputer(strategy="median"))])  # fmt: skip
    prep = ColumnTransformer([("text", text, ["city"]), ("num", "passthrough", ["x"])])
    forest = RandomForestRegressor(n_estimators=4, random_state=0)
    model = Pipeline([("prep", prep), ("model", forest)])
    model.fit(FRAME, TARGET)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    assert cm.forest.dropped == [1]  # "grade" is not read
    for value in ("city_2", np.nan, None, "nowhere"):  # NaN filled first; None, "nowhere" unseen
        X = with_value("city", value)
        np.testing.assert_array_equal(cm.predict(X), model.predict(X), str(value))


def test_a_chain_after_reordered_columns_reads_them_as_the_pipeline_does() -> None:
    prep = ColumnTransformer([("labels", OrdinalEncoder(), ["grade", "city"])],
                             remainder="passthrough")  # fmt: skip
    chain = RegressorChain(RandomForestRegressor(n_estimators=3, random_state=0), order=[1, 0])
    model = Pipeline([("prep", prep), ("chain", chain)])
    frame = FRAME.fillna({"city": "city_0"})
    model.fit(frame, np.column_stack([TARGET, TARGET**2]))
    cm = scoring.compile(model, backend="tensor", device="cpu")
    np.testing.assert_array_equal(cm.predict(frame), model.predict(frame))


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        (ColumnTransformer([("codes", Pipeline([("a", OrdinalEncoder()),
                                                ("b", OneHotEncoder())]), ["city"])],
                           remainder="passthrough"),
         "step 'prep.codes.b' (OneHotEncoder) encodes the output of another encoder"),
        (ColumnTransformer([("codes", OrdinalEncoder(), ["grade"]),
                            ("raw", "passthrough", ["grade", "x"])]),
         "reads input column 1 in two ways"),
    ],
)  # fmt: skip
def test_what_an_encoder_cannot_compile_is_refused_by_name(steps: Any, named: str) -> None:
    model = Pipeline([("prep", steps), ("model", RandomForestRegressor(n_estimators=2))])
    model.fit(FRAME.fillna({"city": "city_0"}), TARGET)
    with pytest.raises(UnsupportedModelError, match=re.escape(named)):
        scoring.compile(model, backend="tensor", device="cpu")

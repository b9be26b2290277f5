"""Writes the model files of older framework releases that tests/test_model_files.py reads.

Run once, in an environment of its own with those releases (the product never installs
them): ``pip install xgboost==1.7.6 lightgbm==3.3.5 "numpy<2"``, then
``python tests/data/make_legacy_models.py``.  Each model is saved beside the rows it was
asked about and the margins that release predicted for them (NaN included), so the
tests hold today's reading of the file to what its own writer computed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) ** 2
    return X, y


def _save(name: str, rows: np.ndarray, margin: np.ndarray) -> None:
    np.save(HERE / f"{name}.rows.npy", rows)
    np.save(HERE / f"{name}.margin.npy", margin)


def xgboost_files() -> None:
    import xgboost as xgb

    X, y = _rows(0)
    binary = xgb.train({"objective": "binary:logistic", "max_depth": 3},
                       xgb.DMatrix(X, y > 0.5), num_boost_round=8)  # fmt: skip
    binary.save_model(str(HERE / "xgb17_binary.json"))
    binary.save_model(str(HERE / "xgb17_binary.ubj"))
    _save("xgb17_binary", X[:50], binary.predict(xgb.DMatrix(X[:50]), output_margin=True))
    classes = np.digitize(y, np.quantile(y, [0.3, 0.7]))
    multi = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3},
                      xgb.DMatrix(X, classes), num_boost_round=5)  # fmt: skip
    multi.save_model(str(HERE / "xgb17_multi.json"))
    _save("xgb17_multi", X[:50], multi.predict(xgb.DMatrix(X[:50]), output_margin=True))


def lightgbm_files() -> None:
    import lightgbm as lgb

    X, y = _rows(1)
    X[:, 2] = np.random.default_rng(2).integers(0, 6, len(X))
    model = lgb.train({"objective": "regression", "num_leaves": 7, "verbose": -1,
                       "min_data_per_group": 5, "cat_smooth": 1.0},
                      lgb.Dataset(X, y, categorical_feature=[2]), num_boost_round=6)  # fmt: skip
    model.save_model(str(HERE / "lgb33_categorical.txt"))
    _save("lgb33_categorical", X[:50], model.predict(X[:50], raw_score=True))


if __name__ == "__main__":
    xgboost_files()
    lightgbm_files()

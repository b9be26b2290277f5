"""A run is keyed by the sha256 of the model's canonical bytes, whatever form the model
came in: a retrained model never reuses or resumes another model's output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import xgboost as xgb
from sklearn.ensemble import RandomForestClassifier

import scoring
from scoring._formats.folder import FolderPublisher
from scoring.errors import OutputError

from .test_score_parquet import write_input


def _data(rows: int = 1200) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(7)
    X = pd.DataFrame(rng.normal(size=(rows, 4)), columns=[f"f{i}" for i in range(4)])
    return X, (X["f0"] + X["f1"] > 0).to_numpy().astype(int)


def _xgb(seed: int) -> xgb.XGBClassifier:
    X, y = _data()
    return xgb.XGBClassifier(n_estimators=8, max_depth=3, random_state=seed,
                             subsample=0.6).fit(X, y)  # fmt: skip


def _published(out: Path) -> np.ndarray:
    table = pq.read_table(out).to_pandas().sort_values("id")
    return table["probability"].to_numpy()


def _expected(model: Any, X: pd.DataFrame) -> np.ndarray:
    return np.asarray(model.predict_proba(X))[:, 1]


def _score(source: Any, tmp_path: Path, output: Any = None, **kw: Any) -> scoring.ScoreReport:
    return scoring.score_parquet(tmp_path / "in", output or tmp_path / "out", source,
                                 keep=["id"], backend="native", progress=False, **kw)  # fmt: skip


@pytest.mark.parametrize("form", ["file", "object"])
def test_a_retrained_model_is_refused_then_replaces_with_overwrite(
    tmp_path: Path, form: str
) -> None:
    X, _ = _data()
    write_input(X, tmp_path / "in")
    old, new = _xgb(1), _xgb(2)
    path = tmp_path / "m.json"

    def source(model: xgb.XGBClassifier) -> Any:
        if form == "object":
            return model
        model.save_model(path)  # retrained: the file is replaced in place
        return str(path)

    _score(source(old), tmp_path)
    assert _score(source(old), tmp_path).already_complete  # the same model: nothing to do
    with pytest.raises(OutputError, match="another model"):
        _score(source(new), tmp_path)
    np.testing.assert_allclose(_published(tmp_path / "out"), _expected(old, X), atol=1e-6)
    replaced = _score(source(new), tmp_path, scoring.Output(tmp_path / "out", mode="overwrite"))
    assert not replaced.already_complete and replaced.rows == len(X)
    np.testing.assert_allclose(_published(tmp_path / "out"), _expected(new, X), atol=1e-6)


def test_a_registry_alias_moved_to_another_version_is_refused(tmp_path: Path) -> None:
    X, _ = _data()
    write_input(X, tmp_path / "in")
    registry = scoring.Registry(tmp_path / "reg")
    for seed in (1, 2):
        registry.register("churn", _xgb(seed))
    registry.set_alias("churn", "production", 1)
    _score("churn@production", tmp_path, registry=registry)
    registry.set_alias("churn", "production", 2)
    with pytest.raises(OutputError, match="another model"):
        _score("churn@production", tmp_path, registry=registry)


def test_a_partial_output_of_another_model_is_not_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, _ = _data()
    write_input(X, tmp_path / "in", files=4)
    old, new = _xgb(1), _xgb(2)

    def crash(*_: Any, **__: Any) -> None:
        raise OSError("killed before publishing")

    with monkeypatch.context() as patch:
        patch.setattr(FolderPublisher, "publish", crash)
        with pytest.raises(OSError):
            _score(old, tmp_path)  # every file journaled for the old model
    result = _score(new, tmp_path)
    assert result.rows_skipped == 0 and result.rows == len(X)
    np.testing.assert_allclose(_published(tmp_path / "out"), _expected(new, X), atol=1e-6)


def test_one_scikit_learn_model_has_one_identity(tmp_path: Path) -> None:
    X, y = _data()
    write_input(X, tmp_path / "in")
    model = RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0).fit(X, y)
    first = scoring.compile(model, backend="native")
    # skops stamps each archive member with the time: the canonical bytes do not.
    assert first.sha256 == scoring.compile(model, backend="native").sha256
    _score(model, tmp_path)
    assert _score(model, tmp_path).already_complete
    registry = scoring.Registry(tmp_path / "reg")
    assert registry.register("rf", model).sha256 == first.sha256

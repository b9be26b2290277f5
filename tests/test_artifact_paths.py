"""Every path read from an artifact resolves inside its own root or is refused by name:
an MLmodel's ``data`` (absolute, ``..``, a link out of the folder, a URL), a bundle's
model file name, a registry storage key.  Tampered MLmodel files fail as ScoringErrors,
one line each (the report: another model was loaded through an absolute ``data``,
``/etc/hostname`` was read, and a TypeError and yaml's ParserError escaped).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring._bundle import Bundle
from scoring._registry.storage import ArtifactStore
from scoring.errors import IntegrityError, ModelFileError, ScoringError

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")


def _saved(tmp: Path, name: str, *, regressor: bool = False) -> Path:
    import xgboost

    X = pd.DataFrame(np.random.default_rng(len(name)).normal(size=(200, 3)), columns=list("abc"))
    if regressor:
        model: Any = xgboost.XGBRegressor(n_estimators=4).fit(X, X.a)
    else:
        model = xgboost.XGBClassifier(n_estimators=4).fit(X, X.a > 0)
    path = tmp / name
    mlflow.xgboost.save_model(model, str(path), model_format="json", pip_requirements=[])
    return path


def _edit(folder: Path, old: str, new: str) -> None:
    text = (folder / "MLmodel").read_text()
    assert old in text
    (folder / "MLmodel").write_text(text.replace(old, new))


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink", "url"])
def test_an_mlmodel_data_path_outside_its_folder_is_refused(tmp_path: Path, where: str) -> None:
    model, other = _saved(tmp_path, "m"), _saved(tmp_path, "other")
    target = {
        "absolute": str(other / "model.json"),
        "dotdot": "../" * 8 + "etc/hostname",
        "symlink": "linked.json",
        "url": "s3://bucket/model.json",
    }[where]
    if where == "symlink":
        (model / "linked.json").symlink_to(other / "model.json")
    _edit(model, "data: model.json", f"data: {target}")
    with pytest.raises(ModelFileError, match="outside the model's folder") as caught:
        scoring.compile(str(model))
    assert "\n" not in str(caught.value)


def test_an_mlmodel_naming_another_estimator_class_is_refused(tmp_path: Path) -> None:
    model = _saved(tmp_path, "m")
    _edit(model, "model_class: xgboost.sklearn.XGBClassifier",
          "model_class: xgboost.sklearn.XGBRegressor")  # fmt: skip
    with pytest.raises(ModelFileError, match="XGBRegressor"):
        scoring.compile(str(model))


@pytest.mark.parametrize("text", ["flavors: [unclosed", "- just\n- a list\n", ""])
def test_an_mlmodel_that_is_not_yaml_is_a_model_file_error(tmp_path: Path, text: str) -> None:
    model = _saved(tmp_path, "m")
    (model / "MLmodel").write_text(text)
    with pytest.raises(ScoringError, match="MLmodel") as caught:
        scoring.compile(str(model))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["../../evil.ubj", "/etc/passwd", "a/b.ubj", ".hidden"])
def test_a_bundle_whose_model_file_name_is_a_path_is_refused(name: str) -> None:
    import xgboost

    X = pd.DataFrame({"a": np.arange(30.0)})
    bundle = Bundle.of(xgboost.XGBRegressor(n_estimators=2).fit(X, X.a))
    manifest = {**bundle.manifest, "filename": name}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        zf.writestr(name, bundle.model_bytes)
    with pytest.raises(ModelFileError, match="plain file name"):
        Bundle.from_bytes(buf.getvalue())


@pytest.mark.parametrize("key", [
    "../outside/file", "/etc/passwd", "artifacts/ab/" + "ab" * 32 + "/../../../../x",
    "artifacts/zz/" + "0" * 64 + "/model.ubj", "s3://bucket/model.ubj",
])  # fmt: skip
def test_a_storage_key_outside_the_root_is_refused(tmp_path: Path, key: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("keep")
    store = ArtifactStore(str(tmp_path / "root"))
    with pytest.raises(IntegrityError, match="storage key"):
        store.get(key, sha256="0" * 64)
    with pytest.raises(IntegrityError, match="storage key"):
        store.delete(key)
    assert (outside / "file").read_text() == "keep"

"""Models as code: ``scoring models apply FOLDER`` makes a registry match a folder of
model files, idempotently, and ``--dry-run`` prints the changes without making them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xgboost
from typer.testing import CliRunner

import scoring
from scoring.cli import app

runner = CliRunner()


def _model(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(300, 3)), columns=["a", "b", "c"])
    xgboost.XGBClassifier(n_estimators=4, max_depth=2).fit(X, X.a > 0).save_model(path)
    X.iloc[:100].to_parquet(path.with_suffix(".parquet"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """``models/`` declaring churn (production, staging; a tag) and upsell."""
    (tmp_path / "files").mkdir()
    _model(tmp_path / "files" / "churn.json", 1)
    _model(tmp_path / "files" / "upsell.json", 2)
    models = tmp_path / "models"
    models.mkdir()
    (models / "churn.toml").write_text(
        'name = "churn"\nsource = "../files/churn.json"\nsample = "../files/churn.parquet"\n'
        'aliases = ["production", "staging"]\ntags = { team = "growth" }\n'
    )
    (models / "upsell.toml").write_text(
        'name = "upsell"\nsource = "../files/upsell.json"\naliases = ["production"]\n'
    )
    return models


def _apply(folder: Path, *extra: str) -> list[str]:
    registry = folder.parent / "registry"
    said = runner.invoke(app, ["models", "apply", str(folder), "--registry", str(registry),
                               *extra])  # fmt: skip
    assert said.exit_code == 0, said.output
    return said.stdout.strip().splitlines()


def test_apply_registers_and_aliases_then_a_second_apply_changes_nothing(folder: Path) -> None:
    made = _apply(folder)
    assert len(made) == 5, made
    assert made[0].startswith("churn: register ") and "churn.json (sha256 " in made[0]
    assert made[1:3] == ["churn: alias production -> version 1",
                         "churn: alias staging -> version 1"]  # fmt: skip
    assert made[3].startswith("upsell: register ")
    assert made[4] == "upsell: alias production -> version 1"
    registry = scoring.Registry(folder.parent / "registry")
    churn = registry.get("churn@production")
    assert churn.version == 1 and churn.tags["team"] == "growth" and churn.verified
    assert registry.sample(churn) is not None  # verified on the declared sample
    assert _apply(folder) == []  # idempotent
    assert len(registry.versions("churn")) == 1


def test_dry_run_prints_the_changes_and_makes_none(folder: Path) -> None:
    _apply(folder)
    _model(folder.parent / "files" / "churn.json", 3)  # retrained
    (folder / "upsell.toml").write_text(
        'name = "upsell"\nsource = "../files/upsell.json"\naliases = ["production"]\n'
        'tags = { owner = "crm" }\n'
    )
    would = _apply(folder, "--dry-run")
    assert would[0].startswith("would churn: register ")
    assert would[1:] == [
        "would churn: alias production -> the new version",
        "would churn: alias staging -> the new version",
        "would upsell: tag owner=crm on version 1",
    ]
    registry = scoring.Registry(folder.parent / "registry")
    assert len(registry.versions("churn")) == 1 and "owner" not in registry.get("upsell@1").tags
    made = _apply(folder)
    assert made[1:] == [
        "churn: alias production -> version 2",
        "churn: alias staging -> version 2",
        "upsell: tag owner=crm on version 1",
    ]
    assert registry.get("churn@production").version == 2
    assert registry.get("churn@1").sha256 != registry.get("churn@2").sha256  # both kept


def test_an_alias_removed_from_the_file_is_removed(folder: Path) -> None:
    _apply(folder)
    text = (folder / "churn.toml").read_text().replace('"production", "staging"', '"production"')
    (folder / "churn.toml").write_text(text)
    assert _apply(folder) == ["churn: unalias staging (was version 1)"]
    registry = scoring.Registry(folder.parent / "registry")
    assert registry.get("churn@production").version == 1
    with pytest.raises(scoring.errors.ModelNotFoundError):
        registry.get("churn@staging")
    assert _apply(folder) == []


def test_a_model_failing_verification_is_registered_but_not_promoted(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _apply(folder)
    _model(folder.parent / "files" / "churn.json", 4)
    monkeypatch.setattr("scoring._parity.TOLERANCE", -1.0)  # nothing can pass
    said = runner.invoke(app, ["models", "apply", str(folder), "--registry",
                               str(folder.parent / "registry")])  # fmt: skip
    assert said.exit_code != 0
    assert said.stdout.startswith("churn: register "), said.output  # printed as it was made
    error = said.stderr.strip().splitlines()
    assert len(error) == 1 and "churn.toml" in error[0] and "churn@2 failed parity" in error[0]
    assert "'production' stays where it was" in error[0]
    registry = scoring.Registry(folder.parent / "registry")
    assert registry.get("churn@production").version == 1
    assert not registry.get("churn@2").verified


def test_bad_files_are_one_line_naming_the_file(folder: Path) -> None:
    (folder / "again.toml").write_text('name = "churn"\nsource = "../files/upsell.json"\n')
    said = runner.invoke(app, ["models", "apply", str(folder), "--dry-run", "--registry",
                               str(folder.parent / "registry")])  # fmt: skip
    assert said.exit_code != 0 and "declared twice" in said.stderr, said.output
    (folder / "again.toml").write_text('name = "other"\nsource = "../files/none.json"\n')
    said = runner.invoke(app, ["models", "apply", str(folder), "--registry",
                               str(folder.parent / "registry")])  # fmt: skip
    assert said.exit_code != 0 and "none.json' does not exist" in said.stderr, said.output
    (folder / "again.toml").write_text('name = "other"\nsourc = "x"\n')
    said = runner.invoke(app, ["models", "apply", str(folder), "--registry",
                               str(folder.parent / "registry")])  # fmt: skip
    assert said.exit_code != 0 and "key 'source': Field required" in said.stderr, said.output


@pytest.mark.parametrize(("written", "says"), [
    ('aliases = ["2"]', "alias '2' is reserved"),
    ('aliases = ["latest"]', "alias 'latest' is reserved"),
    ('aliases = ["bad alias"]', "alias 'bad alias' is not valid"),
    ('sample = "../files/upsell.json"', "key 'sample': '"),
    (b'name = "x\xff"', "is not UTF-8 text"),
])  # fmt: skip
def test_what_the_registry_would_refuse_is_refused_with_the_file_before_any_change(
    folder: Path, written: str | bytes, says: str
) -> None:
    """Found from outside: ``--dry-run`` accepted the alias "2", "latest" or "bad alias",
    and the real apply registered the version, then failed partway without naming the
    file; a model file that is not UTF-8 and a sample that is not Parquet raised raw."""
    path = folder / "zz.toml"
    if isinstance(written, bytes):
        path.write_bytes(written + b'\nsource = "../files/upsell.json"\n')
    else:
        path.write_text(f'name = "later"\nsource = "../files/upsell.json"\n{written}\n')
    registry = folder.parent / "registry"
    for dry in (["--dry-run"], []):
        said = runner.invoke(app, ["models", "apply", str(folder), "--registry", str(registry),
                                   *dry])  # fmt: skip
        assert said.exit_code == 2, said.output
        assert says in said.stderr and "zz.toml" in said.stderr, said.stderr
        assert len(said.stderr.strip().splitlines()) == 1
    listed = runner.invoke(app, ["models", "list", "--registry", str(registry)])
    assert "churn" not in listed.stdout, "nothing registered: refused before any change"

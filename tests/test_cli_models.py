"""``scoring models ...`` through the real command line parser."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from scoring._parity import probe_frame
from scoring.cli import app

from .conftest import built

runner = CliRunner()


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    model, _, _ = built("lgb_clf")
    path = tmp_path / "churn.txt"
    model.booster_.save_model(path)
    return path


def test_register_list_show_alias_verify(
    tmp_path: Path, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORING_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")  # one table row per model
    _, forest, _ = built("lgb_clf")
    sample = tmp_path / "sample.parquet"
    pq.write_table(pa.Table.from_pandas(probe_frame(forest, n_rows=200)), sample)

    out = runner.invoke(
        app, ["models", "register", str(model_file), "--name", "churn", "--sample", str(sample),
              "--tag", "team=risk"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert out.stdout.strip().splitlines()[-1] == "churn@1"

    out = runner.invoke(app, ["models", "alias", "churn", "production", "1"])
    assert out.exit_code == 0, out.output

    out = runner.invoke(app, ["models", "show", "churn@production"])
    shown = json.loads(out.stdout)
    assert shown["version"] == 1 and shown["aliases"] == ["production"]
    assert shown["tags"] == {"team": "risk"} and shown["verification"]["cpu"]["passed"]
    assert shown["schema"]["framework"] == "lightgbm"

    out = runner.invoke(app, ["models", "list"])
    assert out.exit_code == 0 and "churn" in out.stdout and "production->1" in out.stdout

    out = runner.invoke(app, ["models", "verify", "churn@1"])
    assert out.exit_code == 0 and "passed" in out.stdout and "2248 rows" in out.stdout


def test_errors_are_one_line_with_exit_1(tmp_path: Path) -> None:
    registry = ["--registry", str(tmp_path / "reg")]
    out = runner.invoke(app, ["models", "show", "ghost@production", *registry])
    assert out.exit_code == 1
    assert out.stderr.strip().count("\n") == 0 and "'ghost'" in out.stderr

    pickle = tmp_path / "m.pkl"
    pickle.write_bytes(b"not read")
    out = runner.invoke(app, ["models", "register", str(pickle), "--name", "m", *registry])
    assert out.exit_code == 1 and "pickle" in out.stderr

    out = runner.invoke(app, ["models", "register", str(pickle), "--name", "m", "--tag", "x"])
    assert out.exit_code == 2 and "KEY=VALUE" in out.stderr


def test_a_shared_registry_on_postgresql_from_every_command(
    tmp_path: Path, model_file: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry's two halves, the artifact root and the database URL, given as
    options, in the environment and in a job file: every command reads the same models."""
    root = str(tmp_path / "shared")
    given = ["--registry", root, "--registry-db", postgres_url]
    out = runner.invoke(app, ["models", "register", str(model_file), "--name", "churn", *given])
    assert out.exit_code == 0, out.output
    assert runner.invoke(app, ["models", "alias", "churn", "prod", "1", *given]).exit_code == 0
    assert not (tmp_path / "shared" / "registry.db").exists()  # the metadata is on the server

    _, forest, _ = built("lgb_clf")
    source = tmp_path / "in"
    source.mkdir()
    pq.write_table(pa.Table.from_pandas(probe_frame(forest, n_rows=300)), source / "a.parquet")
    out = runner.invoke(app, ["score", "--model", "churn@prod", "--input", str(source),
                              "--output", str(tmp_path / "out-cli"), *given])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert pq.read_table(tmp_path / "out-cli").num_rows == 300

    monkeypatch.setenv("SCORING_HOME", root)
    monkeypatch.setenv("SCORING_REGISTRY_DB", postgres_url)
    shown = json.loads(runner.invoke(app, ["models", "show", "churn@prod"]).stdout)
    assert shown["version"] == 1 and shown["aliases"] == ["prod"]

    job = tmp_path / "job.toml"
    job.write_text(
        f'name = "shared"\nmodel = "churn@prod"\ninput = "{source}"\n'
        f'output = "{tmp_path / "out-job"}"\nregistry = "{root}"\n'
        'registry_db = "${SHARED_DB}"\n'
    )
    monkeypatch.delenv("SCORING_REGISTRY_DB")  # the job file's own key is what is read
    monkeypatch.setenv("SHARED_DB", postgres_url)
    out = runner.invoke(app, ["run", str(job), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert pq.read_table(tmp_path / "out-job").num_rows == 300


@pytest.mark.parametrize(
    ("root", "said"),
    [
        ("s3://lake/registry", "is remote and SQLite cannot live there: give the registry "
                               "database with --registry-db"),
        ("postgresql+psycopg://scoring@db/registry", "is a database URL: --registry "
                                                     "(SCORING_HOME) takes the artifact root"),
    ],
)  # fmt: skip
def test_a_registry_location_that_cannot_work_is_refused_in_one_line(
    root: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCORING_REGISTRY_DB", raising=False)
    out = runner.invoke(app, ["models", "list", "--registry", root])
    assert out.exit_code == 1
    assert out.stderr.strip().count("\n") == 0 and said in out.stderr


def test_the_default_registry_is_the_users_not_the_current_directorys(
    tmp_path: Path, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --registry or SCORING_HOME every directory sees one registry, in the
    user's data directory ($XDG_DATA_HOME/scoring: conftest points it at a temporary
    one); before, ``./.scoring`` made a list run elsewhere silently empty."""
    monkeypatch.delenv("SCORING_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    out = runner.invoke(app, ["models", "register", str(model_file), "--name", "churn"])
    assert out.exit_code == 0, out.output
    monkeypatch.chdir(tmp_path / "b")
    out = runner.invoke(app, ["models", "list"])
    assert out.exit_code == 0 and "churn" in out.stdout
    assert (tmp_path / "data" / "scoring" / "registry.db").exists()
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


def test_a_sample_with_an_id_column_and_another_order_is_read_by_name(tmp_path: Path) -> None:
    """The registration sample is read as a job reads its input: the model's features
    by name, whatever else the file holds and in whatever order (XGBoost's native
    predictor, which verification calls, refuses a frame with other columns)."""
    import numpy as np
    import pandas as pd
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(300, 4)), columns=["a", "b", "c", "d"])
    xgb.XGBClassifier(n_estimators=3).fit(X, X["a"] > 0).save_model(tmp_path / "m.json")
    X.insert(0, "id", np.arange(300))
    X[["d", "c", "id", "b", "a"]].to_parquet(tmp_path / "sample.parquet")
    out = runner.invoke(app, ["models", "register", str(tmp_path / "m.json"), "--name", "churn",
                              "--sample", str(tmp_path / "sample.parquet"),
                              "--registry", str(tmp_path / "reg")])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "verification on cpu: passed" in out.stderr


def test_version_and_the_exit_statuses_in_the_help() -> None:
    from scoring import __version__

    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.strip() == f"scoring {__version__}"
    shown = " ".join(runner.invoke(app, ["--help"]).stdout.split())
    for status in ("1 the command failed", "2 a usage error", "3 a job's deadline",
                   "4 a job finished after", "5 a job's checks failed", "130 or 143"):  # fmt: skip
        assert status in shown, status
    assert "``" not in shown


def test_models_list_as_json_and_a_piped_table_keeps_whole_values(
    tmp_path: Path, model_file: Path
) -> None:
    registry = tmp_path / ("a-registry-whose-path-is-longer-than-a-terminal-" * 2)
    name = "churn-model-of-the-retail-banking-team-scored-nightly"
    assert runner.invoke(app, ["models", "register", str(model_file), "--name", name,
                               "--registry", str(registry)]).exit_code == 0  # fmt: skip
    assert runner.invoke(app, ["models", "alias", name, "production", "1",
                               "--registry", str(registry)]).exit_code == 0  # fmt: skip
    listed = runner.invoke(app, ["models", "list", "--json", "--registry", str(registry)])
    assert listed.exit_code == 0, listed.output
    (model,) = json.loads(listed.stdout)["models"]
    assert model["name"] == name and model["latest"] == 1
    assert model["aliases"] == {"production": 1} and model["framework"] == "lightgbm"
    table = runner.invoke(app, ["models", "list", "--registry", str(registry)])  # not a tty
    assert name in table.stdout and str(registry) in table.stdout
    runs = runner.invoke(app, ["runs", "--registry", str(registry)])
    assert runs.exit_code == 0 and runs.stdout == ""  # none yet: what to do instead
    assert f"no runs recorded in {registry}: `scoring run JOB_FILE` records" in runs.stderr


def test_an_empty_registry_says_how_to_fill_it(tmp_path: Path) -> None:
    listed = runner.invoke(app, ["models", "list", "--registry", str(tmp_path / "reg")])
    assert listed.exit_code == 0 and listed.stdout == "", listed.output
    assert f"no models in {tmp_path / 'reg'}: register a model file" in listed.stderr
    assert "scoring models apply models/" in listed.stderr and "scoring demo" in listed.stderr
    as_json = runner.invoke(app, ["models", "list", "--json", "--registry", str(tmp_path / "reg")])
    assert json.loads(as_json.stdout)["models"] == []  # a program reads an empty list


#: A command run as ``scoring`` runs it, then the heavy modules it imported (stderr).
_IMPORTS_OF = """
import sys
from scoring.cli import app
sys.argv = ["scoring", *sys.argv[1:]]
try:
    app()
except SystemExit:
    pass
print("HEAVY:" + ",".join(m for m in ("torch", "xgboost", "lightgbm", "sklearn", "ray",
                                      "pyspark") if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("command", [["--help"], ["--version"], ["models", "list"], ["runs"]])
def test_the_first_commands_import_neither_torch_nor_a_framework(
    tmp_path: Path, model_file: Path, command: list[str]
) -> None:
    """What keeps them fast (timed in benchmarks/cli_startup.py, not here)."""
    import subprocess
    import sys

    registry = ["--registry", str(tmp_path / "reg")] if command[0] in ("models", "runs") else []
    if registry:
        assert runner.invoke(app, ["models", "register", str(model_file), "--name", "churn",
                                   *registry]).exit_code == 0  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _IMPORTS_OF, *command, *registry],
                          capture_output=True, text=True, check=True)  # fmt: skip
    heavy = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY:"))
    assert heavy == "HEAVY:", (heavy, done.stderr[-2000:])
    assert "churn" in done.stdout or not registry or command == ["runs"]

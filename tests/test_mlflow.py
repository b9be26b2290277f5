"""MLflow in and out, against a real tracking server started here (``mlflow server``,
SQLite backend store, artifacts served from a local folder, on 127.0.0.1).

In: models logged with each flavor's ``log_model`` and registered with an alias are
registered and scored through ``models:/...`` from the CLI and the SDK, and score as the
MLflow model's own ``predict`` does.  Out: a version exported as a pyfunc model scores
through ``mlflow.pyfunc.load_model`` and ``spark_udf`` as ``scoring`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import scoring
from scoring.cli import app

from .conftest import free_port

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
pytestmark = pytest.mark.timeout(600)
runner = CliRunner()
FEATURES = ["age", "income", "tenure", "visits"]


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real MLflow tracking server and model registry, as MLflow's own configuration
    (``MLFLOW_TRACKING_URI``) for the module."""
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    # Its job runner (a scheduler and consumer processes) serves nothing these tests use.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
         "--artifacts-destination", str(home / "artifacts")],
        stdout=(home / "server.log").open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    while server.poll() is None:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                break
        except OSError:
            time.sleep(0.2)
    else:
        pytest.fail(f"mlflow server exited: {(home / 'server.log').read_text()[-2000:]}")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_URI", uri)
        env.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        yield uri
    server.terminate()
    server.wait()


def _rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, len(FEATURES))), columns=FEATURES)
    X.iloc[::7, 1] = np.nan  # missing values go the learned default way
    return X


def _target(X: pd.DataFrame) -> np.ndarray:
    return ((X["age"] + X["income"].fillna(0) * 0.5) > 0).astype(int).to_numpy()


def _log(flavor: str, name: str, model: Any, **kwargs: Any) -> str:
    """Log ``model`` with ``mlflow.<flavor>.log_model``, register it as ``name`` and point
    the alias ``champion`` at the new version: its ``models:/`` reference."""
    with mlflow.start_run():  # requirements given: MLflow infers them in a subprocess
        info = getattr(mlflow, flavor).log_model(
            model, name="model", registered_model_name=name, pip_requirements=[], **kwargs
        )
    client = mlflow.MlflowClient()
    client.set_registered_model_alias(name, "champion", info.registered_model_version)
    return f"models:/{name}@champion"


@pytest.fixture(scope="module")
def logged(tracking_uri: str) -> dict[str, str]:
    """One model per flavor (and per file format inside it), each ``models:/NAME@champion``."""
    import lightgbm
    import xgboost
    from mlflow.models import infer_signature
    from sklearn.ensemble import RandomForestClassifier

    X = _rows(600, seed=1)
    y = _target(X)
    refs = {}
    xgb = xgboost.XGBClassifier(n_estimators=20, max_depth=4).fit(X, y)
    refs["xgboost"] = _log("xgboost", "xgb_frame", xgb)
    # Trained on unnamed data: the signature names the features.
    reg = xgboost.XGBRegressor(n_estimators=15, max_depth=3).fit(X.to_numpy(), X["age"])
    refs["xgboost_json"] = _log(
        "xgboost",
        "xgb_numpy",
        reg,
        model_format="json",
        signature=infer_signature(X, reg.predict(X.to_numpy())),
    )
    named_by_signature = lightgbm.train({"objective": "regression", "verbose": -1},
                                        lightgbm.Dataset(X.to_numpy(), X["age"].to_numpy()),
                                        num_boost_round=10)  # fmt: skip
    refs["lightgbm_signature"] = _log(
        "lightgbm", "lgb_numpy", named_by_signature,
        signature=infer_signature(X, named_by_signature.predict(X.to_numpy())),
    )  # fmt: skip
    booster = lightgbm.train({"objective": "binary", "verbose": -1, "num_leaves": 8},
                             lightgbm.Dataset(X, y), num_boost_round=20)  # fmt: skip
    refs["lightgbm_booster"] = _log("lightgbm", "lgb_booster", booster)
    clf = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(X, y)
    refs["lightgbm_skops"] = _log("lightgbm", "lgb_sklearn", clf)
    rf = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(X.fillna(0), y)
    tree = ["sklearn.tree._tree.Tree"]
    refs["sklearn_skops"] = _log("sklearn", "rf", rf, skops_trusted_types=tree)
    refs["sklearn_pickle"] = _log("sklearn", "rf_pickled", rf, serialization_format="cloudpickle")
    try:
        import catboost
    except ImportError:
        pass
    else:
        cb = catboost.CatBoostClassifier(iterations=20, depth=4, verbose=False).fit(X, y)
        refs["catboost"] = _log("catboost", "cb", cb)
    return refs


def _own_margins(ref: str, flavor: str, X: pd.DataFrame) -> np.ndarray | None:
    """The framework's own margins through MLflow's flavor loader, where it has them."""
    if flavor.startswith("xgboost"):
        model = mlflow.xgboost.load_model(ref)
        return np.asarray(model.predict(X.to_numpy(), output_margin=True))
    if flavor == "lightgbm_booster":
        return np.asarray(mlflow.lightgbm.load_model(ref).predict(X, raw_score=True))
    if flavor == "lightgbm_skops":
        return np.asarray(mlflow.lightgbm.load_model(ref).predict(X, raw_score=True))
    return None


SCORED = ["xgboost", "xgboost_json", "lightgbm_booster", "lightgbm_skops", "sklearn_skops",
          "catboost"]  # fmt: skip


@pytest.mark.parametrize("flavor", SCORED)
def test_models_uri_scores_as_mlflow_predict(logged: dict[str, str], flavor: str) -> None:
    if flavor not in logged:
        pytest.skip("catboost is not installed")
    ref = logged[flavor]
    X = _rows(2000, seed=2)
    if flavor == "sklearn_skops":
        X = X.fillna(0)
    cm = scoring.compile(ref)
    own = np.asarray(mlflow.pyfunc.load_model(ref).predict(X)).ravel()
    got = np.asarray(cm.predict(X)).ravel()
    if own.dtype.kind == "f":  # probabilities: whichever backend auto picked, the margins
        # below are the framework's; the link's exp (torch's, not the framework's libm)
        # may round the last bit differently.
        np.testing.assert_allclose(got, own, rtol=0, atol=4 * np.finfo(own.dtype).eps)
    else:
        np.testing.assert_array_equal(got, own)
    margins = _own_margins(ref, flavor, X)
    if margins is None:
        return
    ours = cm.predict_raw(X).reshape(margins.shape)
    if flavor.startswith("xgboost"):
        np.testing.assert_array_equal(ours, margins.astype(ours.dtype))  # bit-identical
    else:
        np.testing.assert_allclose(ours, margins, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("flavor", ["xgboost_json", "lightgbm_signature"])
def test_signature_names_an_unnamed_model(
    logged: dict[str, str], tmp_path: Path, flavor: str
) -> None:
    reg = scoring.Registry(tmp_path / "reg")
    mv = reg.register("numpy_trained", logged[flavor])
    assert mv.schema.feature_names == FEATURES
    assert json.loads(mv.tags["mlflow.signature"])[0]["name"] == "age"
    # Named columns in another order are matched by name.
    X = _rows(300, seed=3)
    shuffled = X[list(reversed(FEATURES))]
    ours = reg.load(mv.ref).predict(X)
    np.testing.assert_array_equal(reg.load(mv.ref).predict(shuffled), ours)
    own = np.asarray(mlflow.pyfunc.load_model(logged[flavor]).predict(X))
    np.testing.assert_allclose(ours, own.astype(ours.dtype), rtol=1e-6)


def test_cli_registers_and_scores_models_uri(
    logged: dict[str, str], tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # --mlflow-uri alone says where
    result = runner.invoke(app, ["models", "register", logged["xgboost"], "--registry",
                                 str(home), "--mlflow-uri", tracking_uri])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "xgb_frame@1"
    mv = scoring.Registry(home).get("xgb_frame@1")
    version = mlflow.MlflowClient(tracking_uri).get_model_version_by_alias("xgb_frame", "champion")
    assert mv.tags["mlflow.source"] == "models:/xgb_frame@champion"
    assert mv.tags["mlflow.model_version"] == str(version.version)
    assert mv.tags["mlflow.run_id"] == version.run_id
    assert mv.tags["mlflow.tracking_uri"] == tracking_uri
    assert mv.verified
    X = _rows(1500, seed=4)
    pq.write_table(pa.Table.from_pandas(X, preserve_index=False), tmp_path / "in.parquet")
    result = runner.invoke(app, ["score", "--model", logged["xgboost"], "--input",
                                 str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out"),
                                 "--mlflow-uri", tracking_uri])  # fmt: skip
    assert result.exit_code == 0, result.output
    scored = pq.read_table(tmp_path / "out").to_pandas()
    own = mlflow.pyfunc.load_model(logged["xgboost"]).predict(X)
    np.testing.assert_array_equal(scored["label"].to_numpy(), np.asarray(own))


def test_job_file_reads_models_uri(
    logged: dict[str, str], tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    X = _rows(800, seed=5)
    own = mlflow.pyfunc.load_model(logged["lightgbm_booster"]).predict(X)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the job file's mlflow_uri alone says where
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pandas(X, preserve_index=False), tmp_path / "in" / "a.parquet")
    job = tmp_path / "job.toml"
    job.write_text(
        f'name = "mlflow-job"\nmodel = "{logged["lightgbm_booster"]}"\n'
        f'mlflow_uri = "{tracking_uri}"\ninput = "in/"\noutput = "out/"\n'
        f'registry = "{tmp_path / "home"}"\n'
    )
    result = runner.invoke(app, ["run", str(job)])
    assert result.exit_code == 0, result.output
    scored = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_allclose(scored["probability"].to_numpy(), np.asarray(own), rtol=1e-6)


def _no_tree_model(tmp_path: Path) -> str:
    code = tmp_path / "constant.py"
    code.write_text(
        "import mlflow\nfrom mlflow.pyfunc import PythonModel\n\n"
        "class Constant(PythonModel):\n"
        "    def predict(self, context, model_input, params=None):\n"
        "        return [0] * len(model_input)\n\n"
        "mlflow.models.set_model(Constant())\n"
    )
    with mlflow.start_run():
        mlflow.pyfunc.log_model(name="model", python_model=str(code), pip_requirements=[],
                                registered_model_name="constant")  # fmt: skip
    return "models:/constant/1"


@pytest.mark.parametrize("case", ["unknown model", "unknown alias", "unreachable server",
                                  "no tree model", "pickled"])  # fmt: skip
def test_bad_mlflow_references_are_one_line_and_write_nothing(
    case: str,
    logged: dict[str, str],
    tracking_uri: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)  # --mlflow-uri changes it
    ref, uri, says = {
        "unknown model": ("models:/nobody/1", tracking_uri, "MLflow has no model"),
        "unknown alias": ("models:/xgb_frame@nowhere", tracking_uri, "MLflow has no model"),
        "unreachable server": (logged["xgboost"], f"http://127.0.0.1:{free_port()}",
                               "is unreachable"),
        "no tree model": ("", tracking_uri, "has no tree-model flavor"),
        "pickled": (logged["sklearn_pickle"], tracking_uri, "serialization_format='skops'"),
    }[case]  # fmt: skip
    ref = ref or _no_tree_model(tmp_path)
    home = tmp_path / "home"
    result = runner.invoke(app, ["models", "register", ref, "--registry", str(home),
                                 "--mlflow-uri", uri])  # fmt: skip
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert not home.exists() or scoring.Registry(home).list() == []


def test_trusted_pickled_flavor_registers(logged: dict[str, str], tmp_path: Path) -> None:
    mv = scoring.Registry(tmp_path).register("rf", logged["sklearn_pickle"], trusted=True)
    X = _rows(500, seed=6).fillna(0)
    own = mlflow.pyfunc.load_model(logged["sklearn_pickle"]).predict(X)
    np.testing.assert_array_equal(scoring.Registry(tmp_path).load(mv.ref).predict(X), own)


def test_local_model_directory_and_runs_uri(logged: dict[str, str], tmp_path: Path) -> None:
    folder = mlflow.artifacts.download_artifacts(logged["lightgbm_skops"], dst_path=str(tmp_path))
    version = mlflow.MlflowClient().get_model_version_by_alias("lgb_sklearn", "champion")
    X = _rows(400, seed=7)
    # One backend for all three: the same forest whichever reference found it (auto's
    # choice is a timing, and two backends may differ in the last bit).
    expected = scoring.compile(logged["lightgbm_skops"], backend="native").predict_proba(X)
    for ref in (folder, f"runs:/{version.run_id}/model"):
        got = scoring.compile(ref, backend="native").predict_proba(X)
        np.testing.assert_array_equal(got, expected)


# -- out: a version as an MLflow pyfunc model ----------------------------------------


@pytest.fixture(scope="module")
def exported(logged: dict[str, str], tracking_uri: str,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[scoring.Registry, str]:  # fmt: skip
    home = tmp_path_factory.mktemp("export-home")
    scoring.Registry(home).register("churn", logged["xgboost"])
    result = runner.invoke(app, ["models", "export", "churn@1", "--mlflow", "--register-as",
                                 "churn_scoring", "--registry", str(home)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "models:/churn_scoring/1"
    return scoring.Registry(home), "models:/churn_scoring/1"


def test_exported_pyfunc_scores_as_scoring(exported: tuple[scoring.Registry, str]) -> None:
    reg, uri = exported
    X = _rows(1000, seed=8)
    cm = reg.load("churn@1", backend="tensor")  # what an export compiles with
    model = mlflow.pyfunc.load_model(uri)
    np.testing.assert_array_equal(model.predict(X), cm.predict(X))
    for method in ("predict_proba", "predict_raw"):
        got = model.predict(X, params={"method": method})
        np.testing.assert_array_equal(got, getattr(cm, method)(X))
    info = mlflow.models.get_model_info(uri)
    assert [c["name"] for c in info.signature.inputs.to_dict()] == FEATURES


def test_export_without_a_target_is_usage() -> None:
    result = runner.invoke(app, ["models", "export", "churn@1"])
    assert result.exit_code == 2 and "--mlflow" in result.stderr


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_exported_pyfunc_through_spark_udf(exported: tuple[scoring.Registry, str]) -> None:
    pytest.importorskip("pyspark")
    from scoring.spark import local_session

    reg, uri = exported
    X = _rows(1200, seed=9)
    spark = local_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        frame = spark.createDataFrame(X.astype(object).where(X.notna(), None))
        udf = mlflow.pyfunc.spark_udf(spark, uri, result_type="double", env_manager="local")
        labels = frame.select(udf(*FEATURES).alias("label")).toPandas()["label"]
        proba = mlflow.pyfunc.spark_udf(
            spark,
            uri,
            result_type="array<double>",
            env_manager="local",
            params={"method": "predict_proba"},
        )
        probabilities = frame.select(proba(*FEATURES).alias("p")).toPandas()["p"]
    finally:
        spark.stop()
    cm = reg.load("churn@1", backend="tensor")
    np.testing.assert_array_equal(labels.to_numpy(), cm.predict(X).astype(float))
    np.testing.assert_allclose(np.stack(probabilities.to_numpy()), cm.predict_proba(X),
                               rtol=0, atol=0)  # fmt: skip


def test_mlflow_is_not_imported_by_scoring() -> None:
    """The core install does not grow: MLflow loads only when a reference needs it."""
    code = "import scoring, scoring.cli, scoring._frameworks, sys; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_readme_mlflow_examples(tracking_uri: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """docs/mlflow.md's examples, as written, against this server: a churn model in
    MLflow with the alias champion, features/ and sample.parquet in the folder."""
    import xgboost

    from .test_docs import SCORING, _sh, block

    rng = np.random.default_rng(12)
    X = pd.DataFrame(rng.normal(size=(2000, 3)), columns=["tenure", "plan", "spend"])
    _log("xgboost", "churn", xgboost.XGBClassifier(n_estimators=8).fit(X, X.tenure > X.spend))
    (tmp_path / "features").mkdir()
    X.assign(customer_id=np.arange(2000)).to_parquet(tmp_path / "features" / "part-0.parquet")
    X.iloc[:300].to_parquet(tmp_path / "sample.parquet")
    monkeypatch.setenv("SCORING_HOME", str(tmp_path / "registry"))
    monkeypatch.chdir(tmp_path)
    shell = block("pip install -e '.[mlflow]'").splitlines()
    assert shell[1] == "export MLFLOW_TRACKING_URI=http://mlflow.internal:5000"
    said = _sh("\n".join([f"export MLFLOW_TRACKING_URI={tracking_uri}", *shell[2:]]), tmp_path)
    assert said.splitlines()[0] == "churn@1" and said.splitlines()[-1].startswith("models:/")
    assert Path(SCORING).exists() and len(pd.read_parquet(tmp_path / "scores-mlflow")) == 2000
    namespace: dict[str, Any] = {"features": X.iloc[:500]}
    exec(block("import mlflow\nimport scoring\n\ncm = scoring.compile("), namespace)
    np.testing.assert_array_equal(namespace["labels"], namespace["cm"].predict(X.iloc[:500]))
    np.testing.assert_array_equal(namespace["proba"], namespace["cm"].predict_proba(X.iloc[:500]))


def test_an_alias_is_resolved_once(
    tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The alias moves to another version while the model downloads (a promotion): the
    registered model is the version its tags name."""
    import xgboost

    from scoring._frameworks import _mlflow as loader

    X = _rows(300, seed=11)
    first = xgboost.XGBClassifier(n_estimators=5, max_depth=2).fit(X, _target(X))
    second = xgboost.XGBClassifier(n_estimators=9, max_depth=4).fit(X, 1 - _target(X))
    ref = _log("xgboost", "moving", first)
    _log("xgboost", "moving", second)
    mlflow.MlflowClient().set_registered_model_alias("moving", "champion", "1")
    download = loader._download

    def promoted_meanwhile(*args: Any) -> str:
        mlflow.MlflowClient().set_registered_model_alias("moving", "champion", "2")
        return download(*args)

    monkeypatch.setattr(loader, "_download", promoted_meanwhile)
    mv = scoring.Registry(tmp_path / "reg").register("moving", ref)
    assert mv.tags["mlflow.model_version"] == "1"
    np.testing.assert_allclose(scoring.Registry(tmp_path / "reg").load(mv.ref).predict_proba(X),
                               first.predict_proba(X), rtol=1e-6)  # fmt: skip


@pytest.mark.timeout(120)  # a hang guard: MLflow's own retries took minutes
def test_export_to_an_unreachable_server_says_so_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xgboost

    # --mlflow-uri is MLflow's own setting for the command's process: here, this one's,
    # and the module's server again for the tests after this one.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI", ""))

    X = _rows(100, seed=12)
    home = tmp_path / "home"
    scoring.Registry(home).register("m", xgboost.XGBClassifier(n_estimators=2).fit(X, _target(X)))
    uri = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["models", "export", "m@1", "--mlflow", "--mlflow-uri", uri,
                                 "--registry", str(home)])  # fmt: skip
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is unreachable" in lines[0], result.stderr


def test_summaries_and_reports_name_the_mlflow_model_and_its_version(
    logged: dict[str, str], tmp_path: Path
) -> None:
    """Scored straight from MLflow: the URI and the version its alias named; registered
    from MLflow: the registry's version and where it came from."""
    ref = logged["xgboost"]
    version = mlflow.MlflowClient().get_model_version_by_alias(ref[8:].split("@")[0], "champion")
    X = _rows(500, seed=4).assign(id=np.arange(500))
    (tmp_path / "in").mkdir()
    X.to_parquet(tmp_path / "in" / "part-0.parquet")
    direct = scoring.score_parquet(tmp_path / "in", tmp_path / "direct", ref, progress=False)
    assert f"model {ref} (MLflow version {version.version}) (XGBClassifier)" in direct.summary()
    registry = scoring.Registry(tmp_path / "reg")
    mv = registry.register("churn", ref)
    registry.set_alias("churn", "production", mv.version)
    stored = scoring.score_parquet(tmp_path / "in", tmp_path / "stored", "churn@production",
                                   registry=tmp_path / "reg", progress=False)  # fmt: skip
    said = f"churn@production = churn@1 (from {ref}, MLflow version {version.version})"
    assert said in stored.summary()


def test_unity_catalog_style_names(tracking_uri: str, tmp_path: Path) -> None:
    """``models:/catalog.schema.model@alias``, Unity Catalog's three-level names, against
    this MLflow registry (which takes dots in names): compiled, registered under that
    name by the command, and scored with the URI and version named."""
    import xgboost

    X = _rows(400, seed=21)
    model = xgboost.XGBClassifier(n_estimators=6, max_depth=3).fit(X, _target(X))
    ref = _log("xgboost", "main.risk.churn", model)
    assert ref == "models:/main.risk.churn@champion"
    np.testing.assert_allclose(scoring.compile(ref).predict_proba(X), model.predict_proba(X),
                               rtol=1e-6)  # fmt: skip
    from typer.testing import CliRunner

    from scoring.cli import app

    said = CliRunner().invoke(app, ["models", "register", ref, "--registry", str(tmp_path / "r")])
    assert said.exit_code == 0 and said.stdout.strip() == "main.risk.churn@1", said.output
    (tmp_path / "in").mkdir()
    X.to_parquet(tmp_path / "in" / "part-0.parquet")
    report = scoring.score_parquet(tmp_path / "in", tmp_path / "out", ref, progress=False)
    assert f"model {ref} (MLflow version 1)" in report.summary()

"""The README's examples, run as written against local data.

Every ``python`` and ``sh`` block of the README is either run here or listed in
:data:`LEFT_OUT` with the reason (a cluster, an object store or a database the example
names, each exercised by its own test module on local servers).  A block is known by its
first line, so an edited example is run as edited, and a new one fails
:func:`test_every_example_is_run_or_left_out_with_a_reason` until it is placed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import scoring

README = Path(__file__).parents[1] / "README.md"
SCORING = str(Path(sys.executable).with_name("scoring"))

#: Blocks not run here, by first line, and why.
LEFT_OUT = {
    "make demo": "the two make targets themselves: CI runs `make test`, and `make demo` is "
    "timed on a fresh clone (README, Install)",
    "pip install -e '.[postgres,s3]'": "a PostgreSQL database and an S3 bucket: "
    "test_registry.py and test_object_store.py run the same commands on local servers",
    "scoring score --model churn@production --input s3://": "the synopsis of every "
    "option (square brackets); its calls run in test_score_parquet.py",
    "scoring score --input features/ --output scores/ --keep customer_id \\\n    --model "
    "churn=churn_eu": "models scored WHERE a condition holds: test_many_models.py",
    "# an existing cluster": "a Ray cluster at head-node: test_ray_cluster.py",
    "import ray, scoring.ray": "an S3 bucket: test_ray.py runs score_dataset on local files",
    "spark-submit --master spark://head:7077": "a Spark cluster with GPUs",
    "pip install -e '.[ray,spark,postgres,s3]'": "a cluster's nodes and their object store: "
    "test_ray_cluster.py",
    "export RAY_AUTH_MODE=token": "a two-node Ray: test_ray_cluster.py starts it so",
    "spark-class org.apache.spark.deploy.master.Master": "a Spark standalone cluster: "
    "test_spark_cluster.py starts it so",
    "pip install -e '.[mlflow]'": "an MLflow tracking server: test_mlflow.py runs it "
    "against the one it starts",
    "import mlflow\nimport scoring\n\ncm = scoring.compile(": "an MLflow tracking "
    "server: test_mlflow.py runs it against the one it starts",
}


def blocks(kind: str) -> list[str]:
    """The README's fenced blocks of ``kind`` (``python``, ``sh``), in order."""
    return re.findall(rf"^```{kind}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def block(first_line: str) -> str:
    (found,) = [b for b in blocks("python") + blocks("sh") if b.startswith(first_line)]
    return found


RUN = [
    "import scoring\n\ncm = scoring.compile(model",
    "export SCORING_HOME=/srv/scoring",
    "reg = scoring.Registry()",
    "report = scoring.score_parquet(input, output",
    "scoring score --input features/ --output scores/ --keep customer_id \\\n    --model "
    "churn@production",
    'report = scoring.score_parquet("features/", "scores/", [',
    "from scoring.spark import local_session",
    "import deltalake\nimport pandas as pd",
    "scoring score --model churn@production --input features_delta/",
    "events = pd.read_parquet(",
    "scoring score --model churn@production --input iceberg:lake.sales.features",
]


def test_every_example_is_run_or_left_out_with_a_reason() -> None:
    for code in blocks("python") + blocks("sh"):
        placed = [k for k in [*RUN, *LEFT_OUT] if code.startswith(k)]
        assert len(placed) == 1, f"README example not run nor left out: {code[:80]!r}"


FEATURES = ["tenure", "plan", "spend"]


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(rows, 3)).astype(np.float32), columns=FEATURES)
    return X


def _model(seed: int, trees: int = 5) -> xgb.XGBClassifier:
    X = _frame(2000, seed)
    return xgb.XGBClassifier(n_estimators=trees, max_depth=3).fit(X, X.tenure > X.spend)


@pytest.fixture()
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The examples' world, in a temporary folder that is also the working directory:
    a default registry ($SCORING_HOME) holding churn (versions 1 to 7, production on
    the last), upsell, and ``features/``, ``churn.ubj`` and ``sample.parquet`` beside."""
    monkeypatch.setenv("SCORING_HOME", str(tmp_path / "registry"))
    monkeypatch.chdir(tmp_path)
    reg = scoring.Registry()
    for version in range(1, 8):
        reg.register("churn", _model(version, trees=3 + version))
    reg.set_alias("churn", "production", 7)
    reg.register("upsell", _model(11))
    reg.set_alias("upsell", "production", 1)
    (tmp_path / "features").mkdir()
    for i in range(2):
        part = _frame(1500, 20 + i).assign(customer_id=np.arange(i * 1500, (i + 1) * 1500))
        part.to_parquet(tmp_path / "features" / f"part-{i}.parquet")
    _model(30).save_model(tmp_path / "churn.ubj")
    _frame(500, 31).to_parquet(tmp_path / "sample.parquet")
    return tmp_path


def test_compile_example(lake: Path) -> None:
    model, X = _model(1), _frame(100, 2)
    exec(block(RUN[0]), {"model": model, "X": X})


def test_registry_examples(lake: Path) -> None:
    code = block(RUN[2])
    namespace: dict[str, Any] = {"scoring": scoring, "model": _model(3),
                                 "X_sample": _frame(300, 4)}  # fmt: skip
    exec(code, namespace)
    assert namespace["cm"].predict_proba(_frame(10, 5)).shape == (10, 2)


def test_batch_scoring_examples(lake: Path) -> None:
    namespace = {"scoring": scoring, "input": "features/", "output": "scores-one/"}
    exec(block(RUN[3]), namespace)
    assert namespace["report"].rows == 3000
    code = block(RUN[5])
    # Its last two lines are the same list on a Ray Dataset and a Spark DataFrame, lazy
    # calls test_ray.py and test_spark.py make on their own sessions.
    lines = code.splitlines()
    assert lines[-2].startswith("scoring.ray.") and lines[-1].startswith("scoring.spark.")
    exec("\n".join(lines[:-2]), namespace)
    columns = pd.read_parquet("scores/").columns
    assert {"churn__probability", "challenger__probability", "upsell__probability"} <= set(columns)


def _sh(code: str, lake: Path) -> str:
    """A shell block run as a bash script that stops at its first failure, ``scoring``
    this venv's; its standard output."""
    env = {**os.environ, "PATH": f"{Path(SCORING).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", code], cwd=lake, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_registry_commands(lake: Path) -> None:
    """Run with the registry root its first line exports pointed at the test's own."""
    said = _sh(block(RUN[1]).replace("/srv/scoring", str(lake / "registry-sh"), 1), lake)
    assert "churn@1" in said and '"production"' in said  # listed, then shown as JSON
    assert (lake / "registry-sh").is_dir()


def test_many_models_command(lake: Path) -> None:
    _sh(block(RUN[4]), lake)
    assert "upsell__probability" in pd.read_parquet(lake / "scores").columns


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_spark_example(lake: Path) -> None:
    pytest.importorskip("pyspark")
    namespace: dict[str, Any] = {}
    code = block(RUN[6]).replace("local_session()", 'local_session("local[1]")', 1)
    # Spark reads a relative path from its JVM's working directory, which the first
    # session of this process fixed (another test module's, elsewhere): the same folder
    # by its full path.
    code = code.replace('"features/"', repr(str(lake / "features")), 1)
    try:
        exec(code, namespace)
        assert namespace["scored"].count() == 3000
        rows = (
            namespace["spark"]
            .sql("SELECT customer_id, score_churn(struct(*)) AS p FROM features")
            .collect()
        )
        assert len(rows) == 3000 and all(0 <= r.p <= 1 for r in rows)
    finally:
        if "spark" in namespace:
            namespace["spark"].stop()


def test_delta_examples(lake: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    exec(block(RUN[7]), {"scoring": scoring})
    assert deltalake.DeltaTable("scores_delta").version() == 1
    _sh(block(RUN[8]), lake)
    table = deltalake.DeltaTable("scores_delta")
    assert table.version() == 2 and len(table.to_pandas()) == 3000
    namespace = {"scoring": scoring, "deltalake": deltalake, "pd": pd}
    exec(block(RUN[9]), namespace)
    assert namespace["report"].changes["deleted"] == 100
    scores = deltalake.DeltaTable("scores_nightly").to_pandas()
    assert len(scores) == 2900 and scores.customer_id.min() == 100


def test_iceberg_example(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catalog ``lake`` set up as docs/iceberg.md's environment variables do, on SQLite
    and a local warehouse, holding ``sales.features`` (the examples' ``features/``)."""
    pytest.importorskip("pyiceberg")
    import pyarrow.parquet as pq

    from .conftest import sql_catalog

    catalog = sql_catalog("lake", lake, monkeypatch)
    features = pq.read_table(lake / "features")
    catalog.create_table("sales.features", schema=features.schema).append(features)
    _sh(block(RUN[10]), lake)
    table = catalog.load_table("sales.scores")
    assert len(table.snapshots()) == 1 and len(table.scan().to_arrow()) == 3000

"""A shared registry and jobs on an object store, against real servers: an S3 API
(moto's server, its own process) and PostgreSQL (see the fixtures in conftest.py).

What outside runs found there: listings cached in the driver hid what other processes
wrote or removed, and Spark failed on ``s3://`` with a long traceback instead of naming
the connector it lacks."""

from __future__ import annotations

import io
import multiprocessing
import subprocess
import sys
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import scoring
from scoring._formats.dataset import open_input
from scoring._journal.journal import Journal
from scoring._stores import configured, store_config
from scoring.cli import app
from scoring.errors import ConfigError, DependencyError

from .conftest import built
from .test_score_parquet import KILL_SCRIPT, assert_native_parity, model_frame

pytestmark = pytest.mark.timeout(300)


def write_s3_input(frame: pd.DataFrame, url: str, *, files: int = 3) -> pd.DataFrame:
    """``frame`` plus an ``id`` column, split over ``files`` Parquet files at ``url``."""
    frame = frame.assign(id=np.arange(len(frame)))
    fs = fsspec.filesystem("s3")
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(frame.iloc[part], preserve_index=False), buffer)
        fs.pipe_file(f"{url}/part-{i}.parquet", buffer.getvalue())
    return frame


def read_s3(url: str) -> pd.DataFrame:
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    files = sorted(p for p in fs.find(url) if p.endswith(".parquet"))
    tables = [pq.read_table(io.BytesIO(fs.cat_file(p))) for p in files]
    return pa.concat_tables(tables).to_pandas().sort_values("id").reset_index(drop=True)


def test_a_registry_in_a_bucket_with_its_database_on_postgresql(
    s3_bucket: str, postgres_url: str
) -> None:
    model, _, native = built("xgb_clf")
    registry = scoring.Registry(f"{s3_bucket}/registry", db_url=postgres_url)
    mv = registry.register("churn", model)
    registry.set_alias("churn", "production", mv.version)
    artifacts = fsspec.filesystem("s3").find(f"{s3_bucket}/registry/artifacts")
    assert [a.rsplit("/", 1)[-1] for a in artifacts] == ["model.ubj"]
    again = scoring.Registry(f"{s3_bucket}/registry", db_url=postgres_url)  # another user
    cm = again.load("churn@production", backend="tensor")
    _, X = model_frame("xgb_clf", rows=500)
    np.testing.assert_allclose(cm.predict_proba(X), native.predict_proba(X), atol=1e-6)


def _stage(input_url: str, output_url: str, index: int) -> None:
    """Score input file ``index`` into the output's staging area and journal it, as a
    worker (a Ray actor) does."""
    fragment = open_input(input_url).fragments[index]
    journal = Journal(output_url, job=JOB)
    tmp, sink = journal.open(fragment)
    sink.write(b"scored rows")
    sink.close()
    journal.finish(fragment, tmp, sink, rows=fragment.rows)


JOB = {"model": "m", "keep": ["id"], "outputs": "default"}


def test_the_driver_reads_the_journal_the_workers_wrote_not_its_cached_listing(
    s3_bucket: str,
) -> None:
    """The driver lists the journal (while planning, or a first check), a worker process
    journals a file, and the driver's next look must see it: with listings cached in the
    driver it said "no complete output" for files the workers had finished."""
    _, X = model_frame("lgb_clf", rows=300)
    write_s3_input(X, f"{s3_bucket}/in")
    fragments = open_input(f"{s3_bucket}/in").fragments
    driver = Journal(f"{s3_bucket}/out", job=JOB)
    _stage(f"{s3_bucket}/in", f"{s3_bucket}/out", 0)
    assert list(driver.completed(fragments)) == [fragments[0].relpath]  # listed, cached
    worker = multiprocessing.get_context("spawn").Process(
        target=_stage, args=(f"{s3_bucket}/in", f"{s3_bucket}/out", 1)
    )
    worker.start()
    worker.join()
    assert worker.exitcode == 0
    assert sorted(driver.completed(fragments)) == sorted(f.relpath for f in fragments[:2])


def test_a_local_job_on_s3_resumes_and_scores_every_row_once(s3_bucket: str) -> None:
    _, X = model_frame("lgb_clf", rows=3000)
    write_s3_input(X, f"{s3_bucket}/in")
    args = (f"{s3_bucket}/in", f"{s3_bucket}/out", built("lgb_clf")[0])
    assert scoring.score_parquet(*args, keep=["id"], progress=False).rows == 3000
    fs = fsspec.filesystem("s3")
    fs.rm_file(next(p for p in fs.find(f"{s3_bucket}/out") if p.endswith("part-1.parquet")))
    rerun = scoring.score_parquet(*args, keep=["id"], progress=False)
    assert rerun.rows == 1000 and rerun.rows_skipped == 2000  # only the damaged file
    out = read_s3(f"{s3_bucket}/out")
    assert out["id"].tolist() == list(range(3000))  # every row exactly once
    assert_native_parity(out.drop(columns="id"), "lgb_clf", X)


def test_a_local_job_on_s3_killed_between_files_resumes_on_its_rerun(
    s3_bucket: str, tmp_path: Any
) -> None:
    """The process dies after journaling two of five files; the rerun sees the journal
    afresh, scores the other three and publishes every row once."""
    model, X = model_frame("lgb_reg", rows=5000)
    write_s3_input(X, f"{s3_bucket}/in", files=5)
    model.booster_.save_model(tmp_path / "model.txt")
    args = [f"{s3_bucket}/in", f"{s3_bucket}/out", str(tmp_path / "model.txt")]
    killed = subprocess.run([sys.executable, "-c", KILL_SCRIPT, *args], capture_output=True)
    assert killed.returncode == 9, killed.stderr.decode()[-2000:]
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    assert not fs.exists(f"{s3_bucket}/out/_SUCCESS")
    assert len(fs.glob(f"{s3_bucket}/out/_temporary/_journal/*.json")) == 2
    result = scoring.score_parquet(*args, keep=["id"], progress=False)
    assert result.rows_skipped == 2000 and result.rows == 3000
    out = read_s3(f"{s3_bucket}/out")
    assert out["id"].tolist() == list(range(5000))  # every row exactly once
    assert_native_parity(out.drop(columns="id"), "lgb_reg", X)


def test_spark_on_s3_names_the_connector_it_lacks(s3_bucket: str, tmp_path: Any) -> None:
    _, X = model_frame("xgb_clf", rows=200)
    write_s3_input(X, f"{s3_bucket}/in", files=1)
    with pytest.raises(DependencyError) as refused:
        scoring.score_parquet(f"{s3_bucket}/in", f"{s3_bucket}/out", built("xgb_clf")[0],
                              engine="spark", engine_options={"master": "local[1]"},
                              progress=False)  # fmt: skip
    message = str(refused.value)
    assert "\n" not in message and "s3a://" in message
    assert "org.apache.hadoop:hadoop-aws:" in message and "spark.hadoop.fs.s3a.endpoint" in message
    assert not fsspec.filesystem("s3").exists(f"{s3_bucket}/out/_SUCCESS")


def test_storage_options_go_to_the_object_stores_of_the_command() -> None:
    urls = ["s3://lake/in", "/data/out", "memory://registry"]
    assert store_config({"endpoint_url": "http://h:9000", "gcs.project": "p"}, urls) == {
        "s3": {"endpoint_url": "http://h:9000"},
        "gcs": {"project": "p"},
    }
    with pytest.raises(ConfigError, match="'profile': no URL of this command is on an object"):
        store_config({"profile": "prod"}, ["/data/in", "memory://out"])
    before = dict(fsspec.config.conf)
    with configured({"s3": {"profile": "prod"}}):
        assert fsspec.config.conf["s3"]["profile"] == "prod"
    assert fsspec.config.conf == before  # nothing left behind for the next command


def test_the_command_line_reaches_a_store_only_its_options_name(
    s3_bucket: str, s3_server: str, postgres_url: str, tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """With no endpoint or credentials in the environment, ``--storage-option`` is what
    takes every command to the S3 server: registry, input, output."""
    _, X = model_frame("xgb_clf", rows=2000)
    write_s3_input(X, f"{s3_bucket}/in")
    model_file = tmp_path / "model.ubj"
    built("xgb_clf")[0].get_booster().save_model(model_file)
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    fsspec.filesystem("s3").clear_instance_cache()
    given = ["--registry", f"{s3_bucket}/registry", "--registry-db", postgres_url,
             *(f"--storage-option={o}" for o in (f"endpoint_url={s3_server}", "key=testing",
                                                 "secret=testing"))]  # fmt: skip
    runner = CliRunner()
    out = runner.invoke(app, ["models", "register", str(model_file), "--name", "churn", *given])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["score", "--model", "churn@1", "--input", f"{s3_bucket}/in",
                              "--output", f"{s3_bucket}/out", "--keep", "id", *given])  # fmt: skip
    assert out.exit_code == 0, out.output
    fsspec.filesystem("s3").clear_instance_cache()
    out = runner.invoke(app, ["models", "list", *given[:4]])  # without them
    assert out.exit_code == 1 and "cannot be reached (NoCredentialsError" in out.output
    assert "--storage-option" in out.output
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)  # the test's own reads
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    fsspec.filesystem("s3").clear_instance_cache()
    out_frame = read_s3(f"{s3_bucket}/out")
    assert out_frame["id"].tolist() == list(range(2000))
    assert_native_parity(out_frame.drop(columns="id"), "xgb_clf", X)
    bad = runner.invoke(app, ["models", "list", *given, "--storage-option", "endpoint_url"])
    assert bad.exit_code == 2 and "--storage-option 'endpoint_url' is not KEY=VALUE" in bad.output

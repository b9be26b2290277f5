"""Several models in one pass (``model=[...]``): every model's columns equal that model
scored alone by its native predictor, on every backend and engine, and a set resumes,
reruns and fails as one model does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb
from sklearn.ensemble import RandomForestRegressor
from typer.testing import CliRunner

import scoring
from scoring._engines.base import bundle_set
from scoring._model import compile_model
from scoring._modelset import SEPARATOR, BundleSet, SetScorer, compile_set, load_payload
from scoring._scorer import Scorer
from scoring.cli import app
from scoring.errors import ConfigError, MissingColumnError, ModelNotFoundError, OutputError

from .test_score_parquet import write_input

ROWS = 3000


def _data(rows: int, seed: int) -> pd.DataFrame:
    """Named numeric columns with NaN and +-inf, and a categorical ``segment``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, 6)), columns=list("abcdef"))
    frame = frame.mask(rng.random(frame.shape) < 0.08)
    frame["segment"] = pd.Categorical(rng.integers(0, 6, rows), categories=range(6))
    return frame


def _target(frame: pd.DataFrame, seed: int) -> np.ndarray:
    signal = frame["a"].fillna(0) + frame["b"].fillna(0) ** 2 - frame["c"].fillna(0)
    noise = np.random.default_rng(seed).normal(size=len(frame))
    return (signal + 0.5 * noise > 0.5).to_numpy().astype(int)


def _models() -> dict[str, Any]:
    """Models over different feature subsets; one categorical; one averaging forest
    (which no combined forest can carry: it is scored alone from the same batch)."""
    train = _data(2000, seed=0)
    y = _target(train, seed=1)
    churn = xgb.XGBClassifier(n_estimators=20, max_depth=4).fit(train[["a", "b", "c"]], y)
    upsell = xgb.XGBClassifier(n_estimators=15, max_depth=5, objective="multi:softprob")
    upsell.fit(train[["b", "c", "d", "e"]], (y + (train["d"].fillna(0) > 0)).to_numpy())
    segment = lgb.LGBMClassifier(n_estimators=20, num_leaves=15, verbose=-1,
                                 min_data_per_group=5, cat_smooth=1.0)  # fmt: skip
    segment.fit(train[["segment", "a", "d", "f"]], y)
    value = lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(train[["a", "e", "f"]], y * 3.0)
    forest = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0)
    forest.fit(train[["a", "b"]].fillna(0), y)
    return {"churn": churn, "upsell": upsell, "segment": segment, "value": value, "rf": forest}


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    return _models()


def _input(models: dict[str, Any], rows: int = ROWS) -> pd.DataFrame:
    """Scoring rows: unseen categories, thresholds hit exactly, +-inf where accepted."""
    frame = _data(rows, seed=7)
    frame["segment"] = pd.Categorical(np.r_[np.arange(rows - 50) % 6, np.full(50, 9)])
    thresholds = models["churn"].get_booster().trees_to_dataframe()
    split = thresholds[thresholds.Feature == "b"].Split.to_numpy()
    frame.loc[: len(split) - 1, "b"] = split  # XGBoost's x < t at t itself
    frame.loc[100:110, "c"] = np.inf
    frame.loc[111:120, "c"] = -np.inf
    return frame


def _alone(model: Any, frame: pd.DataFrame) -> pa.Table:
    """The model scored alone through its native predictor."""
    return Scorer(compile_model(model, backend="native")).score(
        pa.Table.from_pandas(frame, preserve_index=False)
    )


def _assert_each_model_as_alone(out: pd.DataFrame, models: dict[str, Any], frame: pd.DataFrame,
                                prefixes: dict[str, str] | None = None) -> None:  # fmt: skip
    for name, model in models.items():
        prefix = (prefixes or {}).get(name, name)
        source = frame.fillna({"a": 0.0, "b": 0.0}) if name == "rf" else frame
        expected = _alone(model, source)
        assert expected.num_columns >= 1
        for column in expected.column_names:
            got = out[f"{prefix}{SEPARATOR}{column}"].to_numpy()
            want = expected.column(column).to_numpy(zero_copy_only=False)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=column)
            else:
                np.testing.assert_array_equal(got, want, err_msg=column)


def _numeric(models: dict[str, Any]) -> dict[str, Any]:
    """The models that take NaN (the forest does not)."""
    return {k: v for k, v in models.items() if k != "rf"}


@pytest.mark.parametrize("backend", ["tensor", "auto", "native"])
def test_each_models_columns_equal_the_model_scored_alone(
    tmp_path: Path, models: dict[str, Any], backend: str
) -> None:
    chosen = _numeric(models)
    frame = write_input(_input(models), tmp_path / "in", files=3)
    listed = [{"model": m, "prefix": name} for name, m in chosen.items()]
    result = scoring.score_parquet(tmp_path / "in", tmp_path / "out", listed, keep=["id"],
                                   backend=backend, progress=False)  # fmt: skip
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])
    _assert_each_model_as_alone(out, chosen, frame)
    assert [m["prefix"] for m in result.models] == list(chosen)
    assert all(m["seconds"] and m["seconds"] > 0 for m in result.models)
    if backend == "tensor":  # the four boosted models: two kinds of node semantics
        combined = sorted(m["combined_with"] for m in result.models)
        assert combined == [2, 2, 2, 2], result.models
    # The Parquet metadata and the manifest list every model with its sha256.
    listed_meta = json.loads(pq.read_schema(next((tmp_path / "out").glob("*.parquet")))
                             .metadata[b"scoring.models"])  # fmt: skip
    assert [m["prefix"] for m in listed_meta] == list(chosen)
    assert all(len(m["sha256"]) == 64 for m in listed_meta)
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert json.loads(manifest["metadata"]["scoring.models"]) == listed_meta


def test_an_averaging_forest_is_scored_alone_beside_a_combined_group(
    tmp_path: Path, models: dict[str, Any]
) -> None:
    chosen = {k: models[k] for k in ("churn", "value", "rf")}
    frame = _input(models).fillna({"a": 0.0, "b": 0.0})
    bundles = bundle_set([{"model": m, "prefix": k} for k, m in chosen.items()])
    compiled = compile_set(bundles, backend="tensor", device="cpu")
    assert compiled.alone == [2]  # the forest averages: no combined forest carries it
    write_input(frame, tmp_path / "in", files=2)
    scoring.score_parquet(tmp_path / "in", tmp_path / "out",
                          [{"model": m, "prefix": k} for k, m in chosen.items()],
                          backend="tensor", progress=False)  # fmt: skip
    out = pq.read_table(tmp_path / "out").to_pandas()
    _assert_each_model_as_alone(out, chosen, frame)


def test_a_set_scores_side_by_side_only_where_every_member_can(models: dict[str, Any]) -> None:
    """Native predictors score a set's batches side by side, as they do one model's; a
    combined forest (one torch call has the cores) takes them one at a time."""
    pair = ("churn", "upsell")  # XGBoost: its predictor copies to one thread
    bundles = bundle_set([{"model": models[k], "prefix": k} for k in pair])
    combined = SetScorer(compile_set(bundles, backend="tensor", device="cpu"))
    assert combined.model.groups and combined.allow_parallel_calls(4) == 1
    native = SetScorer(compile_set(bundles, backend="native", device="cpu"))
    alone = [Scorer(compile_model(models[k], backend="native")).allow_parallel_calls(4)
             for k in pair]  # fmt: skip
    assert not native.model.groups and native.allow_parallel_calls(4) == min(alone) > 1


def test_a_set_payload_round_trips_and_its_key_covers_every_prefix(models: dict[str, Any]) -> None:
    first = bundle_set([{"model": models["churn"], "prefix": "a"}, models["value"]])
    assert first.prefixes == ("a", "LGBMRegressor")
    again = load_payload(first.to_bytes())
    assert isinstance(again, BundleSet) and again.sha256 == first.sha256
    renamed = bundle_set([{"model": models["churn"], "prefix": "b"}, models["value"]])
    assert renamed.sha256 != first.sha256
    with pytest.raises(ConfigError, match="give each its own prefix"):
        bundle_set([models["churn"], models["upsell"]])  # both XGBClassifier
    with pytest.raises(ConfigError, match=r"'model': \.\.\., 'prefix'"):
        bundle_set([{"model": models["churn"], "name": "x"}])


def test_registered_models_cli_and_job_file(tmp_path: Path, models: dict[str, Any]) -> None:
    registry = scoring.Registry(tmp_path / "registry")
    for name in ("churn", "segment"):
        registry.register(name, models[name])
    frame = write_input(_input(models), tmp_path / "in", files=2)
    args = ["score", "--registry", str(tmp_path / "registry"), "--input", str(tmp_path / "in"),
            "--keep", "id", "--model", "churn@1", "--model", "seg=segment@1"]  # fmt: skip
    done = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "cli")])
    assert done.exit_code == 0, done.output
    out = pq.read_table(tmp_path / "cli").to_pandas()
    subset = {k: models[k] for k in ("churn", "segment")}
    _assert_each_model_as_alone(out, subset, frame, prefixes={"segment": "seg"})

    job = tmp_path / "many.toml"
    job.write_text(
        textwrap.dedent("""
        name = "many"
        models = ["churn@1", { model = "segment@1", prefix = "seg" }]
        input = "in"
        output = "job"
        registry = "registry"
        keep = ["id"]
        backend = "tensor"
    """)
    )
    ran = CliRunner().invoke(app, ["run", str(job)])
    assert ran.exit_code == 0, ran.output
    job_out = pq.read_table(tmp_path / "job").to_pandas()
    _assert_each_model_as_alone(job_out, subset, frame, prefixes={"segment": "seg"})
    report = json.loads((tmp_path / "job" / "_scoring_report.json").read_text())
    assert [m["prefix"] for m in report["models"]] == ["churn", "seg"]

    both = job.read_text().replace('name = "many"', 'name = "many"\nmodel = "churn@1"')
    job.write_text(both)
    refused = CliRunner().invoke(app, ["run", str(job)])
    assert refused.exit_code != 0 and "not both" in refused.output


def test_a_model_that_fails_stops_the_set_before_anything_is_written(
    tmp_path: Path, models: dict[str, Any]
) -> None:
    registry = scoring.Registry(tmp_path / "registry")
    registry.register("churn", models["churn"])
    write_input(_input(models).drop(columns=["f"]), tmp_path / "in", files=2)
    with pytest.raises(ModelNotFoundError, match="nope"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", ["churn@1", "nope@1"],
                              registry=tmp_path / "registry", progress=False)  # fmt: skip
    with pytest.raises(MissingColumnError, match=r"model 'value' .*'f'"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out",
                              [models["churn"], {"model": models["value"], "prefix": "value"}],
                              progress=False)  # fmt: skip
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.parquet"))


KILL_SCRIPT = textwrap.dedent("""
    import os, sys
    import scoring
    from scoring._journal.journal import Journal
    finish, done = Journal.finish, []
    def dying_finish(self, *args, **kwargs):
        if len(done) == 2:
            os._exit(9)  # killed after two files were journaled
        done.append(1)
        return finish(self, *args, **kwargs)
    Journal.finish = dying_finish
    models = [{"model": m, "prefix": p} for p, m in zip(("churn", "value"), sys.argv[3:])]
    scoring.score_parquet(sys.argv[1], sys.argv[2], models, keep=["id"], backend="tensor",
                          progress=False)
""")


def test_a_killed_set_resumes_and_publishes_every_row_once(
    tmp_path: Path, models: dict[str, Any]
) -> None:
    frame = write_input(_input(models, rows=5000), tmp_path / "in", files=5)
    models["churn"].save_model(tmp_path / "churn.json")
    models["value"].booster_.save_model(tmp_path / "value.txt")
    files = [str(tmp_path / "churn.json"), str(tmp_path / "value.txt")]
    args = [str(tmp_path / "in"), str(tmp_path / "out")]
    killed = subprocess.run([sys.executable, "-c", KILL_SCRIPT, *args, *files],
                            capture_output=True)  # fmt: skip
    assert killed.returncode == 9, killed.stderr.decode()[-2000:]
    assert not list((tmp_path / "out").glob("*.parquet"))  # nothing published
    listed = [{"model": f, "prefix": p} for p, f in zip(("churn", "value"), files, strict=True)]
    result = scoring.score_parquet(*args, listed, keep=["id"], backend="tensor", progress=False)
    assert result.rows_skipped == 2000 and result.rows == 3000
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    assert out["id"].tolist() == list(range(5000))
    chosen = {k: models[k] for k in ("churn", "value")}
    _assert_each_model_as_alone(out.reset_index(drop=True), chosen, frame)
    again = scoring.score_parquet(*args, listed, keep=["id"], progress=False)
    assert again.already_complete
    renamed = [listed[0], {"model": files[1], "prefix": "other"}]
    with pytest.raises(OutputError, match="another model or input"):
        scoring.score_parquet(*args, renamed, keep=["id"], progress=False)


def test_drift_checks_hold_each_model_of_a_set_to_its_own_reference(
    tmp_path: Path, models: dict[str, Any]
) -> None:
    """``[checks]`` on a set: the features every member reads and each member's outputs
    under its prefix, a filtered member's outputs counted over its own rows only."""
    registry = scoring.Registry(tmp_path / "registry")
    sample = _data(2000, seed=3)
    registry.register("churn", models["churn"], sample=sample[["a", "b", "c"]])
    registry.register("segment", models["segment"], sample=sample[["segment", "a", "d", "f"]])
    frame = _data(ROWS, seed=7)
    frame["region"] = np.array(["EU", "US"], dtype=object)[np.arange(ROWS) % 2]

    def run(folder: str, data: pd.DataFrame) -> Any:
        write_input(data, tmp_path / folder, files=2)
        job = tmp_path / f"{folder}.toml"
        job.write_text(textwrap.dedent(f"""
            name = "many"
            models = ["churn@1", {{ model = "segment@1", prefix = "seg", where = "region = 'EU'" }}]
            input = "{folder}"
            output = "out-{folder}"
            registry = "registry"
            keep = ["id"]
            [checks]
            max_psi = 0.2
            fail = true
        """))  # fmt: skip
        return CliRunner().invoke(app, ["run", str(job), "--no-progress"])

    same = run("same", frame)
    assert same.exit_code == 0, same.output
    report = json.loads((tmp_path / "out-same" / "_scoring_report.json").read_text())
    assert report["checks"]["breaches"] == [] and report["checks"]["note"] is None
    drift = {d["column"]: d for d in report["checks"]["drift"]}
    outputs = {c for c, d in drift.items() if d["role"] == "output"}
    assert outputs == {"churn__probability", "churn__label", "seg__probability", "seg__label"}
    assert {c for c, d in drift.items() if d["role"] == "feature"} == {*"abcdf", "segment"}
    assert drift["churn__probability"]["rows"] == ROWS
    assert drift["seg__probability"]["rows"] == ROWS // 2  # the EU rows, no nulls counted
    assert drift["seg__probability"]["null_rate"] == 0.0

    shifted = frame.assign(d=frame["d"] + 3.0)  # read by the segment model only
    stopped = run("shifted", shifted)
    assert stopped.exit_code == 5, stopped.output
    assert "feature 'd' drifted" in stopped.output and "nothing published" in stopped.output
    assert not any(f"feature '{c}'" in stopped.output for c in "abcf")
    assert not (tmp_path / "out-shifted" / "_SUCCESS").exists()


@pytest.mark.parametrize("backend", ["tensor", "native"])
def test_segment_models_score_their_rows_and_leave_nulls_elsewhere(
    tmp_path: Path, models: dict[str, Any], backend: str
) -> None:
    frame = _input(models)
    frame["region"] = np.array(["EU", "US", "UK", None], dtype=object)[np.arange(len(frame)) % 4]
    write_input(frame, tmp_path / "in", files=2)
    wheres = {
        "churn": "region = 'EU'",
        "value": "region IN ('US', 'UK') AND e > -0.5",
        # The forest refuses NaN: filtered to complete rows, the others never reach it.
        "rf": "a IS NOT NULL AND NOT (b IS NULL)",
    }
    chosen = {k: models[k] for k in ("churn", "upsell", "value", "rf")}
    listed = [{"model": m, "prefix": k, "where": wheres.get(k)} for k, m in chosen.items()]
    result = scoring.score_parquet(tmp_path / "in", tmp_path / "out", listed, keep=["id"],
                                   backend=backend, progress=False)  # fmt: skip
    assert [m["where"] for m in result.models] == [wheres.get(k) for k in chosen]
    out = pq.read_table(tmp_path / "out").to_pandas()
    region, e = frame["region"], frame["e"]
    inside = {
        "churn": (region == "EU").to_numpy(),
        "upsell": np.ones(len(frame), dtype=bool),
        "value": (region.isin(["US", "UK"]) & (e > -0.5)).to_numpy(),  # NaN e: outside
        "rf": (frame["a"].notna() & frame["b"].notna()).to_numpy(),
    }
    for name, rows in inside.items():
        assert 0 < rows.sum() <= len(frame)
        expected = _alone(chosen[name], frame[rows])
        for column in expected.column_names:
            got = out[f"{name}{SEPARATOR}{column}"]
            assert got[~rows].isna().all(), (name, column)
            want = expected.column(column).to_numpy(zero_copy_only=False)
            np.testing.assert_allclose(got[rows].to_numpy(dtype=float), want.astype(float),
                                       rtol=1e-6, atol=1e-7, err_msg=name)  # fmt: skip
    with pytest.raises(ConfigError, match=r"row filter 'region = ': cannot be read at character 8"):
        bundle_set([{"model": models["churn"], "where": "region = "}])
    with pytest.raises(MissingColumnError, match=r"model 'churn' .*\['zone'\]"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "bad",
                              [{"model": models["churn"], "prefix": "churn", "where": "zone = 1"},
                               models["value"]], progress=False)  # fmt: skip


def test_cli_where_filters_the_model_it_names(tmp_path: Path, models: dict[str, Any]) -> None:
    registry = scoring.Registry(tmp_path / "registry")
    for name in ("churn", "segment"):
        registry.register(name, models[name])
    frame = _input(models)
    frame["region"] = np.array(["EU", "US"], dtype=object)[np.arange(len(frame)) % 2]
    write_input(frame, tmp_path / "in", files=2)
    args = ["score", "--registry", str(tmp_path / "registry"), "--input", str(tmp_path / "in"),
            "--keep", "id", "--model", "churn@1", "--model", "seg=segment@1"]  # fmt: skip
    done = CliRunner().invoke(app, [*args, "--where", "churn=region = 'EU'",
                                    "--output", str(tmp_path / "cli")])  # fmt: skip
    assert done.exit_code == 0, done.output
    out = pq.read_table(tmp_path / "cli").to_pandas().sort_values("id").reset_index(drop=True)
    eu = (frame["region"] == "EU").to_numpy()
    churn = _alone(models["churn"], frame[eu])
    for column in churn.column_names:
        got = out[f"churn{SEPARATOR}{column}"]
        assert got[~eu].isna().all() and got[eu].notna().all(), column
        want = churn.column(column).to_numpy(zero_copy_only=False).astype(float)
        np.testing.assert_allclose(got[eu].to_numpy(dtype=float), want, rtol=1e-6, atol=1e-7)
    segment = _alone(models["segment"], frame)
    for column in segment.column_names:
        assert out[f"seg{SEPARATOR}{column}"].notna().all(), column
    files = sorted((tmp_path / "cli").glob("*.parquet"))
    listed = json.loads(pq.read_schema(files[0]).metadata[b"scoring.models"])
    assert [m["where"] for m in listed] == ["region = 'EU'", None]

    refusals = {
        ("nope=region = 'EU'",): "no --model has the prefix 'nope'",
        ("region",): "is not KEY=VALUE",
        ("seg=region = 'EU'", "seg=region = 'US'"): "names a prefix twice",
    }
    for wheres, message in refusals.items():
        given = [arg for where in wheres for arg in ("--where", where)]
        refused = CliRunner().invoke(app, [*args, *given, "--output", str(tmp_path / "x")])
        assert refused.exit_code == 2 and message in refused.output, refused.output
    assert not (tmp_path / "x").exists()


def test_row_filters_read_sql_with_its_null_rules() -> None:
    from scoring._where import RowFilter

    rows = pa.table({"region": ["EU", "US", None, "UK"], "tenure": [12, 3, 20, None],
                     "vip": [True, False, True, None]})  # fmt: skip
    cases = {
        "region = 'EU'": [True, False, False, False],
        "region IN ('EU', 'UK') AND tenure >= 12": [True, False, False, False],
        "region NOT IN ('EU')": [False, True, False, True],  # a null is in nothing, nor out
        "NOT vip": [False, True, False, False],
        "tenure IS NULL OR `region` <> 'US'": [True, False, False, True],
        "(tenure < 5) or vip = TRUE": [True, True, True, False],
    }
    for text, inside in cases.items():
        assert RowFilter(text).mask(rows).to_pylist() == inside, text
    with pytest.raises(ConfigError, match=r"unexpected 'garbage' after \"region = 'EU'\""):
        RowFilter("region == 'EU' garbage")
    with pytest.raises(ConfigError, match="cannot be read at character 8: Invalid expression"):
        RowFilter("region ~ 1")
    with pytest.raises(scoring.errors.FilterError, match="compares BIGINT and STRING"):
        RowFilter("tenure = 'x'").mask(rows)
    with pytest.raises(scoring.errors.FilterError, match="not a condition"):
        RowFilter("tenure").mask(rows)


#: Each construct a filter may use, as written (Spark's SQL) and, where DuckDB spells it
#: otherwise, as DuckDB writes it.
SQL_CASES = {
    "region = 'EU'": None,
    "region == 'EU'": "region = 'EU'",
    "region <> 'US' AND tenure != 3": None,
    "region IN ('EU', 'UK')": None,
    "region NOT IN ('EU')": None,
    "tenure BETWEEN 3 AND 12": None,
    "tenure NOT BETWEEN 3 AND 12": None,
    "region LIKE 'E%'": None,
    "region NOT LIKE '%K'": None,
    "region ILIKE 'e_'": None,
    "tenure IS NULL OR `region` <> 'US'": "tenure IS NULL OR \"region\" <> 'US'",
    "tenure IS NOT NULL": None,
    "vip IS TRUE": None,
    "vip IS NOT FALSE": None,
    "NOT vip": None,
    "(tenure < 5) or vip = TRUE": None,
    "region <=> NULL": "region IS NOT DISTINCT FROM NULL",
    "CASE WHEN tenure > 10 THEN 'long' WHEN tenure > 2 THEN 'mid' ELSE 'new' END = 'mid'": None,
    "CASE region WHEN 'EU' THEN 1 ELSE 0 END = 1": None,
    "IF(vip, tenure, 0) > 5": "(CASE WHEN vip THEN tenure ELSE 0 END) > 5",
    "coalesce(tenure, 0) + 1 > 4": None,
    "spend * 2 - 1 >= 3.5 OR spend / 4 < 0.3": None,
    "-tenure < -5": None,
    "signup >= DATE '2026-11-01'": None,
    "signup BETWEEN DATE '2026-10-01' AND DATE '2026-11-15'": None,
    "seen < TIMESTAMP '2026-11-20 12:00:00'": "seen < TIMESTAMP '2026-11-20 12:00:00'",
    "year(signup) = 2026 AND month(signup) >= 11 AND day(signup) < 20": None,
    "lower(region) = 'eu' OR upper(region) = 'UK'": None,
    "length(trim(region)) = 2": None,
    "substring(region, 1, 1) = 'U'": None,
    "abs(spend - 2) < 1": None,
    "round(spend, 1) = 1.5": None,
    "greatest(tenure, 10) = 10 AND least(tenure, 1) = 1": None,
    "CAST(tenure AS DOUBLE) / 2 > 5": None,
    "CAST(tenure AS STRING) = '12'": "CAST(tenure AS VARCHAR) = '12'",
}


def test_every_sql_construct_selects_the_rows_duckdb_and_arrow_select() -> None:
    """Each construct's rows against DuckDB's reading of the same SQL on the same Arrow
    table (nulls included: a null condition is outside), and against Arrow's own filter
    of that table with the translated expression."""
    import datetime

    import duckdb

    from scoring._where import RowFilter

    day = datetime.date(2026, 11, 1)
    rows = pa.table({
        "region": ["EU", "US", None, "UK", "eu", "EU"],
        "tenure": pa.array([12, 3, 20, None, 1, 7], pa.int64()),
        "spend": [1.5, 2.25, 0.5, 3.0, None, 1.54],
        "vip": [True, False, True, None, False, True],
        "signup": [day, day - datetime.timedelta(days=40), None,
                   day + datetime.timedelta(days=19), day + datetime.timedelta(days=3), day],
        "seen": pa.array([datetime.datetime(2026, 11, d, 8) for d in (18, 19, 20, 21, 22, 23)],
                         pa.timestamp("us")),
    })  # fmt: skip
    rows = rows.append_column("id", pa.array(range(len(rows))))
    con = duckdb.connect()
    con.register("t", rows)
    for text, duck in SQL_CASES.items():
        where = RowFilter(text)
        got = [i for i, inside in enumerate(where.mask(rows).to_pylist()) if inside]
        want = [r[0] for r in con.execute(f"SELECT id FROM t WHERE {duck or text} ORDER BY id")
                .fetchall()]  # fmt: skip
        assert got == want, text
        assert rows.filter(where.expression).column("id").to_pylist() == want, text
    assert len(SQL_CASES) >= 30


def test_sql_that_cannot_be_evaluated_is_refused_by_name() -> None:
    from scoring._where import RowFilter

    schema = pa.schema([("region", pa.string()), ("tenure", pa.int64()),
                        ("signup", pa.date32()), ("other", pa.string())])  # fmt: skip
    with pytest.raises(ConfigError, match="name the column alone"):
        RowFilter("t.region = 'EU'")  # no SQL condition: refused as it is read
    refused = {
        "region IN (SELECT 1)": "IN takes a list of values",
        "region RLIKE 'E.*'": "RLIKE",
        "sha2(region, 256) = 'x'": "SHA2",
        "CAST(tenure AS MAP<STRING, INT>) = 1": "CAST to MAP",
        "region LIKE other": "LIKE takes a 'pattern'",
        "substring(region, tenure, 1) = 'E'": "substring takes numbers",
        "signup > DATE 'not a date'": "write a date as YYYY-MM-DD",
        "region = 1": "compares STRING and INT",
        "region = 'EU' AND tenure / 0.5 > 1": "a DECIMAL divided",
        "\"region\" = 'EU'": "quote a column with backticks (`region`)",
    }
    for text, named in refused.items():  # refused over the input's types, before a row
        with pytest.raises(scoring.errors.FilterError, match=re.escape(named)):
            RowFilter(text).bind(schema)

"""An input's row filter (``Input(filter=)``, ``--filter``, ``filter =``): only its rows
are read, scored and written, on every engine, and the Parquet reader skips the row
groups their statistics rule out."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import xgboost as xgb
from typer.testing import CliRunner

import scoring
from scoring.cli import app
from scoring.errors import ConfigError, FilterError, InputError

runner = CliRunner()
FEATURES = ["tenure", "spend", "visits"]
CONDITION = "region IN ('EU', 'CH') AND day BETWEEN 3 AND 6 AND tenure IS NOT NULL"


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, 3)), columns=FEATURES)
    frame.loc[rng.random(rows) < 0.05, "tenure"] = np.nan
    frame["region"] = rng.choice(["EU", "US", "CH", "UK"], size=rows)
    frame["day"] = np.sort(rng.integers(0, 16, size=rows))  # sorted: row groups by day
    frame["id"] = np.arange(rows)
    return frame


@pytest.fixture(scope="module")
def model() -> xgb.XGBClassifier:
    X = _frame(2000, 1)[FEATURES]
    return xgb.XGBClassifier(n_estimators=12, max_depth=4).fit(X, X.spend > X.visits)


@pytest.fixture()
def lake(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    """Two files of 16 row groups each, one day per row group (statistics that rule out
    whole groups)."""
    frame = _frame(32_000, 2)
    root = tmp_path / "in"
    root.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(frame)), 2)):
        table = pa.Table.from_pandas(frame.iloc[part], preserve_index=False)
        pq.write_table(table, root / f"part-{i}.parquet", row_group_size=1000)
    return root, frame


def _inside(frame: pd.DataFrame, condition: str) -> list[int]:
    """The ids pyarrow's own filter keeps (the expression built here, not by the product)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    expected = (pc.field("region").isin(["EU", "CH"]) & (pc.field("day") >= 3)
                & (pc.field("day") <= 6) & pc.field("tenure").is_valid())  # fmt: skip
    assert condition == CONDITION
    return sorted(table.filter(expected).column("id").to_pylist())


def test_the_output_holds_the_rows_inside_the_filter_scored_as_native(
    lake: tuple[Path, pd.DataFrame], model: xgb.XGBClassifier, tmp_path: Path
) -> None:
    root, frame = lake
    report = scoring.score_parquet(scoring.Input(root, filter=CONDITION), tmp_path / "out",
                                   model, keep=["id", "region", "day"])  # fmt: skip
    out = pd.read_parquet(tmp_path / "out").sort_values("id")
    assert out.id.tolist() == _inside(frame, CONDITION) and report.rows == len(out)
    chosen = frame.set_index("id").loc[out.id, FEATURES]
    np.testing.assert_allclose(out.probability, model.predict_proba(chosen)[:, 1], rtol=1e-6)


def test_a_pushed_down_filter_reads_fewer_row_groups(
    lake: tuple[Path, pd.DataFrame], model: xgb.XGBClassifier, tmp_path: Path
) -> None:
    """Bytes the process reads (``read_chars``: every read, cached or not): the filter on
    ``day`` rules out 12 of each file's 16 row groups by their statistics, so the run
    reads about a quarter of what the same run without it reads."""
    psutil = pytest.importorskip("psutil")
    root, _ = lake
    me = psutil.Process()

    def read(name: str, where: str | None) -> int:
        before = me.io_counters().read_chars
        scoring.score_parquet(scoring.Input(root, filter=where), tmp_path / name, model,
                              keep=["id"], progress=False)  # fmt: skip
        return me.io_counters().read_chars - before

    read("warm", None)  # the kernel, the modules: read once, before anything is counted
    narrowed, whole = read("narrowed", "day BETWEEN 3 AND 6"), read("whole", None)
    assert narrowed < 0.5 * whole, (narrowed, whole)
    assert len(pd.read_parquet(tmp_path / "narrowed")) < len(pd.read_parquet(tmp_path / "whole"))
    groups = pq.ParquetFile(root / "part-0.parquet").metadata.num_row_groups
    assert groups == 16


def test_the_command_and_a_job_file_take_it_and_a_new_filter_is_another_job(
    lake: tuple[Path, pd.DataFrame], model: xgb.XGBClassifier, tmp_path: Path
) -> None:
    root, frame = lake
    model.save_model(tmp_path / "churn.ubj")
    args = ["score", "--model", str(tmp_path / "churn.ubj"), "--input", str(root),
            "--output", str(tmp_path / "cli"), "--keep", "id", "--filter", CONDITION]  # fmt: skip
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert sorted(pd.read_parquet(tmp_path / "cli").id) == _inside(frame, CONDITION)
    # Another filter is another job: the completed output is not taken as its own.
    other = runner.invoke(app, [*args[:-1], "region = 'EU'"])
    assert other.exit_code == 1 and "another model or input" in other.output
    again = runner.invoke(app, [*args[:-1], "region = 'EU'", "--overwrite"])
    assert again.exit_code == 0, again.output
    assert set(pd.read_parquet(tmp_path / "cli").id) == set(frame.id[frame.region == "EU"])
    job = tmp_path / "job.toml"
    job.write_text(f'name = "filtered"\nmodel = "{tmp_path / "churn.ubj"}"\ninput = "{root}"\n'
                   f'output = "{tmp_path / "job-out"}"\nkeep = ["id"]\n'
                   f'filter = "{CONDITION}"\nregistry = "{tmp_path / "reg"}"\n')  # fmt: skip
    ran = runner.invoke(app, ["run", str(job)])
    assert ran.exit_code == 0, ran.output
    assert sorted(pd.read_parquet(tmp_path / "job-out").id) == _inside(frame, CONDITION)
    dry = runner.invoke(app, [*args[:-2], "--filter", "nope = 1", "--dry-run"])
    assert dry.exit_code == 6 and "has no column 'nope'" in dry.output


def test_a_filter_that_cannot_apply_is_refused_before_anything_is_written(
    lake: tuple[Path, pd.DataFrame], model: xgb.XGBClassifier, tmp_path: Path
) -> None:
    root, _ = lake
    cases: dict[str, tuple[type[Exception], str]] = {
        "region = ": (ConfigError, "cannot be read at character"),
        "zone = 'EU'": (InputError, "has no column 'zone'"),
        "region RLIKE 'E'": (FilterError, "RLIKE"),
        "tenure > '3'": (FilterError, "compares DOUBLE and STRING"),
    }
    for where, (error, said) in cases.items():
        with pytest.raises(error, match=said):
            scoring.score_parquet(scoring.Input(root, filter=where), tmp_path / "out", model)
    with pytest.raises(ConfigError, match="drop the filter or the incremental"):
        scoring.score_parquet(scoring.Input(root, filter="day = 1", incremental=True),
                              tmp_path / "out", model)  # fmt: skip
    assert not (tmp_path / "out").exists()
    job = tmp_path / "job.toml"
    job.write_text(f'name = "j"\nmodel = "m"\ninput = "{root}"\noutput = "o/"\n'
                   'filter = "region = "\n')  # fmt: skip
    planned = runner.invoke(app, ["plan", str(job)])
    assert planned.exit_code == 2 and "key 'filter'" in planned.output


@pytest.mark.parametrize("engine", ["ray", "spark"])
def test_every_engine_writes_the_rows_inside_the_filter(
    engine: str, lake: tuple[Path, pd.DataFrame], model: xgb.XGBClassifier, tmp_path: Path
) -> None:
    if engine == "spark" and shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime")
    module = pytest.importorskip("ray" if engine == "ray" else "pyspark")
    root, frame = lake
    options: dict[str, Any] = {"num_workers": 1} if engine == "ray" else {"master": "local[1]"}
    if engine == "ray":  # this test's own Ray, gone after it (as test_delta's)
        module.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        scoring.score_parquet(scoring.Input(root, filter=CONDITION), tmp_path / "out", model,
                              engine=engine, keep=["id"], engine_options=options,
                              progress=False)  # fmt: skip
    finally:
        if engine == "ray":
            module.shutdown()
    out = pd.read_parquet(tmp_path / "out").sort_values("id")
    assert out.id.tolist() == _inside(frame, CONDITION)
    chosen = frame.set_index("id").loc[out.id, FEATURES]
    np.testing.assert_allclose(out.probability, model.predict_proba(chosen)[:, 1], rtol=1e-6)


def test_a_filter_s_failure_is_the_filter_s_and_its_types_are_spark_s(
    tmp_path: Path, model: xgb.XGBClassifier
) -> None:
    """Found from outside: ``amount > 100`` on a DECIMAL column, ``n > 1.5`` on an
    integer past 2^24, a CASE without ELSE, ``NULL OR ...`` and ``COALESCE(NULL, n)``
    failed as "cannot read Parquet file ... fix or remove the file" (exit 1, which a
    CronJob retries), staging left behind; ``"region" = 'EU'`` kept nothing, exit 0."""
    from decimal import Decimal

    rows = 40
    frame = _frame(rows, 4)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    amounts = [(Decimal(i * 10) / 3).quantize(Decimal("0.01")) for i in range(rows)]
    table = table.append_column("amount", pa.array(amounts, pa.decimal128(10, 2)))
    table = table.append_column("n", pa.array([2**24 + i for i in range(rows)], pa.int64()))
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "part-0.parquet", row_group_size=8)
    model.save_model(tmp_path / "m.json")
    everyday = {
        "amount > 100": [i for i in range(rows) if amounts[i] > 100],
        "n > 1.5": list(range(rows)),
        "CASE WHEN day > 3 THEN 1 END = 1": [i for i in range(rows) if frame.day[i] > 3],
        "NULL OR n > 16777230": [i for i in range(rows) if 2**24 + i > 16777230],
        "COALESCE(NULL, day) = 1": [i for i in range(rows) if frame.day[i] == 1],
        "amount = 3.33": [1],
    }
    for i, (where, ids) in enumerate(everyday.items()):
        out = tmp_path / f"out{i}"
        said = runner.invoke(app, ["score", "--model", str(tmp_path / "m.json"), "--input",
                                   str(tmp_path / "in"), "--output", str(out), "--keep", "id",
                                   "--filter", where])  # fmt: skip
        assert said.exit_code == 0, (where, said.output)
        assert sorted(pd.read_parquet(out).id) == ids, where
    command = ["score", "--model", str(tmp_path / "m.json"), "--input", str(tmp_path / "in"),
               "--output", str(tmp_path / "failed"), "--keep", "id"]  # fmt: skip
    failed = runner.invoke(app, [*command, "--filter", "day / (day - day) > 1"])
    assert failed.exit_code == 6, failed.output
    assert "fails on a row of the input as Spark SQL's ANSI mode does (division by zero)" in (
        failed.output) and "Parquet" not in failed.output  # fmt: skip
    assert not (tmp_path / "failed" / "_temporary").exists()
    guarded = runner.invoke(app, [*command, "--filter",
                                  "CASE WHEN day <> 3 THEN 1 / (day - 3) END > 0"])  # fmt: skip
    assert guarded.exit_code == 0, guarded.output
    quoted = runner.invoke(app, [*command, "--filter", "\"region\" = 'EU'"])
    assert quoted.exit_code == 6 and "quote a column with backticks (`region`)" in quoted.output

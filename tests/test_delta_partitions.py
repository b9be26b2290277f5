"""Delta output as delta-rs's own writer would leave it: per-file statistics (min, max,
null counts) that readers skip files by, and partition columns, so that a nightly table
partitioned by date can be overwritten one partition at a time, exactly once across a
kill and its rerun (the report: add actions carried only numRecords, no partitions).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import scoring
from scoring._formats.publication import Publication
from scoring.errors import ConfigError

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
DAYS = ["2026-11-20", "2026-11-21", "2026-11-22"]
ROWS = 240


@pytest.fixture
def nightly(tmp_path: Path) -> tuple[Path, str, Any]:
    """A features folder partitioned by date, and a model file."""
    import xgboost

    rng = np.random.default_rng(9)
    X = pd.DataFrame(rng.normal(size=(ROWS, 3)), columns=["a", "b", "c"])
    X.iloc[::7, 1] = np.nan
    model = xgboost.XGBClassifier(n_estimators=6, max_depth=3).fit(X, X.a > 0)
    model.save_model(tmp_path / "m.json")
    for i, day in enumerate(DAYS):
        folder = tmp_path / "features" / f"date={day}"
        folder.mkdir(parents=True)
        X.assign(id=np.arange(ROWS) + 1000 * i).to_parquet(folder / "part-0.parquet")
    return tmp_path, str(tmp_path / "m.json"), model


def _adds(table: Path) -> list[dict[str, Any]]:
    adds = []
    for log in sorted((table / "_delta_log").glob("*.json")):
        adds += [json.loads(line)["add"] for line in log.read_text().splitlines()
                 if '"add"' in line]  # fmt: skip
    return adds


def _run(root: Path, model: str, mode: str | None = None, **kw: Any) -> Any:
    out = scoring.Output(f"delta:{root / 'scores'}", mode=mode, partition_by=["date"])
    return scoring.score_parquet(root / "features", out, model, keep=["id", "date"],
                                 progress=False, **kw)  # fmt: skip


def test_stats_and_partitions_are_those_delta_rs_writes(nightly: tuple[Path, str, Any]) -> None:
    root, model, _ = nightly
    _run(root, model)
    ours = {a["partitionValues"]["date"]: json.loads(a["stats"]) for a in _adds(root / "scores")}
    table = deltalake.DeltaTable(str(root / "scores"))
    assert table.metadata().partition_columns == ["date"]
    frame = table.to_pandas()
    assert sorted(frame["date"].unique()) == DAYS and len(frame) == 3 * ROWS
    # delta-rs writing the same rows, partitioned the same way: the same statistics.
    deltalake.write_deltalake(str(root / "theirs"), frame, partition_by=["date"])
    theirs = {a["partitionValues"]["date"]: json.loads(a["stats"]) for a in _adds(root / "theirs")}
    for day in DAYS:
        for key in ("numRecords", "minValues", "maxValues", "nullCount"):
            assert ours[day][key] == pytest.approx(theirs[day][key]), (day, key)
    assert all("date" not in s["minValues"] for s in ours.values()), "left to the folders"


def test_readers_skip_files_by_their_statistics(nightly: tuple[Path, str, Any]) -> None:
    root, model, _ = nightly
    _run(root, model)
    import pyarrow.dataset as ds

    dataset = deltalake.DeltaTable(str(root / "scores")).to_pyarrow_dataset()
    wanted = dataset.get_fragments(filter=ds.field("id") >= 2000)
    assert len(list(wanted)) == 1, "only the file whose id range holds the rows"


@pytest.mark.parametrize("point", ["placed a new file", "committed the new table version"])
def test_one_partition_is_replaced_exactly_once_across_a_kill(
    nightly: tuple[Path, str, Any], monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """Killed before its commit (the table as it was) or after it (the rerun finds the
    commit): either way the night's one partition is replaced once, the others kept."""
    root, model, _ = nightly
    _run(root, model)
    for day in DAYS[:2]:  # the next night: only the last day's input is rescored
        shutil.rmtree(root / "features" / f"date={day}")
    step = Publication.step

    class Killed(BaseException):
        pass

    def killed(self: Publication, done: str) -> None:
        step(self, done)
        if done == point:
            raise Killed()

    monkeypatch.setattr(Publication, "step", killed)
    with pytest.raises(Killed):
        _run(root, model, mode="overwrite_partitions")
    monkeypatch.undo()
    committed = point == "committed the new table version"
    assert deltalake.DeltaTable(str(root / "scores")).version() == (1 if committed else 0)
    again = _run(root, model, mode="overwrite_partitions")
    assert again.already_complete == committed, "the rerun finds its commit: nothing twice"
    table = deltalake.DeltaTable(str(root / "scores"))
    assert table.version() == 1
    frame = table.to_pandas()
    assert frame.groupby("date").size().to_dict() == dict.fromkeys(DAYS, ROWS)
    assert not frame.duplicated(["date", "id"]).any()


@pytest.mark.parametrize(("given", "says"), [
    ({"partition_by": ["c"]}, "must be a kept column"),
    ({"partition_by": ["id"]}, "must partition the input"),
    ({"partition_by": ["date"], "output_format": "parquet"}, "needs a table output"),
    ({"partition_by": [], "mode": "overwrite_partitions"}, "name the output's partition"),
])  # fmt: skip
def test_partitions_that_cannot_be_are_refused_by_name(
    nightly: tuple[Path, str, Any], given: dict[str, Any], says: str
) -> None:
    root, model, _ = nightly
    out = root / "scores"
    fmt = given.pop("output_format", "delta")
    target = scoring.Output(str(out) if fmt == "parquet" else f"delta:{out}", **given)
    with pytest.raises(ConfigError, match=says):
        scoring.score_parquet(root / "features", target, model, keep=["id", "date"],
                              progress=False)  # fmt: skip
    assert not out.exists()


def test_an_unpartitioned_table_gets_statistics_too(nightly: tuple[Path, str, Any]) -> None:
    root, model, _ = nightly
    scoring.score_parquet(root / "features", f"delta:{root / 'flat'}", model, keep=["id"],
                          progress=False)  # fmt: skip
    stats = [json.loads(a["stats"]) for a in _adds(root / "flat")]
    assert len(stats) == 3 and all({"id", "probability", "label"} <= set(s["minValues"])
                                   for s in stats)  # fmt: skip
    arrow = deltalake.DeltaTable(str(root / "flat")).to_pyarrow_table()
    assert arrow.schema.field("id").type == pa.int64()


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_the_spark_engine_writes_the_partitioned_table(nightly: tuple[Path, str, Any]) -> None:
    """Spark's own committer partitions its write by value (key=value folders, the column
    left out); the driver adds the files with their partitions and statistics."""
    pytest.importorskip("pyspark")
    root, model, _ = nightly
    _run(root, model, engine="spark", engine_options={"master": "local[1]"})
    table = deltalake.DeltaTable(str(root / "scores"))
    assert table.metadata().partition_columns == ["date"]
    frame = table.to_pandas()
    assert frame.groupby("date").size().to_dict() == dict.fromkeys(DAYS, ROWS)
    adds = _adds(root / "scores")
    assert {a["partitionValues"]["date"] for a in adds} == set(DAYS)
    assert all("id" in json.loads(a["stats"])["minValues"] for a in adds)


def test_two_partition_columns_replace_exactly_the_pairs_a_run_writes(
    nightly: tuple[Path, str, Any],
) -> None:
    """Partitions by date and region: a night rescoring (day 3, eu) replaces that pair
    only, not (day 3, us) nor (day 1, eu), which filters per column would also match."""
    root, model, _ = nightly
    source = root / "regional"
    for day in (DAYS[0], DAYS[2]):
        for region in ("eu", "us"):
            folder = source / f"date={day}" / f"region={region}"
            folder.mkdir(parents=True)
            shutil.copy(root / "features" / f"date={day}" / "part-0.parquet", folder)

    def run(mode: str | None = None) -> Any:
        out = scoring.Output(f"delta:{root / 'scores'}", mode=mode,
                             partition_by=["date", "region"])  # fmt: skip
        return scoring.score_parquet(source, out, model, keep=["id", "date", "region"],
                                     progress=False)  # fmt: skip

    run()
    for day, region in [(DAYS[0], "eu"), (DAYS[0], "us"), (DAYS[2], "us")]:
        shutil.rmtree(source / f"date={day}" / f"region={region}")
    run(mode="overwrite_partitions")
    table = deltalake.DeltaTable(str(root / "scores"))
    assert table.version() == 1
    frame = table.to_pandas()
    sizes = frame.groupby(["date", "region"]).size().to_dict()
    assert sizes == {(d, r): ROWS for d in (DAYS[0], DAYS[2]) for r in ("eu", "us")}
    assert not frame.duplicated(["date", "region", "id"]).any()

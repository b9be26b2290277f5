"""Every table mode decided again inside the commit, against a writer that lands
between a run's planning and its commit (a hook at the first file placed).

Found from outside: mode ``error`` was checked only at the start, so a Delta or Iceberg
table another writer created during the run got the run's rows appended to its own.
Now ``error`` and an incremental run refuse (the foreign table keeps exactly its rows,
nothing of the run is left in it); ``append``, ``overwrite`` and
``overwrite_partitions`` mean the same against the table that is there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import scoring
from scoring._formats.publication import Publication
from scoring.errors import OutputError

from .conftest import sql_catalog

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
MODES = ["error", "incremental", "append", "overwrite", "overwrite_partitions"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    import xgboost

    X = pd.DataFrame(np.random.default_rng(1).normal(size=(50, 2)), columns=["a", "b"])
    path = tmp_path_factory.mktemp("model") / "m.json"
    xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X.a).save_model(path)
    return str(path)


def _foreign() -> pa.Table:
    """Another writer's rows: one in a partition this run writes, one in another."""
    return pa.table({"id": pa.array([-1, -2], pa.int64()), "prediction": [0.5, 0.5],
                     "day": ["d1", "d9"]})  # fmt: skip


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("mode", MODES)
def test_a_table_created_while_the_run_scored_is_met_as_the_mode_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, fmt: str, mode: str
) -> None:
    rng = np.random.default_rng(2)
    for day in ("d1", "d2"):
        folder = tmp_path / "features" / f"day={day}"
        folder.mkdir(parents=True)
        start = 0 if day == "d1" else 10
        rows = {"a": rng.normal(size=10), "b": rng.normal(size=10),
                "id": np.arange(start, start + 10)}  # fmt: skip
        pd.DataFrame(rows).to_parquet(folder / "p.parquet")
    catalog = sql_catalog("race", tmp_path, monkeypatch) if fmt == "iceberg" else None
    url = f"delta:{tmp_path / 'out'}" if fmt == "delta" else "iceberg:race.sales.out"

    def other_writer() -> None:
        if fmt == "delta":
            deltalake.write_deltalake(str(tmp_path / "out"), _foreign(), partition_by=["day"])
        else:
            assert catalog is not None
            table = catalog.create_table("sales.out", schema=_foreign().schema)
            with table.update_spec() as spec:
                spec.add_identity("day")
            table.append(_foreign())

    step, landed = Publication.step, []

    def hooked(self: Publication, done: str) -> None:
        if not landed:  # between planning and commit, once
            landed.append(done)
            other_writer()
        step(self, done)

    monkeypatch.setattr(Publication, "step", hooked)
    incremental = mode == "incremental"
    target = scoring.Output(url, mode=None if incremental else mode, partition_by=["day"])
    call = dict(keep=["id", "day"], progress=False)
    source = scoring.Input(str(tmp_path / "features"), incremental=incremental)
    if mode in ("error", "incremental"):
        with pytest.raises(OutputError, match=r"changed while this run scored.*nothing of "
                                              r"this run was committed"):  # fmt: skip
            scoring.score_parquet(source, target, model, **call)
        expected = {-1, -2}
    else:
        scoring.score_parquet(source, target, model, **call)
        ours = set(range(20))
        expected = {"append": ours | {-1, -2}, "overwrite": ours,
                    "overwrite_partitions": ours | {-2}}[mode]  # fmt: skip
    assert landed, "the other writer landed inside the run"
    if fmt == "delta":
        ids = deltalake.DeltaTable(str(tmp_path / "out")).to_pyarrow_table().column("id")
        left = sorted(p.name for p in (tmp_path / "out").iterdir())
        if mode in ("error", "incremental"):
            assert not [n for n in left if n.startswith(("scoring-", "_temporary"))], left
    else:
        assert catalog is not None
        ids = catalog.load_table("sales.out").scan().to_arrow().column("id")
    assert sorted(ids.to_pylist()) == sorted(expected)


@pytest.mark.parametrize("raised", ["ValidationException", "CommitFailedException"])
def test_an_iceberg_commit_another_one_beat_is_one_line_and_rerun_commits_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, raised: str
) -> None:
    """Found from outside: an ``overwrite`` racing another commit raised pyiceberg's own
    ValidationException (the files it replaces were gone)."""
    import pyiceberg.exceptions
    from pyiceberg.table import Transaction

    folder = tmp_path / "features"
    folder.mkdir()
    pd.DataFrame({"a": [0.1, 0.2], "b": [0.3, 0.4], "id": [1, 2]}).to_parquet(folder / "p.parquet")
    catalog = sql_catalog("race", tmp_path, monkeypatch)
    target = scoring.Output("iceberg:race.sales.out", mode="overwrite")
    scoring.score_parquet(str(folder), target, model, keep=["id"], progress=False)
    error = getattr(pyiceberg.exceptions, raised)

    def beaten(self: Transaction) -> None:
        raise error("Missing required files to delete: s3://lake/data/one.parquet")

    with monkeypatch.context() as patched:
        patched.setattr(Transaction, "commit_transaction", beaten)
        with pytest.raises(OutputError, match=r"changed while this run committed.*rerun") as caught:
            scoring.score_parquet(str(folder), target, model, keep=["id"], progress=False)
    assert "\n" not in str(caught.value)
    scoring.score_parquet(str(folder), target, model, keep=["id"], progress=False)
    ids = catalog.load_table("sales.out").scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == [1, 2]

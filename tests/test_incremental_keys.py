"""Incremental runs against a full rescore, over every key shape and change kind.

A Delta input with its change data feed, scored incrementally into a Delta output
merged on the key; then one kind of change; then the next run.  The output must equal
a full rescore of the latest input, row for row, or the run is refused by name: a key
that does not name one row (repeated, or NULL) at the first run that records it.

Found from outside: a repeated key lost rows (a delete of one removed both), a NULL key
kept stale rows (``t.id = s.id`` never matches NULL), an input whose rows were all
deleted was refused as "nothing to score" and its deletes never applied, and a table
partitioned by a value that needs escaping could not be followed at all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import scoring
from scoring.errors import InputError

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
FEATURES = ["a", "b"]
FEED = {"delta.enableChangeDataFeed": "true"}
CITIES = ["New York", "a/b", "50%", "é", "x=y", "plain"]
KEYS = {"unique": ["id"], "composite": ["id", "city"]}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    import xgboost

    rng = np.random.default_rng(5)
    X = pd.DataFrame(rng.normal(size=(300, 2)), columns=FEATURES)
    clf = xgboost.XGBClassifier(n_estimators=5, max_depth=3).fit(X, X.a + X.b > 0)
    path = tmp_path_factory.mktemp("model") / "m.json"
    clf.save_model(path)
    return str(path), clf


def _rows(ids: range, *, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(len(ids), 2)), columns=FEATURES)
    frame["id"] = np.array(ids, dtype=np.int64)
    frame["city"] = [CITIES[i % len(CITIES)] for i in ids]
    return frame


def _score(
    source: Path, out: Path, model: str, key: list[str], **engine: Any
) -> scoring.ScoreReport:
    return scoring.score_parquet(
        scoring.Input(str(source), incremental=True), scoring.Output(f"delta:{out}", key=key),
        model, keep=["id", "city"], progress=False, **engine,
    )  # fmt: skip


def _files_merged(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The file records of every merge of an engine's own files (Spark's), as
    :meth:`TablePublisher.publish_files` returns them."""
    from scoring._formats.table import TablePublisher

    seen: list[Any] = []
    publish_files = TablePublisher.publish_files

    def recorded(self: TablePublisher, target: Any, *args: Any, **kwargs: Any) -> Any:
        manifest = publish_files(self, target, *args, **kwargs)
        if target.mode == "merge":
            seen.extend(manifest.published())
        return manifest

    monkeypatch.setattr(TablePublisher, "publish_files", recorded)
    return seen


def _same_as_a_full_rescore(out: Path, source: Path, clf: Any) -> None:
    latest = deltalake.DeltaTable(str(source)).to_pandas()
    want = sorted(zip(latest.id, latest.city, clf.predict_proba(latest[FEATURES])[:, 1],
                      strict=True))  # fmt: skip
    got_frame = deltalake.DeltaTable(str(out)).to_pandas()
    got = sorted(zip(got_frame.id, got_frame.city, got_frame.probability, strict=True))
    assert [(i, c) for i, c, _ in got] == [(i, c) for i, c, _ in want]
    np.testing.assert_allclose([p for *_, p in got], [p for *_, p in want], rtol=1e-6)


def _update(table: Any) -> None:
    table.update(predicate="id % 3 = 0", updates={"a": "a + 1.5"})


def _overwrite(path: Path) -> None:
    deltalake.write_deltalake(str(path), _rows(range(20, 50), seed=3), mode="overwrite")


def _restore(path: Path) -> None:
    table = deltalake.DeltaTable(str(path))
    table.delete("id < 10")
    deltalake.DeltaTable(str(path)).restore(0)


def _insert(path: Path) -> None:
    deltalake.write_deltalake(str(path), _rows(range(40, 55), seed=1), mode="append")


CHANGES: dict[str, Callable[[Path], None]] = {
    "insert": _insert,
    "update": lambda p: _update(deltalake.DeltaTable(str(p))),
    "delete": lambda p: deltalake.DeltaTable(str(p)).delete("id % 4 = 1"),
    "all rows deleted": lambda p: deltalake.DeltaTable(str(p)).delete(),
    "overwrite": _overwrite,
    "restore": _restore,
}


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "escaped-partitions"])
@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("shape", sorted(KEYS))
def test_each_change_of_each_key_shape_ends_as_a_full_rescore(
    tmp_path: Path, model: tuple[str, Any], shape: str, change: str, partitioned: bool
) -> None:
    path, clf = model
    source, out = tmp_path / "in", tmp_path / "out"
    deltalake.write_deltalake(str(source), _rows(range(40)), configuration=FEED,
                              partition_by=["city"] if partitioned else None)  # fmt: skip
    assert _score(source, out, path, KEYS[shape]).changes["kind"] == "full"  # type: ignore[index]
    CHANGES[change](source)
    _score(source, out, path, KEYS[shape])
    _same_as_a_full_rescore(out, source, clf)
    again = _score(source, out, path, KEYS[shape])  # nothing changed since: nothing to do
    assert again.already_complete
    _same_as_a_full_rescore(out, source, clf)


@pytest.mark.parametrize(
    ("first", "says"),
    [
        (pd.concat([_rows(range(10)), _rows(range(3, 4), seed=2)]), r"2 rows of key \{'id': 3\}"),
        (_rows(range(10)).astype({"id": "Int64"}).assign(
            id=lambda f: f.id.mask(f.index == 4)), "a row with a null 'id'"),
    ],
    ids=["repeated", "null"],
)  # fmt: skip
def test_a_key_that_names_no_one_row_is_refused_at_the_first_run(
    tmp_path: Path, model: tuple[str, Any], first: pd.DataFrame, says: str
) -> None:
    path, _ = model
    source, out = tmp_path / "in", tmp_path / "out"
    frame = first.reset_index(drop=True)
    frame["id"] = frame["id"].astype("Int64")
    deltalake.write_deltalake(str(source), pa.Table.from_pandas(frame, preserve_index=False),
                              configuration=FEED)  # fmt: skip
    with pytest.raises(InputError, match=says + r".*must identify one row and never be null"):
        _score(source, out, path, ["id"])
    assert not (out / "_delta_log").exists(), "refused before anything is written"


@pytest.mark.parametrize("later", ["repeated", "null"])
def test_a_later_change_that_repeats_or_nulls_a_key_is_refused(
    tmp_path: Path, model: tuple[str, Any], later: str
) -> None:
    """The first run's keys were good; an insert that repeats one (or has none) is
    refused by the run that would merge it, and the output stays as it was."""
    path, _ = model
    source, out = tmp_path / "in", tmp_path / "out"
    start = _rows(range(10)).astype({"id": "Int64"})
    deltalake.write_deltalake(str(source), start, configuration=FEED)
    _score(source, out, path, ["id"])
    extra = _rows(range(5, 6), seed=4).astype({"id": "Int64"})
    if later == "null":
        extra["id"] = pd.array([pd.NA], dtype="Int64")
    deltalake.write_deltalake(str(source), extra, mode="append")
    says = r"2 rows of key \{'id': 5\}" if later == "repeated" else "a changed row with a null"
    with pytest.raises(InputError, match=says):
        _score(source, out, path, ["id"])
    got = deltalake.DeltaTable(str(out)).to_pandas()
    assert sorted(got.id) == list(range(10))


def test_the_log_s_change_feed_is_delta_rs_s_where_delta_rs_can_read_it(tmp_path: Path) -> None:
    """The reader for escaped partitions (:mod:`scoring._formats.delta_cdf`) against delta-rs's
    own ``load_cdf``, on a table whose values need no escaping: every change kind."""
    from scoring._formats.delta_cdf import changes

    def plain(ids: range, seed: int) -> pd.DataFrame:
        return _rows(ids, seed=seed).assign(city=lambda f: np.where(f.id % 2, "eu", "us"))

    source = tmp_path / "in"
    deltalake.write_deltalake(str(source), plain(range(30), 0), configuration=FEED,
                              partition_by=["city"])  # fmt: skip
    deltalake.write_deltalake(str(source), plain(range(30, 40), 1), mode="append")
    for change in ("update", "delete", "restore"):
        CHANGES[change](source)
    deltalake.write_deltalake(str(source), plain(range(5, 25), 2), mode="overwrite")
    table = deltalake.DeltaTable(str(source))
    columns = ["id", "a", "city", "_change_type", "_commit_version"]
    theirs = pa.table(table.load_cdf(starting_version=1, columns=columns))
    ours = changes(str(source), schema=pa.schema(table.schema().to_arrow()),
                   partitions=["city"], since=1, until=table.version(),
                   columns=columns)  # fmt: skip

    def rows(t: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(zip(*(t.column(c).to_pylist() for c in columns), strict=True))

    assert len(ours) > 30 and rows(ours) == rows(theirs)


def test_a_run_refused_before_it_staged_anything_leaves_no_staging(
    tmp_path: Path, model: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Found from outside: the refused run's record stayed, and the next run warned that
    it was resuming an interrupted run's 0 staged files."""
    import logging

    path, clf = model
    source, out = tmp_path / "in", tmp_path / "out"
    repeated = pd.concat([_rows(range(10)), _rows(range(3, 4), seed=2)], ignore_index=True)
    deltalake.write_deltalake(str(source), repeated, configuration=FEED)
    with pytest.raises(InputError, match="must identify one row"):
        _score(source, out, path, ["id"])
    assert not (out / "_temporary").exists()
    deltalake.write_deltalake(str(source), _rows(range(10)), mode="overwrite")
    with caplog.at_level(logging.WARNING, logger="scoring"):
        _score(source, out, path, ["id"])
    assert not [r for r in caplog.records if "interrupted" in r.getMessage()]
    _same_as_a_full_rescore(out, source, clf)


def test_a_change_file_that_cannot_be_read_is_one_line_naming_the_table(
    tmp_path: Path, model: tuple[str, Any]
) -> None:
    """The log's own reader (escaped partitions) meets a damaged change file: one line
    naming the table and the versions, and the fix, not pyarrow's exception."""
    path, _ = model
    source, out = tmp_path / "in", tmp_path / "out"
    deltalake.write_deltalake(str(source), _rows(range(12)), configuration=FEED,
                              partition_by=["city"])  # fmt: skip
    _score(source, out, path, ["id"])
    _update(deltalake.DeltaTable(str(source)))
    damaged = sorted((source / "_change_data").rglob("*.parquet"))
    assert damaged, "the update wrote change files"
    damaged[0].write_bytes(b"not parquet at all")
    said = r"cannot read the changes of Delta table .* versions 0 and 1: .*score everything again"
    with pytest.raises(InputError, match=said) as caught:
        _score(source, out, path, ["id"])
    assert "\n" not in str(caught.value)


#: The changes in the order the engines' test makes them, one after another on one table.
IN_TURN = ["insert", "update", "delete", "overwrite", "restore", "all rows deleted"]


@pytest.mark.parametrize("engine", ["ray", "spark"])
def test_every_change_in_turn_on_each_engine_ends_as_a_full_rescore(
    tmp_path: Path, model: tuple[str, Any], engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver computes the change set and merges; the workers score the changed rows
    (a folder of staged rows, partitioned as the input is). Each change kind in turn, on
    a table partitioned by values a path escapes and on a flat one, with a composite key
    (a unique key's merge is the driver's, the same on every engine: the grid above)."""
    import shutil

    module = pytest.importorskip(engine if engine == "ray" else "pyspark")
    if engine == "spark" and shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime")
    if engine == "ray":  # a Ray instance of this test's own, its workers at our priority
        monkeypatch.setenv("RAY_worker_niceness", "0")
        module.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    options = {"num_workers": 1, "num_cpus": 1} if engine == "ray" else {"master": "local[1]"}
    path, clf = model
    merged = _files_merged(monkeypatch)
    try:
        for partitioned in (True, False):
            source, out = tmp_path / f"in-{partitioned}", tmp_path / f"out-{partitioned}"
            deltalake.write_deltalake(str(source), _rows(range(40)), configuration=FEED,
                                      partition_by=["city"] if partitioned else None)  # fmt: skip
            engaged = {"engine": engine, "engine_options": options}
            _score(source, out, path, KEYS["composite"], **engaged)
            for change in IN_TURN:
                CHANGES[change](source)
                _score(source, out, path, KEYS["composite"], **engaged)
                _same_as_a_full_rescore(out, source, clf)
    finally:
        if engine == "ray":
            module.shutdown()
    if engine == "spark":  # Spark's own files, merged: each recorded as the product's are
        assert merged and all(len(f.sha256) == 64 and f.bytes > 0 for f in merged), merged

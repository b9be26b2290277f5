"""The data path from Parquet to the model and back: columns taken as Arrow holds them,
outputs as before (values, labels, schema, manifest), row groups gathered to size, a
dictionary only where it pays, busy seconds per stage, and side-by-side torch calls that
leave the process's thread count as they found it.  Speed itself is measured by
``benchmarks/e2e_pipeline.py``, not here."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

import scoring
from scoring._engines import local
from scoring._inputs import Columns, _arrow_floats, prepare
from scoring._parity import as_frame, probe_rows
from scoring._scorer import Scorer
from scoring.cli import app
from scoring.errors import ConfigError

from .conftest import RECIPES, built
from .test_score_parquet import model_frame, write_input

runner = CliRunner()


def test_a_float_column_without_nulls_is_read_from_its_own_buffer() -> None:
    _, forest, _ = built("xgb_reg")
    column = pa.array(np.arange(10, dtype=np.float32))
    assert np.shares_memory(_arrow_floats(column, 0, forest), column.to_numpy())
    holes = _arrow_floats(pa.array([1.0, None, 3.0], type=pa.float32()), 0, forest)
    np.testing.assert_array_equal(holes, [1.0, np.nan, 3.0])
    assert _arrow_floats(pa.array([1, 2], type=pa.int16()), 0, forest).dtype == np.float64


def _arrow_input(name: str, rows: np.ndarray) -> pa.Table:
    """``rows`` as a Parquet file of the model's input holds them (category columns as
    dictionaries, an encoder's labels as they are)."""
    _, forest, _ = built(name)
    if RECIPES[name].frame or forest.feature_names or forest.categories:
        return pa.Table.from_pandas(as_frame(rows, forest), preserve_index=False)
    return pa.table({f"f{j}": rows[:, j] for j in range(rows.shape[1])})


def _outcome(scorer: Scorer, table: pa.Table) -> pa.Table | str:
    try:
        return scorer.score(table)
    except scoring.errors.ScoringError as exc:  # what native refuses: refused alike
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_scores_its_columns_as_it_scores_its_rows(name: str) -> None:
    """The shared walk reads a batch feature-major, the input's own buffers where it
    can: its output columns equal those of the row-major matrix bit for bit, on the
    parity probes (thresholds, NaN, +-inf, unseen categories) at float64 and as float32
    columns, and what one refuses the other refuses with the same message."""
    model, forest, _ = built(name)
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    scorer = Scorer(cm)
    if forest.stages:  # a chain runs its stages on rows
        assert not scorer.backend.takes_columns
        return
    assert scorer.backend.takes_columns  # the path under test is taken
    rows = probe_rows(forest, n_rows=300, seed=5)
    for table in (_arrow_input(name, rows), _arrow_input(name, rows).cast(
            pa.schema([pa.field(f.name, pa.float32()) if pa.types.is_float64(f.type) else f
                       for f in _arrow_input(name, rows).schema]))):  # fmt: skip
        scorer.backend.takes_columns = True
        by_columns = _outcome(scorer, table)
        scorer.backend.takes_columns = False
        by_rows = _outcome(scorer, table)
        assert isinstance(by_rows, str) == isinstance(by_columns, str), (by_rows, by_columns)
        assert by_columns == by_rows if isinstance(by_rows, str) else by_columns.equals(by_rows)


def test_columns_are_the_input_s_buffers_where_they_can_be_and_copies_where_they_change(
) -> None:  # fmt: skip
    """A float column of the reader's dtype without nulls is its own buffer (read, never
    written); nulls, another dtype, the model's missing value or an imputer's fill make a
    copy of that column alone, and the input stays as it was."""
    _, forest, _ = built("xgb_reg")  # float32 reader, 6 features
    rng = np.random.default_rng(3)
    values = rng.normal(size=(100, forest.n_features)).astype(np.float32)
    names = forest.feature_names or [f"f{i}" for i in range(forest.n_features)]
    arrays = [pa.array(values[:, j]) for j in range(forest.n_features)]
    arrays[1] = pa.array(values[:, 1].astype(np.float64))  # cast to the reader's float32
    arrays[2] = pa.array(np.where(values[:, 2] > 0, values[:, 2], None), pa.float32())
    table = pa.table(dict(zip(names, arrays, strict=True)))
    cols = prepare(table, forest, columns=True)
    assert isinstance(cols, Columns) and cols.shape == values.shape
    assert cols.dtype == np.float32
    assert np.shares_memory(cols.arrays[0], arrays[0].to_numpy())
    assert not np.shares_memory(cols.arrays[1], arrays[1].to_numpy())
    np.testing.assert_array_equal(cols.rows(), prepare(table, forest))
    np.testing.assert_array_equal(cols[10:20].rows(), prepare(table, forest)[10:20])
    missing = replace(forest, missing_value=float(values[0, 0]))
    with_missing = prepare(table, missing, columns=True)
    assert np.isnan(with_missing.arrays[0][0]) and values[0, 0] == arrays[0][0].as_py()
    np.testing.assert_array_equal(with_missing.rows(), prepare(table, missing))


@pytest.mark.parametrize("rows", [0, 1, 4095, 4096, 4097, 10_000])
def test_the_matrix_is_the_columns_row_by_row_across_blocks(rows: int) -> None:
    """Written block by block (4,096 rows): every row, every column, in place; float64
    columns past float32's range become inf for a float32 reader, as native reads them."""
    _, forest, _ = built("xgb_reg")  # float32 reader, 6 features
    rng = np.random.default_rng(rows)
    values = rng.normal(size=(rows, forest.n_features))
    values[rng.random(values.shape) < 0.1] = np.nan
    if rows:
        values[0, 1] = 1e300
    names = forest.feature_names or [f"f{i}" for i in range(forest.n_features)]
    table = pa.table({n: values[:, j] for j, n in enumerate(names)})
    mat = prepare(table, forest)
    with np.errstate(over="ignore"):
        expected = values.astype(np.float32)  # 1e300 -> inf
    assert mat.flags.c_contiguous and mat.dtype == np.float32 and mat.shape == values.shape
    np.testing.assert_array_equal(mat, expected)


@pytest.mark.parametrize("backend", ["tensor", "native"])
def test_outputs_are_as_native_gives_them_with_their_schema_and_manifest(
    tmp_path: Path, backend: str
) -> None:
    model, X = model_frame("lgb_clf", rows=3000)
    frame = write_input(X, tmp_path / "in", files=3)
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"],
                          backend=backend, progress=False)  # fmt: skip
    out = pq.read_table(tmp_path / "out")
    assert out.schema.remove_metadata() == pa.schema(
        [("id", pa.int64()), ("probability", pa.float64()), ("label", pa.int64())]
    )
    np.testing.assert_array_equal(out["id"].to_numpy(), frame["id"].to_numpy())
    expected = model.predict_proba(X)[:, 1]
    np.testing.assert_allclose(out["probability"].to_numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out["label"].to_numpy(), model.predict(X))
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == 3000
    for entry in manifest["fragments"]:
        data = (tmp_path / "out" / entry["output"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)


def test_row_groups_gather_batches_and_only_labels_are_dictionary_coded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 500 rows gathered into row groups of 1,000 (the engine's own size is
    1M rows); the unique id and the scores are written plainly, the label coded."""
    monkeypatch.setattr(local, "ROW_GROUP_ROWS", 1000)
    model, X = model_frame("lgb_clf", rows=2500)
    write_input(X, tmp_path / "in", files=1)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    cm.implementation.batch_rows = 500
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", cm, keep=["id"], progress=False)
    (path,) = (tmp_path / "out").glob("*.parquet")
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 500]
    group = meta.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings
                 for i in range(group.num_columns)}  # fmt: skip
    assert any("DICTIONARY" in e for e in encodings["label"])
    assert not any("DICTIONARY" in e for e in encodings["id"] + encodings["probability"])


def test_each_stage_s_busy_seconds_are_reported(tmp_path: Path) -> None:
    model, X = model_frame("lgb_clf", rows=2000)
    write_input(X, tmp_path / "in", files=2)
    model.booster_.save_model(tmp_path / "model.txt")
    said = runner.invoke(app, ["score", "--model", str(tmp_path / "model.txt"), "--input",
                               str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                               "--backend", "tensor"])  # fmt: skip
    assert said.exit_code == 0, said.output
    busy = next(line for line in said.stderr.splitlines() if line.startswith("thread seconds"))
    for stage in ("read", "prepare", "kernel", "outputs", "write"):
        assert f" {stage} " in busy, busy


def _fresh_thread_count() -> int:
    """The torch thread count a thread started now sees (the process-wide value)."""
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


def test_side_by_side_tensor_calls_leave_the_process_thread_count_alone(tmp_path: Path) -> None:
    """Each call runs on one torch thread; torch keeps a process-wide copy of that count,
    read by compiled kernels, which must be what it was once the calls are done."""
    model, X = model_frame("lgb_clf", rows=3000)
    write_input(X, tmp_path / "in", files=3)
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="tree_traversal")
    cm.implementation.batch_rows = 500
    before = _fresh_thread_count()
    calls: list[int] = []
    score = cm.implementation.score

    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append(torch.get_num_threads())
        return score(*args, **kwargs)

    cm.implementation.score = noted  # type: ignore[method-assign]
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", cm, progress=False)
    if local.cpu_threads() >= 2:  # side by side, so one thread each
        assert cm.implementation.threads_per_call == 1
    assert calls and _fresh_thread_count() == before


def _scored_files(out: Path) -> dict[str, str]:
    """Each output file's sha256, and the manifest's file records in their order."""
    manifest = json.loads((out / "_scoring_manifest.json").read_text())
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.parquet")}
    records = [(e["relpath"], e["output"], e["rows"], e["sha256"]) for e in manifest["fragments"]]
    return {"files": json.dumps(files, sort_keys=True), "records": json.dumps(records)}


@pytest.mark.parametrize("lanes", [2, 3, 5])
def test_files_at_once_write_the_files_one_at_a_time_writes(tmp_path: Path, lanes: int) -> None:
    """Several files in flight (their batches interleaved in one scoring pool) give the
    same bytes in every output file and the same manifest, in input order."""
    model, X = model_frame("lgb_clf", rows=4000)
    write_input(X, tmp_path / "in", files=5)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    cm.implementation.batch_rows = 300  # several batches per file, from several files at once
    scored = {}
    for at_once in (1, lanes):
        out = tmp_path / f"out-{at_once}"
        scoring.score_parquet(tmp_path / "in", out, cm, keep=["id"], progress=False,
                              engine_options={"files_at_once": at_once})  # fmt: skip
        scored[at_once] = _scored_files(out)
    assert scored[lanes] == scored[1]


def test_a_file_failing_among_others_in_flight_stops_them_and_a_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One lane fails mid-file: the others stop, nothing is published, the files already
    journaled stay journaled, and the rerun scores only the rest."""
    model, X = model_frame("lgb_clf", rows=6000)
    frame = write_input(X, tmp_path / "in", files=6)
    cm = scoring.compile(model, backend="native")
    write = local._OutputFile.write
    broken = threading.Event()

    def failing(self: Any, table: pa.Table, counts: Any = None) -> None:
        if self.fragment.relpath == "part-4.parquet" and not broken.is_set():
            broken.set()
            raise OSError(28, "No space left on device", "part-4.parquet")
        write(self, table, counts)

    monkeypatch.setattr(local._OutputFile, "write", failing)
    with pytest.raises(OSError, match="No space left"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", cm, keep=["id"],
                              progress=False, engine_options={"files_at_once": 3})  # fmt: skip
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    journaled = len(list((tmp_path / "out" / "_temporary" / "_journal").glob("*.json")))
    assert journaled < 6
    report = scoring.score_parquet(tmp_path / "in", tmp_path / "out", cm, keep=["id"],
                                   progress=False, engine_options={"files_at_once": 3})  # fmt: skip
    assert report.rows == 6000 - journaled * 1000 and report.rows_skipped == journaled * 1000
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert ids.tolist() == frame["id"].tolist()


@pytest.mark.parametrize("given", [0, -1, "two", 1.5, True])
def test_files_at_once_is_a_positive_count(tmp_path: Path, given: Any) -> None:
    model, X = model_frame("lgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=1)
    with pytest.raises(ConfigError, match="files_at_once") as refused:
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, progress=False,
                              engine_options={"files_at_once": given})  # fmt: skip
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_lanes_follow_the_cpus() -> None:
    assert [local.file_lanes(n) for n in (1, 2, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 4]


def test_an_sdk_call_reads_the_caller_s_data_where_it_is_and_never_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A float32 array the model reads as it is is not copied; one whose values change
    (the model's missing value) is copied, the caller's left alone.  A frame or an Arrow
    table reaches the shared walk as columns, scored as its rows are."""
    model, forest, _ = built("xgb_reg")
    rows = np.random.default_rng(4).normal(size=(300, forest.n_features)).astype(np.float32)
    assert np.shares_memory(prepare(rows, forest), rows)
    missing = replace(forest, missing_value=float(rows[0, 0]))
    rewritten = prepare(rows, missing)
    assert not np.shares_memory(rewritten, rows)
    assert np.isnan(rewritten[0, 0]) and not np.isnan(rows[0, 0])
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    walk = cm.implementation.module.kernel.walk
    seen: list[type] = []
    sums = walk.sums
    monkeypatch.setattr(walk, "sums", lambda x, start: seen.append(type(x)) or sums(x, start))
    names = forest.feature_names or [f"f{i}" for i in range(forest.n_features)]
    table = pa.table({n: rows[:, j] for j, n in enumerate(names)})
    expected = cm.predict_raw(rows)
    np.testing.assert_array_equal(cm.predict_raw(table), expected)
    np.testing.assert_array_equal(cm.predict_raw(table.to_pandas()), expected)
    assert seen[1:] == [Columns, Columns] and seen[0] is not Columns

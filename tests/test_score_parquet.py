"""score_parquet and ``scoring score`` on the local engine, held to the native predictor."""

from __future__ import annotations

import copy
import errno
import json
import re
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

import scoring
from scoring._engines import local
from scoring._parity import probe_frame
from scoring._scorer import Scorer
from scoring.cli import app
from scoring.errors import (
    ConfigError,
    InputError,
    InvalidValueError,
    MissingColumnError,
    OutputError,
    ResourceLimitError,
)

from .conftest import built

runner = CliRunner()
FRAMEWORK_MODELS = ["xgb_multi", "xgb_booster_cat", "lgb_cat_frame", "lgb_reg", "sk_hgb_frame",
                    "sk_rf_clf", "sk_iforest", "sk_et_multi_clf", "sk_rf_multi_reg",
                    "xgb_multilabel", "xgb_multi_reg", "cb_multi", "cb_frame"]  # fmt: skip


def write_input(frame: pd.DataFrame, root: Path, *, files: int = 3) -> pd.DataFrame:
    """``frame`` plus an ``id`` column, split over ``files`` Parquet files."""
    frame = frame.copy()
    frame["id"] = np.arange(len(frame))
    root.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        table = pa.Table.from_pandas(frame.iloc[part], preserve_index=False)
        pq.write_table(table, root / f"part-{i}.parquet", row_group_size=500)
    return frame


def model_frame(name: str, rows: int = 3000) -> tuple[Any, pd.DataFrame]:
    model, forest, _ = built(name)
    X = probe_frame(forest, n_rows=rows)
    if not isinstance(X, pd.DataFrame):
        X = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    for j, column in enumerate(X.columns[: forest.n_features]):
        if not forest.accepts_inf(j):
            X[column] = X[column].replace([np.inf, -np.inf], np.nan)
    return model, X


def cuda_job(
    folder: Path, *, recipe: str, rows: int, files: int, engine: str, table: str
) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """A job file in ``folder`` scoring a registered ``recipe`` model on ``device =
    "cuda"`` with ``engine``, its cluster given by ``table`` (the engine's TOML table):
    the file, the input frame written and the features."""
    model, X = model_frame(recipe, rows=rows)
    frame = write_input(X, folder / "in", files=files)
    scoring.Registry(folder / "registry").register("churn", model)
    job = folder / "job.toml"
    job.write_text(f"""
name = "nightly"
model = "churn@1"
input = "{folder / "in"}"
output = "{folder / "out"}"
registry = "{folder / "registry"}"
engine = "{engine}"
device = "cuda"
keep = ["id"]

{table}
""")
    return job, frame, X


def native_columns(name: str, X: pd.DataFrame) -> dict[str, np.ndarray]:
    _, forest, native = built(name)
    features = X if forest.feature_names else X.to_numpy()
    if forest.task in ("binary", "multiclass"):
        proba = native.predict_proba(features)
        labels = forest.classes if forest.classes is not None else np.arange(proba.shape[1])
        out = {"label": np.asarray(labels)[proba.argmax(axis=1)]}
        if forest.task == "binary":
            out["probability"] = proba[:, 1]
        else:
            out.update({f"probability_{c}": proba[:, i] for i, c in enumerate(labels)})
        return out
    if forest.task == "multilabel":  # per label k: its probability and whether it is set
        columns = {}
        for k, p in enumerate(native.predict_proba(features).T):
            columns[f"probability_{k}"], columns[f"label_{k}"] = p, (p > 0.5).astype(int)
        return columns
    if forest.task == "multioutput":  # per target k: its probabilities and its label
        model, columns = built(name)[0], {}
        labels = model.predict(features)
        for k, proba in enumerate(model.predict_proba(features)):
            columns.update({f"probability_{k}_{c}": proba[:, i] for i, c in
                            enumerate(model.classes_[k])})  # fmt: skip
            columns[f"label_{k}"] = labels[:, k]
        return columns
    prediction = native.predict(features)
    if prediction.ndim == 2:  # a regressor of several targets
        return {f"prediction_{k}": prediction[:, k] for k in range(prediction.shape[1])}
    return {"prediction": prediction}


@pytest.mark.parametrize("backend", ["tensor", "native"])
@pytest.mark.parametrize("name", FRAMEWORK_MODELS)
def test_output_matches_native(tmp_path: Path, name: str, backend: str) -> None:
    model, X = model_frame(name)
    frame = write_input(X, tmp_path / "in")
    result = scoring.score_parquet(
        tmp_path / "in", tmp_path / "out", model, keep=["id"], backend=backend, progress=False
    )
    assert result.rows == len(frame) and result.backend == backend
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])  # every row, in order
    assert_native_parity(out, name, X)


def _settings(model: Any) -> Any:
    return model.save_config() if hasattr(model, "save_config") else model.get_params()


@pytest.mark.parametrize(
    "name", ["xgb_multi", "xgb_booster_cat", "lgb_cat_frame", "sk_rf_clf", "sk_hgb_frame"]
)
def test_parallel_native_calls_match_serial_ones_and_leave_the_model_alone(name: str) -> None:
    model, X = model_frame(name, rows=2000)
    before = _settings(model)
    scorer = Scorer(scoring.compile(model, backend="native"))
    table = pa.Table.from_pandas(X, preserve_index=False)
    serial = scorer.score(table)
    calls = scorer.allow_parallel_calls(4)
    assert calls == (1 if name == "sk_hgb_frame" else 4)  # HGB's OpenMP threads: one call
    assert scorer.allow_parallel_calls(1) == 1
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(scorer.score, [table.slice(i, 250) for i in range(0, 2000, 250)]))
    assert pa.concat_tables(parts).equals(serial)
    assert _settings(model) == before  # the caller's model keeps its own thread setting


def test_a_forest_that_predicts_on_threads_is_copied_to_one_thread() -> None:
    model = copy.deepcopy(built("sk_rf_clf")[0]).set_params(n_jobs=2)  # built() is shared
    scorer = Scorer(scoring.compile(model, backend="native"))
    assert scorer.allow_parallel_calls(2) == 2
    assert scorer.backend.model.n_jobs == 1 and model.n_jobs == 2


def test_engine_scores_side_by_side_in_file_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, X = model_frame("xgb_multi", rows=6000)
    frame = write_input(X, tmp_path / "in", files=3)  # 500-row groups: 12 batches
    monkeypatch.setattr(local, "cpu_threads", lambda: 4)
    threads: set[str] = set()
    score = Scorer.score

    def noted(self: Scorer, batch: Any, **kwargs: Any) -> pa.Table:
        threads.add(threading.current_thread().name)
        return score(self, batch, **kwargs)

    monkeypatch.setattr(Scorer, "score", noted)
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"],
                          backend="native", progress=False)  # fmt: skip
    assert len({t for t in threads if t.startswith("score")}) > 1
    out = pq.read_table(tmp_path / "out").to_pandas()
    np.testing.assert_array_equal(out["id"], frame["id"])
    assert_native_parity(out, "xgb_multi", X)


def test_cpu_threads_follows_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert local.cpu_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert local.cpu_threads() >= 1


def test_bad_values_in_a_later_file_stop_the_run_and_publish_nothing(tmp_path: Path) -> None:
    model, X = model_frame("sk_rf_clf", rows=3000)  # a forest refuses inf
    write_input(X, tmp_path / "in", files=3)
    last = tmp_path / "in" / "part-2.parquet"
    good = pq.read_table(last)
    bad = good.to_pandas()
    bad.loc[bad.index[700], "f3"] = np.inf  # past the first file's trial rows
    pq.write_table(pa.Table.from_pandas(bad, preserve_index=False), last, row_group_size=500)
    with pytest.raises(InvalidValueError, match="'f3' has 1 infinite"):
        scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"],
                              backend="native", progress=False)  # fmt: skip
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert not list((tmp_path / "out").glob("*.parquet"))
    pq.write_table(good, last, row_group_size=500)  # fixed: the rerun publishes every row
    result = scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id"],
                                   backend="native", progress=False)  # fmt: skip
    ids = pq.read_table(tmp_path / "out", columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(3000)) and result.rows + result.rows_skipped == 3000


def assert_native_parity(out: pd.DataFrame, name: str, X: pd.DataFrame) -> None:
    """``out`` (rows in the order of ``X``) holds what the native predictor says."""
    for col, ref in native_columns(name, X).items():
        if out[col].dtype.kind == "f":
            np.testing.assert_allclose(out[col], ref, rtol=1e-5, atol=1e-5, err_msg=col)
        else:
            np.testing.assert_array_equal(out[col], ref, err_msg=col)


def test_registered_model_metadata_and_manifest(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=2000)
    reg = scoring.Registry(tmp_path / "reg")
    mv = reg.register("churn", model)
    reg.set_alias("churn", "production", 1)
    write_input(X, tmp_path / "in", files=2)
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", "churn@production",
                          registry=reg, keep=["id"], outputs="raw", progress=False)  # fmt: skip
    meta = pq.read_schema(tmp_path / "out" / "part-0.parquet").metadata
    assert meta[b"scoring._model"] == b"churn@1"
    assert meta[b"scoring._model.sha256"] == mv.sha256.encode()
    assert meta[b"scoring.version"] == scoring.__version__.encode()
    assert {b"scoring.backend", b"scoring.device"} <= set(meta)
    assert pq.read_schema(tmp_path / "out" / "part-0.parquet").names == [
        "id", "probability", "label", "raw"]  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == 2000 and len(manifest["fragments"]) == 2
    for entry in manifest["fragments"]:
        data = (tmp_path / "out" / entry["output"]).read_bytes()
        assert len(data) == entry["bytes"]
        assert pq.read_metadata(tmp_path / "out" / entry["output"]).num_rows == entry["rows"]
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert not (tmp_path / "out" / "_temporary").exists()


def test_nulls_ints_and_categories(tmp_path: Path) -> None:
    model, forest, native = built("lgb_cat_frame")
    X = probe_frame(forest, n_rows=1000)
    labels = list(forest.categories[0])
    # The same data as Arrow would carry it: dictionary-encoded category labels (some
    # never seen in training), nullable ints with nulls, and float nulls.
    cats = [None if pd.isna(v) else float(v) for v in X["feat_0"]]
    table = pa.table({
        "feat_0": pa.array(cats).dictionary_encode(),
        **{c: pa.array(X[c].to_numpy(), from_pandas=True) for c in X.columns[1:]},
        "id": pa.array(np.arange(len(X))),
    })  # fmt: skip
    table = table.set_column(1, "feat_1", pa.array(
        [None if np.isnan(v) or not np.isfinite(v) else int(v) for v in X["feat_1"]],
        type=pa.int64()))  # fmt: skip
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "data.parquet")
    scoring.score_parquet(tmp_path / "in", tmp_path / "out", model, keep=["id", "feat_0"],
                          backend="tensor", progress=False)  # fmt: skip
    out = pq.read_table(tmp_path / "out").to_pandas()
    ref = X.copy()
    ref["feat_0"] = pd.Categorical(
        [float(v) if v in labels else np.nan for v in cats], categories=forest.categories[0]
    )
    ref["feat_1"] = [np.nan if not np.isfinite(v) else float(int(v)) for v in X["feat_1"]]
    np.testing.assert_allclose(
        np.column_stack([out[f"probability_{c}"] for c in forest.classes]),
        native.predict_proba(ref), atol=1e-6,
    )  # fmt: skip
    kept = out["feat_0"].astype(object)
    assert kept.where(kept.notna(), None).tolist() == cats
    assert any(c is not None and c not in labels for c in cats)  # unseen ones were there


def test_hive_partitions_glob_and_memory_filesystem(tmp_path: Path) -> None:
    import fsspec

    model, X = model_frame("xgb_reg", rows=900)
    X["id"] = np.arange(len(X))
    fs = fsspec.filesystem("memory")
    for day, part in zip(["2026-11-20", "2026-11-21"], [X.iloc[:450], X.iloc[450:]], strict=True):
        with fs.open(f"/hive/date={day}/part-0.parquet", "wb") as f:
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False), f)
    scoring.score_parquet("memory://hive", "memory://scored", model, keep=["id", "date"],
                          progress=False)  # fmt: skip
    assert fs.exists("/scored/_SUCCESS")
    assert fs.exists("/scored/date=2026-11-21/part-0.parquet")
    with fs.open("/scored/date=2026-11-20/part-0.parquet", "rb") as f:
        first = pq.read_table(f).to_pandas()
    assert set(first["date"]) == {"2026-11-20"} and len(first) == 450
    glob = scoring.score_parquet("memory://hive/date=*/*.parquet", "memory://globbed", model,
                                 keep=["id"], progress=False)  # fmt: skip
    assert glob.rows == 900 and glob.files == 2


KILL_SCRIPT = textwrap.dedent("""
    import os, sys
    import scoring
    from scoring._journal.journal import Journal
    finish = Journal.finish
    calls = []
    def dying_finish(self, *args, **kwargs):
        if len(calls) == 2:
            os._exit(9)  # killed between files: two are staged and journaled
        calls.append(1)
        return finish(self, *args, **kwargs)
    Journal.finish = dying_finish
    scoring.score_parquet(sys.argv[1], sys.argv[2], sys.argv[3], keep=["id"], progress=False)
""")


def test_killed_run_resumes_and_publishes_every_row_once(tmp_path: Path) -> None:
    model, X = model_frame("lgb_reg", rows=5000)
    write_input(X, tmp_path / "in", files=5)
    model.booster_.save_model(tmp_path / "model.txt")
    args = [str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "model.txt")]
    killed = subprocess.run([sys.executable, "-c", KILL_SCRIPT, *args], capture_output=True)
    assert killed.returncode == 9, killed.stderr.decode()[-2000:]
    out = tmp_path / "out"
    assert not (out / "_SUCCESS").exists()
    assert not list(out.glob("*.parquet"))  # nothing published
    assert len(list((out / "_temporary" / "_journal").glob("*.json"))) == 2

    result = scoring.score_parquet(*args, keep=["id"], progress=False)
    assert result.rows_skipped == 2000 and result.rows == 3000
    ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(5000))
    assert (out / "_SUCCESS").exists() and not (out / "_temporary").exists()
    again = scoring.score_parquet(*args, keep=["id"], progress=False)
    assert again.already_complete
    with pytest.raises(OutputError, match="another model or input"):
        scoring.score_parquet(*args, keep=["id"], outputs="raw", progress=False)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "rewritten"])
def test_a_rerun_restores_a_published_file_lost_after_success(tmp_path: Path, damage: str) -> None:
    model, X = model_frame("lgb_reg", rows=3000)
    write_input(X, tmp_path / "in", files=3)
    args = [str(tmp_path / "in"), str(tmp_path / "out"), model]
    first = scoring.score_parquet(*args, keep=["id"], backend="tensor", progress=False)
    out = tmp_path / "out"
    manifest = (out / "_scoring_manifest.json").read_text()
    lost = out / "part-1.parquet"
    if damage == "deleted":
        lost.unlink()
    elif damage == "truncated":
        lost.write_bytes(lost.read_bytes()[:100])
    else:  # same size, other bytes: only the checksums of verify see it
        data = bytearray(lost.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lost.write_bytes(bytes(data))
        unverified = scoring.score_parquet(*args, keep=["id"], backend="tensor", progress=False)
        assert unverified.already_complete
    again = scoring.score_parquet(*args, keep=["id"], backend="tensor", progress=False,
                                  run=scoring.RunOptions(verify=damage == "rewritten"))  # fmt: skip
    assert not again.already_complete
    assert again.rows == 1000 and again.rows_skipped == 2000  # only the damaged file
    ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(3000))
    fragments = json.loads((out / "_scoring_manifest.json").read_text())["fragments"]
    assert [f["sha256"] for f in fragments] == [
        f["sha256"] for f in json.loads(manifest)["fragments"]
    ]  # the same bytes as the first run's (one backend: auto may time another pick)
    assert first.rows == 3000
    last = scoring.score_parquet(*args, keep=["id"], backend="tensor", progress=False,
                                 run=scoring.RunOptions(verify=True))  # fmt: skip
    assert last.already_complete


def test_a_rerun_of_a_complete_output_clears_staging_left_by_a_late_kill(tmp_path: Path) -> None:
    model, X = model_frame("lgb_reg", rows=1000)
    write_input(X, tmp_path / "in", files=2)
    args = [str(tmp_path / "in"), str(tmp_path / "out"), model]
    scoring.score_parquet(*args, keep=["id"], progress=False)
    leftover = tmp_path / "out" / "_temporary" / "_journal"
    leftover.mkdir(parents=True)  # a kill between _SUCCESS and removing the staging
    (leftover / "x.json").write_text("{}")
    assert scoring.score_parquet(*args, keep=["id"], progress=False).already_complete
    assert not (tmp_path / "out" / "_temporary").exists()


@pytest.mark.parametrize(
    ("source", "target"),
    [("in", "in/scores"), ("./in", "in/scores"), ("in/*.parquet", "in/scores"),
     ("in", "./in/../in/scores"), ("file://{root}/in", "{root}/in/scores"), ("in/..", "in")],
)  # fmt: skip
def test_an_output_inside_the_input_is_refused_however_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, target: str
) -> None:
    model, X = model_frame("lgb_reg", rows=500)
    write_input(X, tmp_path / "in", files=2)
    monkeypatch.chdir(tmp_path)
    source, target = (p.format(root=tmp_path) for p in (source, target))
    with pytest.raises(ConfigError, match="overlap"):
        scoring.score_parquet(source, target, model, keep=["id"], progress=False)
    assert not (tmp_path / "in" / "scores").exists()
    assert len(list((tmp_path / "in").glob("*.parquet"))) == 2


def test_out_of_memory_batches_are_split(monkeypatch: pytest.MonkeyPatch) -> None:
    model, X = model_frame("xgb_clf", rows=5000)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    scorer = Scorer(cm)
    whole = scorer.score(pa.Table.from_pandas(X))
    backend = cm.implementation
    once = backend._margins_once
    sizes = []

    def small_device(mat: Any) -> Any:
        sizes.append(len(mat))
        if len(mat) > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return once(mat)

    monkeypatch.setattr(backend, "_margins_once", small_device)
    limit = 1500
    split = scorer.score(pa.Table.from_pandas(X))
    np.testing.assert_allclose(split["probability"], whole["probability"], atol=1e-6)
    assert split["label"].equals(whole["label"]) and split.num_rows == 5000
    assert max(s for s in sizes if s <= limit) == 1250 and scorer.batch_rows == 1250
    # Where even the smallest batch does not fit, one clear error, not endless halving.
    limit, sizes[:] = 0, []
    with pytest.raises(ResourceLimitError, match="rows do not fit"):
        scorer.score(pa.Table.from_pandas(X))
    assert min(sizes) > 1024 // 2 and len(sizes) < 20


def _cli_score(*args: str) -> Any:
    return runner.invoke(app, ["score", *args])


@pytest.mark.parametrize("fault", ["disk full", "unexpected"])
def test_a_write_failure_is_one_line_and_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # Recorded by monkeypatch, so whatever --debug sets below is undone after the test.
    monkeypatch.setenv("SCORING_DEBUG", "0")
    model, X = model_frame("lgb_reg", rows=600)
    model.booster_.save_model(tmp_path / "model.txt")
    write_input(X, tmp_path / "in", files=2)

    def broken(self: Any, data: Any) -> int:
        if fault == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device", "/data/out/part-0.parquet")
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr("scoring._journal.journal.HashingSink.write", broken)
    args = ["--model", str(tmp_path / "model.txt"), "--input", str(tmp_path / "in"),
            "--output", str(tmp_path / "out"), "--keep", "id"]  # fmt: skip
    out = _cli_score(*args)
    assert out.exit_code == 1, out.output
    message = out.stderr.strip()
    assert "\n" not in message and "Traceback" not in message, message
    expected = {"disk full": "No space left on device (/data/out/part-0.parquet)",
                "unexpected": "unexpected RuntimeError: a bug over two lines; rerun with "
                              "--debug"}[fault]  # fmt: skip
    assert expected in message
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert not list((tmp_path / "out").rglob("*.inprogress-*"))  # the interrupted file
    debug = runner.invoke(app, ["--debug", "score", *args])  # the library's error, shown
    shown = debug.exception
    if isinstance(shown, scoring.ScoringError):  # translated: ours, caused by the library's
        shown = shown.__cause__
    assert debug.exit_code == 1 and isinstance(shown, (OSError, RuntimeError))


@pytest.mark.parametrize("problem", ["missing", "text", "corrupt", "empty", "alias", "keep"])
def test_bad_input_fails_with_one_line_and_publishes_nothing(tmp_path: Path, problem: str) -> None:
    model, X = model_frame("lgb_cat_frame", rows=600)  # a model with feature names
    reg = scoring.Registry(tmp_path / "reg")
    reg.register("m", model)
    if problem == "missing":
        X = X.drop(columns=["feat_3"])
    if problem == "text":
        X["feat_2"] = "abc"
    frame = write_input(X, tmp_path / "in", files=2)
    if problem == "corrupt":
        (tmp_path / "in" / "part-1.parquet").write_bytes(b"PAR1 not really parquet")
    if problem == "empty":
        pq.write_table(pa.Table.from_pandas(frame.iloc[:0], preserve_index=False),
                       tmp_path / "in" / "part-0.parquet")  # fmt: skip
        pq.write_table(pa.Table.from_pandas(frame.iloc[:0], preserve_index=False),
                       tmp_path / "in" / "part-1.parquet")  # fmt: skip
    ref = "m@gone" if problem == "alias" else "m@1"
    keep = "id,nope" if problem == "keep" else "id"
    out = _cli_score(
        "--model",
        ref,
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--keep",
        keep,
        "--registry",
        str(tmp_path / "reg"),
    )
    # 6: the input does not fit the model, and a retry reads the same rows; 1: it may pass.
    code = {"missing": 6, "text": 6, "corrupt": 1, "empty": 6, "alias": 1, "keep": 6}[problem]
    assert out.exit_code == code, out.output
    message = out.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    expected = {"missing": "'feat_3'", "text": "'feat_2'", "corrupt": "part-1.parquet",
                "empty": "no rows", "alias": "'gone'", "keep": "nope"}[problem]  # fmt: skip
    assert expected in message
    if problem in ("missing", "text"):  # named as registered, not by its framework class
        assert "model 'm@1' (LGBMClassifier)" in message, message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_cli_scores_and_summarises(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=600)
    scoring.Registry(tmp_path / "reg").register("m", model)
    write_input(X, tmp_path / "in", files=1)
    out = _cli_score(
        "--model",
        "m@1",
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--keep",
        "id",
        "--registry",
        str(tmp_path / "reg"),
    )
    assert out.exit_code == 0, out.output
    assert "600 rows" in out.stderr and "m@1" in out.stderr


def test_scorer_refuses_kept_column_named_like_an_output() -> None:
    cm = scoring.compile(built("xgb_clf")[0], backend="tensor", device="cpu")
    with pytest.raises(InputError, match="probability"):
        Scorer(cm, keep=["probability"])
    with pytest.raises(MissingColumnError):
        Scorer(scoring.compile(built("lgb_cat_frame")[0], backend="tensor")).score(
            pa.table({"x": [1.0]}))  # fmt: skip


def test_head_reads_what_the_scanner_reads(tmp_path: Path) -> None:
    from scoring._formats.dataset import open_input

    for year in (2025, 2026):
        (tmp_path / f"year={year}").mkdir()
        table = pa.table({"x": np.arange(5000, dtype=np.float32), "n": np.arange(5000)})
        pq.write_table(table, tmp_path / f"year={year}" / "part.parquet", row_group_size=2000)
    data = open_input(str(tmp_path))
    head = data.head(columns=["year", "x"], rows=10)
    first = next(data.batches(data.fragments[0], columns=["year", "x"], batch_rows=10))
    assert head.equals(pa.Table.from_batches([first]))
    assert head.schema.field("year").type == pa.int32() and head["year"][0].as_py() == 2025


def test_a_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=600)
    scoring.Registry(tmp_path / "reg").register("m", model)
    write_input(X, tmp_path / "in", files=2)
    args = ["--model", "m@1", "--registry", str(tmp_path / "reg"), "--input",
            str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--dry-run"]  # fmt: skip
    out = _cli_score(*args)
    assert out.exit_code == 0, out.output
    plan = out.stdout
    assert plan.startswith("plan for job 'score': engine local, "), plan
    assert re.search(r", (native|tensor/\w+) on cpu\n", plan), plan  # backend and strategy
    assert "rows: 600 in 2 file(s)" in plan and "workers: 1" in plan and "estimated" in plan
    assert not (tmp_path / "out").exists()
    bad = _cli_score(*args, "--reasons-by", "largest")
    assert bad.exit_code == 2 and "--reasons-by" in bad.stderr, bad.output


def test_the_summary_and_the_report_name_the_model_asked_for_and_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry alias, a model file, a fitted object: each named as asked, with the
    version it resolved to and its kind; the job report's header says the same."""
    model, X = model_frame("xgb_clf", rows=600)
    write_input(X, tmp_path / "in", files=1)
    model.save_model(tmp_path / "churn.ubj")
    registry = scoring.Registry(tmp_path / "reg")
    registry.register("churn", tmp_path / "churn.ubj")
    registry.set_alias("churn", "production", 1)
    kind = scoring.compile(tmp_path / "churn.ubj", backend="native").forest.model_kind
    cases = {"churn@production": f"model churn@production = churn@1 ({kind}) on",
             str(tmp_path / "churn.ubj"): f"model churn.ubj ({kind}) on",
             "churn@1": f"model churn@1 ({kind}) on"}  # fmt: skip
    for i, (ref, said) in enumerate(cases.items()):
        report = scoring.score_parquet(tmp_path / "in", tmp_path / f"out{i}", ref,
                                       registry=tmp_path / "reg", progress=False)  # fmt: skip
        assert said in report.summary(), report.summary()
    fitted = scoring.score_parquet(tmp_path / "in", tmp_path / "fitted", model, progress=False)
    assert f"model {type(model).__name__} on" in fitted.summary()
    job = tmp_path / "job.toml"
    job.write_text(f'name = "named"\nmodel = "churn@production"\ninput = "{tmp_path / "in"}"\n'
                   f'output = "{tmp_path / "job"}"\nregistry = "{tmp_path / "reg"}"\n')  # fmt: skip
    done = runner.invoke(app, ["run", str(job)])
    assert done.exit_code == 0, done.output
    assert "model churn@production = churn@1" in done.output
    page = (tmp_path / "job" / "_scoring_report.html").read_text()
    header = page[
        page.index("<div class='sub'>") : page.index("</div>", page.index("<div class='sub'>"))
    ]
    assert f"model churn@production = churn@1 ({kind}), " in header and " on cpu" in header

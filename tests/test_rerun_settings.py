"""Every run parameter changed between an interrupted run and its rerun, on a Parquet
folder and on a Delta table: the rerun's output is what a clean run with the new value
writes, and a message names the parameter (a rerun never silently takes the old value).

The interrupted run stops with every file staged and nothing published (an error raised
by ``before_publish``); one case stops it while publishing, where a rerun with other
contents is refused by name.  Parameters that change what a file holds (model, kept
columns, outputs, a model's row filter, input, input version, format) discard the staged
files; the others (mode, engine options, verify) keep them under the new value.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import scoring
from scoring.errors import OutputError

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
ROWS = 600


class Stopped(Exception):
    """The interruption: raised once every file is staged, before publication."""


def _stop(report: Any) -> None:
    raise Stopped()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two model files, two Parquet inputs of the same layout, a Delta input of two
    versions, and an output table's earlier rows."""
    import xgboost

    root = tmp_path_factory.mktemp("rerun")
    rng = np.random.default_rng(3)
    frames = []
    for seed in (0, 1):
        X = pd.DataFrame(
            np.random.default_rng(seed).normal(size=(ROWS, 3)), columns=["a", "b", "c"]
        )
        X["id"] = np.arange(ROWS) + 10_000 * seed
        frames.append(X)
    models = []
    for i, depth in enumerate((2, 4)):
        X = frames[0]
        y = (X.a + X.b * rng.normal() > 0).astype(int)
        path = root / f"model{i}.json"
        xgboost.XGBClassifier(n_estimators=5 + i, max_depth=depth).fit(
            X[["a", "b", "c"]], y
        ).save_model(path)
        models.append(str(path))
    inputs = []
    for i, X in enumerate(frames):
        folder = root / f"input{i}"
        folder.mkdir()
        for j, part in enumerate(np.array_split(np.arange(ROWS), 3)):
            X.iloc[part].to_parquet(folder / f"part-{j}.parquet", index=False)
        inputs.append(str(folder))
    table = root / "table"
    deltalake.write_deltalake(str(table), frames[0].iloc[:300])
    deltalake.write_deltalake(str(table), frames[0].iloc[300:], mode="append")
    return {"models": models, "inputs": inputs, "table": str(table)}


BASE = {"keep": ["id"], "outputs": "default", "mode": None, "engine_options": {},
        "verify": False, "where": None, "input_version": None}  # fmt: skip

#: (parameter, value of the interrupted run, value of the rerun, discards the staging)
CHANGES = [
    ("model", 0, 1, True),
    ("keep", ["id"], ["id", "b"], True),
    ("outputs", "default", "raw", True),
    ("where", "a > 0", "a > 1", True),
    ("input", 0, 1, True),
    ("input_version", 0, 1, True),
    ("engine_options", {}, {"files_at_once": 1}, False),
    ("verify", False, True, False),
]  # fmt: skip
DELTA_MODES = [("mode", "overwrite", "append", False), ("mode", "append", "overwrite", False),
               ("mode", "error", "append", False)]  # fmt: skip


def _call(world: dict[str, Any], out: str, fmt: str, *, stop: bool = False, **given: Any) -> Any:
    p = {**BASE, "model": 0, "input": 0, **given}
    model: Any = world["models"][p["model"]]
    if p["where"]:
        model = [{"model": model, "prefix": "m", "where": p["where"]}]
    source = world["table"] if p["input_version"] is not None else world["inputs"][p["input"]]
    mode = p["mode"] or ("append" if fmt == "delta" else None)
    output = scoring.Output(f"delta:{out}" if fmt == "delta" else out, mode=mode)
    run = scoring.RunOptions(verify=p["verify"], before_publish=_stop if stop else None)
    return dict(input=scoring.Input(source, version=p["input_version"]), output=output,
                model=model, keep=p["keep"], outputs=p["outputs"], run=run,
                engine_options=p["engine_options"], progress=False)  # fmt: skip


def _rows(out: Path, fmt: str) -> pd.DataFrame:
    if fmt == "delta":
        frame = deltalake.DeltaTable(str(out)).to_pandas()
    else:
        frame = pq.read_table(out).to_pandas()
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _prior(out: Path, fmt: str) -> None:
    """A Delta output's earlier rows (version 0), which an append keeps."""
    if fmt == "delta":
        deltalake.write_deltalake(str(out), pd.DataFrame({"id": [-1], "probability": [0.5],
                                                          "label": [0]}))  # fmt: skip


def _cases() -> list[Any]:
    cases = [pytest.param(fmt, *c, id=f"{fmt}-{c[0]}-{c[1]}-{c[2]}")
             for fmt in ("parquet", "delta") for c in CHANGES]  # fmt: skip
    cases += [pytest.param("delta", *c, id=f"delta-mode-{c[1]}-{c[2]}") for c in DELTA_MODES]
    return cases


@pytest.mark.parametrize(("fmt", "name", "before", "after", "discards"), _cases())
def test_a_rerun_with_a_changed_parameter_writes_what_the_new_value_writes(
    tmp_path: Path, world: dict[str, Any], caplog: pytest.LogCaptureFixture,
    fmt: str, name: str, before: Any, after: Any, discards: bool,
) -> None:  # fmt: skip
    out, clean = tmp_path / "out", tmp_path / "clean"
    # An earlier version of the table, where the run's columns are the default ones and
    # its mode does not refuse a table that exists.
    if name not in ("keep", "outputs", "where") and not (name == "mode" and before == "error"):
        _prior(out, fmt)
        _prior(clean, fmt)
    with pytest.raises(Stopped):
        scoring.score_parquet(**_call(world, str(out), fmt, stop=True, **{name: before}))
    assert (out / "_temporary" / "_journal").is_dir(), "the interrupted run staged its files"
    with caplog.at_level(logging.WARNING, logger="scoring"):
        scoring.score_parquet(**_call(world, str(out), fmt, **{name: after}))
    said = " ".join(r.getMessage() for r in caplog.records)
    assert ("discarding" if discards else "resuming") in said, said
    scoring.score_parquet(**_call(world, str(clean), fmt, **{name: after}))
    pd.testing.assert_frame_equal(_rows(out, fmt), _rows(clean, fmt))
    assert not (out / "_temporary").exists()


def test_the_issue_repro_overwrite_stopped_then_append_keeps_the_rows(
    tmp_path: Path, world: dict[str, Any]
) -> None:
    """The report: an overwrite stopped before its commit, rerun as an append, left 1x the
    rows (the table overwritten); the rerun appends, as asked."""
    out = f"delta:{tmp_path / 't'}"
    base = dict(input=world["inputs"][0], output=out, model=world["models"][0], keep=["id"],
                progress=False)  # fmt: skip
    scoring.score_parquet(**base)
    with pytest.raises(Stopped):
        scoring.score_parquet(**{**base, "output": scoring.Output(out, mode="overwrite")},
                              run=scoring.RunOptions(before_publish=_stop))  # fmt: skip
    scoring.score_parquet(**{**base, "output": scoring.Output(out, mode="append")})
    assert len(deltalake.DeltaTable(str(tmp_path / "t")).to_pandas()) == 2 * ROWS


def test_a_changed_content_while_publishing_is_refused_by_name(
    tmp_path: Path, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after placing its first file: the rerun with other kept columns is refused
    (naming the setting), the same command finishes, then the new one runs."""
    from scoring._formats.publication import Publication

    out = tmp_path / "out"
    call = _call(world, str(out), "parquet")

    def stop(self: Publication, done: str) -> None:
        if done == "placed a new file":
            raise Stopped()

    monkeypatch.setattr(Publication, "step", stop)
    with pytest.raises(Stopped):
        scoring.score_parquet(**call)
    monkeypatch.undo()
    changed = _call(world, str(out), "parquet", keep=["id", "b"])
    with pytest.raises(OutputError, match=r"kept columns.*finish it first"):
        scoring.score_parquet(**changed)
    scoring.score_parquet(**call)
    scoring.score_parquet(**{**changed, "output": scoring.Output(str(out), mode="overwrite")})
    assert "b" in pq.read_table(out).column_names


def test_a_temporary_folder_scoring_did_not_write_is_left_alone(
    tmp_path: Path, world: dict[str, Any]
) -> None:
    out = tmp_path / "out"
    (out / "_temporary" / "0").mkdir(parents=True)
    (out / "_temporary" / "0" / "part-0.parquet").write_bytes(b"someone else's")
    with pytest.raises(OutputError, match="_temporary/ folder scoring did not write"):
        scoring.score_parquet(**_call(world, str(out), "parquet"))
    assert (out / "_temporary" / "0" / "part-0.parquet").read_bytes() == b"someone else's"

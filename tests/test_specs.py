"""``scoring.Input``, ``scoring.Output`` and ``scoring.RunOptions`` are the one spelling of
a run's input pin, output format, mode and partitions, and its checks and callbacks; the
loose keywords of earlier versions still work, each warning and naming the new one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._catalog import reference_profile
from scoring._frameworks import import_model
from scoring._specs import DEPRECATED
from scoring.errors import ConfigError

from .test_score_parquet import model_frame, write_input


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Any]:
    model, X = model_frame("xgb_clf", rows=400)
    write_input(X, tmp_path / "in", files=2)
    # One backend named: "auto" picks by measurement, and the tensor backend's float32
    # sigmoid may differ from XGBoost's in the last bit, so two runs could differ.
    return {"input": tmp_path / "in", "model": model, "keep": ["id"], "progress": False,
            "backend": "native"}  # fmt: skip


@pytest.mark.parametrize(
    ("loose", "spec", "delta"),
    [({"overwrite": True}, {"mode": "overwrite"}, False),
     ({"mode": "overwrite"}, {"mode": "overwrite"}, False),
     ({"output_format": "delta"}, {"format": "delta"}, True),
     ({"output_format": "delta", "mode": "append"}, {"format": "delta", "mode": "append"}, True)],
)  # fmt: skip
def test_each_loose_spelling_warns_and_writes_what_the_output_spec_writes(
    tmp_path: Path, job: dict[str, Any], loose: dict[str, Any], spec: dict[str, Any],
    delta: bool,
) -> None:  # fmt: skip
    old, new = tmp_path / "old", tmp_path / "new"
    for out in (old, new) if "mode" in spec else ():  # a first run, for the mode to act on
        scoring.score_parquet(output=scoring.Output(out, format="delta" if delta else None),
                              **job)  # fmt: skip
    with pytest.warns(DeprecationWarning) as warned:
        scoring.score_parquet(output=old, **job, **loose)
    said = " ".join(str(w.message) for w in warned)
    assert all(f"score_parquet({k}=...) is deprecated" in said for k in loose)
    assert all(DEPRECATED[k][2] in said for k in loose) and "scoring.Output(" in said
    scoring.score_parquet(output=scoring.Output(new, **spec), **job)
    if delta:
        tables = [deltalake.DeltaTable(str(p)) for p in (old, new)]
        versions = [1, 1] if "mode" in spec else [0, 0]
        assert [t.version() for t in tables] == versions
        assert tables[0].to_pyarrow_table().num_rows == tables[1].to_pyarrow_table().num_rows
    else:
        assert pq.read_table(old).equals(pq.read_table(new))


def test_partition_by_loose_and_in_the_spec_agree(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=400)
    for day in ("2026-11-01", "2026-11-02"):
        write_input(X, tmp_path / "in" / f"date={day}", files=1)
    job = {"input": tmp_path / "in", "model": model, "keep": ["id", "date"], "progress": False}
    with pytest.warns(DeprecationWarning, match="partition_by"):
        scoring.score_parquet(output=f"delta:{tmp_path / 'old'}", partition_by=["date"], **job)
    spec = scoring.Output(f"delta:{tmp_path / 'new'}", partition_by=["date"])
    scoring.score_parquet(output=spec, **job)
    for name in ("old", "new"):
        assert deltalake.DeltaTable(str(tmp_path / name)).metadata().partition_columns == ["date"]


def test_input_version_loose_and_in_the_spec_read_the_same_version(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=400)
    frame = X.assign(id=range(len(X)))
    for part, mode in ((frame.iloc[:100], "error"), (frame.iloc[100:], "append")):
        deltalake.write_deltalake(str(tmp_path / "t"), part, mode=mode)
    job = {"model": model, "keep": ["id"], "progress": False}
    with pytest.warns(DeprecationWarning, match=r"scoring\.Input\(location, version=\.\.\.\)"):
        old = scoring.score_parquet(tmp_path / "t", tmp_path / "old", input_version=0, **job)
    new = scoring.score_parquet(scoring.Input(tmp_path / "t", version=0), tmp_path / "new", **job)
    assert old.rows == new.rows == 100
    assert pq.read_table(tmp_path / "old").equals(pq.read_table(tmp_path / "new"))


def test_each_loose_run_option_warns_and_acts_as_in_run_options(
    tmp_path: Path, job: dict[str, Any]
) -> None:
    model, X = model_frame("xgb_clf", rows=400)
    reference = reference_profile(model, import_model(model), X.iloc[:200])
    seen: dict[str, list[Any]] = {}

    def options(tag: str) -> dict[str, Any]:
        seen[tag] = []
        return {"verify": True, "monitor": reference,
                "on_progress": lambda s, rows: seen[tag].append(rows),
                "before_publish": lambda report: seen[tag].append(report.rows)}  # fmt: skip

    loose = options("loose")
    with pytest.warns(DeprecationWarning) as warned:
        old = scoring.score_parquet(output=tmp_path / "old", **job, **loose)
    said = " ".join(str(w.message) for w in warned)
    assert all(f"run=scoring.RunOptions({k}=...)" in said for k in loose), said
    new = scoring.score_parquet(output=tmp_path / "new", run=scoring.RunOptions(**options("new")),
                                **job)  # fmt: skip
    assert seen["loose"] == seen["new"] and seen["new"][-1] == 400  # progress, then publish
    assert old.drift_counts == new.drift_counts and new.drift_counts is not None


@pytest.mark.parametrize("name", sorted(DEPRECATED))
def test_every_loose_spelling_names_its_record(name: str) -> None:
    record, field, spelled = DEPRECATED[name]
    kind = {"input": scoring.Input, "output": scoring.Output, "run": scoring.RunOptions}[record]
    assert field in {f.name for f in dataclasses.fields(kind)}
    assert spelled.startswith(f"{record}=scoring.{kind.__name__}(") and f"{field}=" in spelled


@pytest.mark.parametrize(
    ("given", "loose", "record"),
    [({"output": "OUT"}, {"mode": "overwrite"}, "Output"),
     ({"input": "IN"}, {"input_version": 0}, "Input"),
     ({"run": scoring.RunOptions()}, {"verify": True}, "RunOptions")],
)  # fmt: skip
def test_a_loose_spelling_beside_its_record_or_an_unknown_keyword_is_refused(
    tmp_path: Path, job: dict[str, Any], given: dict[str, Any], loose: dict[str, Any],
    record: str,
) -> None:  # fmt: skip
    specs = {"output": scoring.Output(tmp_path / "o"), "input": scoring.Input(job["input"])}
    call = {**job, "output": tmp_path / "o",
            **{k: specs.get(k, v) for k, v in given.items()}}  # fmt: skip
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(
            ConfigError, match=f"beside {next(iter(given))}=scoring.{record}.*in the {record} only"
        ),
    ):
        scoring.score_parquet(**call, **loose)
    with pytest.raises(TypeError, match="unexpected keyword argument 'overwrit'"):
        scoring.score_parquet(output=tmp_path / "o", overwrit=True, **job)
    assert not (tmp_path / "o").exists()


#: A wrong value for every field of every record.
WRONG = {
    "Input": {"location": 3, "version": 1.5, "incremental": "yes", "on_changed": 5, "filter": 7},
    "Output": {"location": None, "format": 1, "mode": True, "partition_by": "date", "key": "id"},
    "RunOptions": {"verify": "yes", "monitor": {}, "on_progress": 5, "before_publish": "f"},
}


@pytest.mark.parametrize(("record", "field"), [(r, f) for r, wrong in WRONG.items() for f in wrong])
def test_a_wrong_value_in_any_field_of_a_record_is_refused_naming_it(
    tmp_path: Path, job: dict[str, Any], record: str, field: str
) -> None:
    kind = getattr(scoring, record)
    assert set(WRONG[record]) == {f.name for f in dataclasses.fields(kind)}  # every field
    where = {"Input": "input", "Output": "output", "RunOptions": "run"}[record]
    base = {"input": job["input"], "output": tmp_path / "o", "run": None}
    given = {"location": base[where]} if where != "run" else {}
    call = {**job, **base, where: kind(**{**given, field: WRONG[record][field]})}
    with pytest.raises(ConfigError, match=rf"^scoring\.{record}\({field}="):
        scoring.score_parquet(**call)
    assert not (tmp_path / "o").exists()

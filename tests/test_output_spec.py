"""``scoring.Output`` is the one spelling of an output's format, mode and partitions; the
loose keywords of earlier versions still work, each warning and naming the new one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest

import scoring
from scoring._output_spec import DEPRECATED
from scoring.errors import ConfigError

from .test_score_parquet import model_frame, write_input


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Any]:
    model, X = model_frame("xgb_clf", rows=400)
    write_input(X, tmp_path / "in", files=2)
    return {"input": tmp_path / "in", "model": model, "keep": ["id"], "progress": False}


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
    assert all(DEPRECATED[k] in said for k in loose) and "scoring.Output(" in said
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


def test_a_loose_spelling_beside_an_output_spec_or_an_unknown_keyword_is_refused(
    tmp_path: Path, job: dict[str, Any]
) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="in the Output only"):
        scoring.score_parquet(output=scoring.Output(tmp_path / "o"), mode="overwrite", **job)
    with pytest.raises(TypeError, match="unexpected keyword argument 'overwrit'"):
        scoring.score_parquet(output=tmp_path / "o", overwrit=True, **job)
    assert not (tmp_path / "o").exists()

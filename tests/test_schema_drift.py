"""Input files that disagree on their schema: every file's footer is read, a file that
lacks a column or holds it with another type is named before anything is written, and
types that widen safely are accepted in any file order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scoring
from scoring.errors import InputFileError

from .conftest import built

ROWS = 600


def _frames() -> tuple[Any, list[pd.DataFrame]]:
    """The model and three parts of its input, each with an ``id`` column."""
    model, forest, _ = built("lgb_reg")
    rng = np.random.default_rng(8)
    X = rng.normal(size=(ROWS, forest.n_features))
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(forest.n_features)])
    frame.insert(0, "id", np.arange(ROWS))
    third = ROWS // 3
    parts = [frame.iloc[i : i + third].reset_index(drop=True) for i in range(0, ROWS, third)]
    return model, parts


def _write(root: Path, tables: list[pa.Table]) -> Path:
    root.mkdir(parents=True)
    for i, table in enumerate(tables):
        pq.write_table(table, root / f"part-{i}.parquet")
    return root


def _score(
    source: Path, target: Path, model: Any, backend: str = "tensor", engine: str = "local"
) -> pd.DataFrame:
    # Workers take the model itself (a compiled one is not shipped) and compile it there.
    given = scoring.compile(model, backend=backend, device="cpu") if engine == "local" else model
    scoring.score_parquet(source, target, given, keep=["id"], outputs="raw", progress=False,
                          engine=engine, backend=backend)  # fmt: skip
    return pq.read_table(target).to_pandas().sort_values("id").reset_index(drop=True)


def _expected(model: Any, parts: list[pd.DataFrame]) -> np.ndarray:
    whole = pd.concat(parts, ignore_index=True)
    return np.asarray(model.predict(whole.drop(columns="id").to_numpy(), raw_score=True))


def _refused(tmp_path: Path, tables: list[pa.Table], model: Any, *words: str) -> None:
    with pytest.raises(InputFileError) as caught:
        _score(_write(tmp_path / "in", tables), tmp_path / "out", model)
    message = str(caught.value)
    assert all(w in message for w in words), message
    assert "\n" not in message
    out = tmp_path / "out"
    assert not out.exists() or not any(out.rglob("*.parquet"))  # nothing written


def test_a_feature_missing_from_a_later_file_is_named(tmp_path: Path) -> None:
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    tables[2] = tables[2].drop_columns(["f3"])
    _refused(tmp_path, tables, model, "part-2.parquet", "'f3'")


def test_a_kept_column_missing_from_a_later_file_is_named(tmp_path: Path) -> None:
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    tables[1] = tables[1].drop_columns(["id"])
    _refused(tmp_path, tables, model, "part-1.parquet", "'id'")


def test_numeric_strings_in_a_later_file_are_named_with_both_types(tmp_path: Path) -> None:
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    as_text = pa.array([str(v) for v in parts[2]["f0"]])
    tables[2] = tables[2].set_column(tables[2].schema.get_field_index("f0"), "f0", as_text)
    _refused(tmp_path, tables, model, "'f0'", "part-0.parquet", "double",
             "part-2.parquet", "string")  # fmt: skip


@pytest.mark.parametrize("order", ["int first", "float first"])
def test_integers_and_floats_widen_in_either_order(tmp_path: Path, order: str) -> None:
    model, parts = _frames()
    parts[0]["f1"] = np.round(parts[0]["f1"] * 10).astype(np.int64)  # int64 in one file
    if order == "float first":
        parts = parts[::-1]
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    out = _score(_write(tmp_path / "in", tables), tmp_path / "out", model)
    np.testing.assert_allclose(out["raw"], _expected(model, sorted(parts, key=_first_id)),
                               rtol=1e-12, atol=1e-12)  # fmt: skip


def _first_id(part: pd.DataFrame) -> int:
    return int(part["id"].iloc[0])


def test_an_all_null_column_in_the_first_file_only_reads_as_missing(tmp_path: Path) -> None:
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    nulls = pa.nulls(len(parts[0]))  # type null, as pandas writes an all-None column
    tables[0] = tables[0].set_column(tables[0].schema.get_field_index("f2"), "f2", nulls)
    parts[0]["f2"] = np.nan
    out = _score(_write(tmp_path / "in", tables), tmp_path / "out", model)
    np.testing.assert_allclose(out["raw"], _expected(model, parts), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["tensor", "native", "auto"])
def test_a_zero_row_file_among_others_is_scored_as_zero_rows(
    tmp_path: Path, backend: str, engine: str = "local"
) -> None:
    """On every backend (``auto`` picks native on CPU for this model), and, from
    test_ray.py and test_spark.py, on every engine."""
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts]
    tables.insert(1, tables[0].slice(0, 0))
    out = _score(_write(tmp_path / "in", tables), tmp_path / "out", model, backend, engine)
    np.testing.assert_allclose(out["raw"], _expected(model, parts), rtol=1e-12, atol=1e-12)
    if engine != "spark":  # Spark writes its own part files, not one per input file
        assert pq.read_table(tmp_path / "out" / "part-1.parquet").num_rows == 0


@pytest.mark.parametrize("files", [1, 3])  # pyarrow fails on the first, not on a later one
def test_a_file_with_two_columns_of_one_name_is_named_with_the_column(
    tmp_path: Path, files: int
) -> None:
    model, parts = _frames()
    tables = [pa.Table.from_pandas(p, preserve_index=False) for p in parts][:files]
    last = tables[-1]
    tables[-1] = last.append_column("f4", last.column("f4"))
    culprit = f"part-{files - 1}.parquet"
    _refused(tmp_path, tables, model, culprit, "more than one column named 'f4'")

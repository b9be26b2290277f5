"""Each third-party library's own exception injected at the call sites of the user-facing
paths this issue's surfaces go through: the command says one line, naming what it was
reading or writing and the fix, never the library's exception as such ("unexpected").

The boundaries the product translates are listed in :data:`scoring.errors.TRANSLATIONS`
(``test_errors.py`` triggers each); this injects at the calls themselves: the change
feed (delta-rs and the log's own reader), the Delta commit and merge, the Iceberg
commit, a staged file's footer, a table's history and state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from scoring.cli import app

deltalake = pytest.importorskip("deltalake", reason="the delta extra is not installed")
runner = CliRunner()
FEED = {"delta.enableChangeDataFeed": "true"}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    import xgboost

    X = pd.DataFrame(np.random.default_rng(0).normal(size=(80, 2)), columns=["a", "b"])
    path = tmp_path_factory.mktemp("model") / "m.json"
    xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X.a).save_model(path)
    return str(path)


def _rows(ids: range, city: Any = "plain") -> pd.DataFrame:
    rng = np.random.default_rng(len(ids))
    frame = pd.DataFrame(rng.normal(size=(len(ids), 2)), columns=["a", "b"])
    return frame.assign(id=np.array(ids, dtype=np.int64), city=city)


def _delta_error(*_: Any, **__: Any) -> None:
    from deltalake.exceptions import DeltaError

    raise DeltaError("Generic error: injected by the test")


def _os_error(*_: Any, **__: Any) -> None:
    raise PermissionError(13, "Permission denied", "/lake/_delta_log/00000000000000000001.json")


def _arrow_error(*_: Any, **__: Any) -> None:
    import pyarrow as pa

    raise pa.ArrowInvalid("Parquet magic bytes not found in footer")


def _incremental(tmp_path: Path, model: str, city: str) -> list[str]:
    """An incremental run's command after an update of its Delta input."""
    source = tmp_path / "in"
    deltalake.write_deltalake(str(source), _rows(range(20), city), configuration=FEED,
                              partition_by=["city"])  # fmt: skip
    command = ["score", "--model", model, "--input", str(source), "--output",
               f"delta:{tmp_path / 'out'}", "--keep", "id,city", "--incremental",
               "--key", "id"]  # fmt: skip
    assert runner.invoke(app, command).exit_code == 0
    deltalake.DeltaTable(str(source)).update(predicate="id < 5", updates={"a": "a + 1.0"})
    return command


def _append(tmp_path: Path, model: str, city: str) -> list[str]:
    source = tmp_path / "in"
    source.mkdir()
    _rows(range(20), city).to_parquet(source / "p.parquet")
    return ["score", "--model", model, "--input", str(source), "--output",
            f"delta:{tmp_path / 'out'}", "--keep", "id"]  # fmt: skip


SITES: dict[str, tuple[str, Callable[..., None], Callable[..., list[str]], str, str]] = {
    # name: (what is patched, what it raises, the command, its city, what the line says)
    "delta-rs change feed": ("deltalake.DeltaTable.load_cdf", _delta_error, _incremental,
                             "plain", "cannot read the changes of Delta table"),
    "the log's change reader": ("scoring._delta_cdf._actions", _os_error, _incremental,
                                "New York", "cannot read the changes of Delta table"),
    "delta-rs merge": ("deltalake.table.TableMerger.execute", _delta_error, _incremental,
                       "plain", "cannot merge into Delta table"),
    "delta-rs commit": ("deltalake.DeltaTable.create_write_transaction", _delta_error,
                        _append, "plain", "cannot commit to Delta table"),
    "a staged file's footer": ("scoring._publish_delta.pq.read_metadata", _arrow_error,
                               _append, "plain", "cannot read the footer of this run's file"),
    "delta-rs history": ("deltalake.DeltaTable.history", _delta_error, _append, "plain",
                         "cannot read the history of Delta table"),
    "delta-rs input state": ("deltalake.DeltaTable.get_add_actions", _delta_error,
                             _incremental, "plain", "cannot read Delta table"),
}  # fmt: skip


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_library_s_exception_at_each_call_site_is_one_line(
    site: str, tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, raised, command_for, city, says = SITES[site]
    command = command_for(tmp_path, model, city)
    if command_for is _append:  # a table there already: the commit, not the create
        assert runner.invoke(app, command).exit_code == 0
        command = [*command, "--mode", "append"]
    monkeypatch.setattr(target, raised)
    said = runner.invoke(app, command)
    assert said.exit_code in (1, 6), said.output
    lines = said.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "unexpected" not in lines[0], lines
    assert str(tmp_path) in lines[0], "it names the table"

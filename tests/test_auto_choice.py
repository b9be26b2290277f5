"""What runs is what was asked for: ``auto`` on CPU times its candidates as a job runs
them, in alternation over rounds (so the machine's load falls on every candidate
alike), and a strategy named runs as named through the SDK, the CLI and a job file, or
is refused by name where the backend named cannot run it.  Speed itself is measured by
``benchmarks/``, not here."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import scoring
import scoring._model as model_module
from scoring.cli import app
from scoring.errors import CompileError

from .conftest import built
from .test_jobs import job_file, registry, write_rows  # noqa: F401 (a fixture)
from .test_score_parquet import model_frame, write_input

runner = CliRunner()


class _Clock:
    """A fake ``time.perf_counter``: each call of a candidate advances it by that
    candidate's next duration."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _candidates(clock: _Clock, durations: dict[str, list[float]], order: list[str]) -> list[Any]:
    def call(name: str) -> Any:
        taken = iter(itertools.chain(durations[name], itertools.repeat(durations[name][-1])))

        def run() -> None:
            order.append(name)
            clock.now += next(taken)

        return run

    return [call(name) for name in durations]


@pytest.mark.parametrize(
    ("durations", "rounds", "medians"),
    [
        # Clearly apart: three rounds; a busy moment (round two) is outvoted.
        ({"a": [1.0, 9.0, 1.0], "b": [2.0, 2.0, 2.0]}, 3, [1.0, 2.0]),
        # Within 20% after three rounds: seven.
        ({"a": [1.0, 1.1, 1.0, 1.2, 1.0, 1.0, 1.0], "b": [1.1] * 7}, 7, [1.0, 1.1]),
    ],
)
def test_candidates_are_timed_in_alternation_with_more_rounds_for_a_close_call(
    monkeypatch: pytest.MonkeyPatch, durations: dict[str, list[float]], rounds: int,
    medians: list[float],
) -> None:  # fmt: skip
    clock, order = _Clock(), []
    calls = _candidates(clock, {k: [0.0, *v] for k, v in durations.items()}, order)  # warm-up
    monkeypatch.setattr(model_module.time, "perf_counter", clock.perf_counter)
    got, ran = model_module.medians_in_alternation(calls)
    assert ran == rounds and got == pytest.approx(medians)
    assert order == ["a", "b"] * (rounds + 1)  # a warm-up each, then in turn


@pytest.mark.parametrize(("medians", "kept"), [([1.0, 2.0], "tensor"), ([2.0, 1.0], "native")])
def test_auto_keeps_the_lower_median_and_records_it(
    monkeypatch: pytest.MonkeyPatch, medians: list[float], kept: str
) -> None:
    """The candidates' medians decide (tensor ``fused``, then native), and ``selection``
    holds them and the rounds run."""
    model = built("xgb_clf")[0]
    ran = []

    def fake(calls: list[Any]) -> tuple[list[float], int]:
        for call in calls:
            call()  # each candidate's call works as the rounds would run it
            ran.append(call)
        return medians, 3

    monkeypatch.setattr(model_module, "medians_in_alternation", fake)
    cm = scoring.compile(model, device="cpu")
    assert cm.backend == kept and len(ran) == 2
    assert cm.selection["tensor:fused"] == medians[0] and cm.selection["native"] == medians[1]
    assert cm.selection["auto.rounds"] == 3


@pytest.mark.parametrize("strategy", ["fused", "tree_traversal", "compiled"])
def test_a_strategy_named_with_the_native_backend_is_refused_by_name(strategy: str) -> None:
    with pytest.raises(CompileError, match=f"strategy '{strategy}' is the tensor backend's"):
        scoring.compile(built("xgb_clf")[0], backend="native", strategy=strategy)


def test_the_cli_runs_the_strategy_named_and_refuses_it_with_native(tmp_path: Path) -> None:
    model, X = model_frame("xgb_clf", rows=300)
    scoring.Registry(tmp_path / "reg").register("m", model)
    write_input(X, tmp_path / "in", files=1)
    base = ["score", "--model", "m@1", "--input", str(tmp_path / "in"), "--keep", "id",
            "--registry", str(tmp_path / "reg")]  # fmt: skip
    ran = runner.invoke(app, [*base, "--output", str(tmp_path / "a"),
                              "--strategy", "tree_traversal"])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    metadata = pq.read_schema(next((tmp_path / "a").glob("*.parquet"))).metadata
    assert metadata[b"scoring.strategy"] == b"tree_traversal"
    assert metadata[b"scoring.backend"] == b"tensor"
    refused = runner.invoke(app, [*base, "--output", str(tmp_path / "b"), "--backend",
                                  "native", "--strategy", "fused"])  # fmt: skip
    assert refused.exit_code != 0
    assert "strategy 'fused' is the tensor backend's" in refused.output
    assert not (tmp_path / "b").exists()


def test_a_job_file_runs_its_strategy(tmp_path: Path, registry: Any) -> None:  # noqa: F811
    write_rows(tmp_path / "in", 2_000, files=2)
    job = job_file(tmp_path, registry, strategy="perfect_tree_traversal")
    planned = runner.invoke(app, ["plan", str(job)])
    assert planned.exit_code == 0, planned.output
    ran = runner.invoke(app, ["run", str(job)])
    assert ran.exit_code == 0, ran.output
    metadata = pq.read_schema(next((tmp_path / "out").glob("*.parquet"))).metadata
    assert metadata[b"scoring.strategy"] == b"perfect_tree_traversal"
    wrong = job_file(tmp_path, registry, strategy="fastest")
    refused = runner.invoke(app, ["plan", str(wrong)])
    assert refused.exit_code != 0 and "'strategy'" in refused.output

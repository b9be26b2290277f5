"""``fused`` on CUDA: one Triton kernel for every forest (scoring/_compiler/triton_walk.py),
proven on a machine without a GPU.

* Under Triton's interpreter the kernel equals walk.cpp bit for bit, sums and leaf ids,
  on every recipe, with the parity probes as rows (tests/triton_parity.py, in processes
  of their own with ``TRITON_INTERPRET=1``, the recipes split over two cores).
* Every variant builds for sm_80 and sm_90 with no register spills and no fused
  multiply-add in its PTX (benchmarks/results/triton_registers.md has the counts).
* The schedule is the fastest candidate measured, within its time budget.
"""

from __future__ import annotations

import itertools
from itertools import zip_longest
from typing import Any

import numpy as np
import pytest
import torch

from scoring._compiler import triton_walk
from scoring._compiler.layout import linked_tables
from scoring._compiler.triton_walk import (
    INTEGER_ARGUMENTS,
    MAX_TOP,
    TritonSchedule,
    TritonWalk,
    _sass_ops,
    build_for,
    choose_schedule,
    tree_chunks,
    visit_costs,
    walked_once,
)
from scoring.errors import CompileError
from scoring.recipes import EXCHANGE_RECIPES

from .conftest import ALL_RECIPES, RECIPES, built
from .triton_parity import THROUGH_COMPILE, run_interpreted

pytest.importorskip("triton", reason="Triton is not installed")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, list[str]]:
    return run_interpreted(*RECIPES)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", list(RECIPES))
def test_the_kernel_equals_walk_cpp_bit_for_bit(
    interpreted: dict[str, list[str]], name: str
) -> None:
    if not RECIPES[name].available:
        pytest.skip(f"{RECIPES[name].framework} is not installed")
    assert name in interpreted
    assert interpreted[name] == []


@pytest.mark.timeout(1200)
def test_exchange_formats_walk_as_walk_cpp_bit_for_bit() -> None:
    """The same for the models read from ONNX-ML and Spark ML (float32 and float64
    inputs, base values added last, averaged votes), each available one checked."""
    names = [r.name for r in EXCHANGE_RECIPES]
    spark = [n for n in names if ALL_RECIPES[n].framework == "spark"]
    others = [n for n in names if n not in spark]
    # Split over two processes alternately: the Spark recipes all in the first (one JVM
    # fits them), the ONNX ones in the second.
    interleaved = [n for pair in zip_longest(spark, others) for n in pair if n is not None]
    found = run_interpreted(*interleaved)
    assert sorted(found) == sorted(n for n in names if ALL_RECIPES[n].available)
    assert {n: d for n, d in found.items() if d} == {}


@pytest.mark.timeout(1200)
def test_anyone_checks_the_cuda_kernel_through_scoring_compile() -> None:
    found = run_interpreted("--compile", *THROUGH_COMPILE)
    available = [n for n in THROUGH_COMPILE if RECIPES[n].available]
    assert sorted(found) == sorted(available)
    assert {n: d for n, d in found.items() if d} == {}


def test_triton_on_cpu_without_the_interpreter_says_how() -> None:
    if triton_walk.interpreting():
        pytest.skip("this process runs Triton's interpreter")
    with pytest.raises(CompileError, match="TRITON_INTERPRET=1"):
        import scoring

        scoring.compile(built("xgb_clf")[0], device="cpu", strategy="triton")


def test_rows_narrowed_on_the_host_are_not_checked_again_on_the_device() -> None:
    """A batch in flight was narrowed on the host where it could be: inside
    ``checked_on_host`` float64 rows stay float64 (asking the device would wait for the
    stream's queued work); outside, float64 rows of float32 values are narrowed."""
    walk = object.__new__(TritonWalk)  # its rows alone: no kernel, no interpreter
    walk.device = torch.device("cpu")
    rows = torch.tensor([[0.5, 1.0], [2.0, float("nan")]], dtype=torch.float64)
    assert walk._input(rows).dtype == torch.float32
    with triton_walk.checked_on_host():
        assert walk._input(rows).dtype == torch.float64
    assert walk._input(rows).dtype == torch.float32


# -- every variant builds for Ampere and Hopper ----------------------------------------------

#: Input and accumulation dtypes the importers produce.
_DTYPES = [("fp32", "fp32"), ("fp32", "fp64"), ("fp64", "fp64")]


def _variants() -> list[dict[str, Any]]:
    """Every combination of the constexpr flags: sums (scalar or vector leaves) and leaf
    ids, at each input and accumulation dtype, with and without zero-as-missing and
    categorical splits."""
    return [dict(x=x, acc=acc, ZERO=zero, CAT=cat, VECTOR=vector, LEAVES=leaves)
            for (x, acc), zero, cat, vector, leaves in itertools.product(
                _DTYPES, (False, True), (False, True), (False, True), (False, True))
            if not (leaves and vector)]  # fmt: skip


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("capability", [80, 90])
def test_every_variant_builds_without_spills_or_fma(capability: int) -> None:
    """At the widest schedule candidate: the deepest top, 256 rows per program."""
    for variant in _variants():
        build = build_for(capability, TOP=MAX_TOP, BLOCK=256, BEFORE_TRUNC=False, warps=4,
                          **variant)  # fmt: skip
        assert build.spills == 0, (variant, build.registers, build.spills)
        assert 0 < build.registers <= 255, variant
        assert "fma." not in build.ptx, variant  # trees added one rounding at a time
        assert _machine_code_faults(build) == [], variant


def _machine_code_faults(build: Any) -> list[str]:
    """What the SASS must not hold: a fused multiply-add (one rounding where native has
    two), a flush of denormals to zero (XGBoost's split at 0 is the threshold
    -1.4e-45), a divergent-branch barrier (the walk's rows step in lockstep)."""
    ops = [op for _, op, _ in _sass_ops(build.sass)]
    assert len(ops) > 100, build.sass[:300]  # the kernel's instructions were read
    faults = [op for op in ops if op.split(".")[0] in ("FFMA", "DFMA", "HFMA2", "BSSY",
                                                       "BSYNC")]  # fmt: skip
    faults += [op for op in ops if ".FTZ" in op]
    return faults + (["ftz in the PTX"] if ".ftz" in build.ptx else [])


@pytest.mark.parametrize("capability", [80, 90])
def test_a_node_visit_of_xgboost_s_variant_takes_14_instructions_and_2_loads(
    capability: int,
) -> None:
    """The variant an H200 measured for xgb_500x8 (a top of eight levels, 128 rows per
    program, float32): one 8-byte load of the node, one of the row's value."""
    costs = visit_costs(capability, TOP=MAX_TOP, BLOCK=128, BEFORE_TRUNC=False, x="fp32",
                        acc="fp32", ZERO=False, CAT=False, VECTOR=False, LEAVES=False)  # fmt: skip
    assert costs.top_instructions <= 14 and costs.top_loads == 2, costs
    assert costs.linked_loads == 3 and costs.linked_instructions <= 22, costs


def test_a_binary_random_forest_walks_each_tree_once() -> None:
    """Vector leaves of up to eight outputs: one program adds every output's leaf, where
    one program per output walked every tree once per output."""
    walk = object.__new__(TritonWalk)  # its variant alone: no kernel, no interpreter
    walk.forest = built("sk_et_clf")[1]
    walk._linked = linked_tables(walk.forest, np.dtype(np.float64))
    assert walk.forest.n_outputs == 2
    assert walk.variant(TritonSchedule(MAX_TOP, 128, 4, True))["OUTPUTS"] == 2
    assert walked_once(np.zeros((4, 3))) == 4 and walked_once(np.zeros((4, 9))) == 0
    assert walked_once(np.zeros(4)) == 0


@pytest.mark.parametrize("capability", [80, 90])
def test_a_split_batch_s_two_launches_build(capability: int) -> None:
    """A batch too small to fill the GPU: the leaves launch (each row's leaf per tree)
    and the sums launch that reads them instead of walking, at each dtype, for scalar
    leaves, vector leaves walked once, and one program per output."""
    common = dict(TOP=MAX_TOP, BLOCK=128, BEFORE_TRUNC=False, ZERO=True, CAT=True)
    for x, acc in _DTYPES:
        builds = [build_for(capability, x=x, acc=acc, VECTOR=False, LEAVES=True, NODES=True,
                            **common)]  # fmt: skip
        for vector, outputs in ((False, 0), (True, 2), (True, 0)):
            builds.append(build_for(capability, x=x, acc=acc, VECTOR=vector, LEAVES=False,
                                    OUTPUTS=outputs, FROM_NODES=True, **common))  # fmt: skip
        for build in builds:
            assert build.spills == 0 and _machine_code_faults(build) == [], (x, acc)


def test_a_batch_splits_its_trees_only_where_the_device_would_wait() -> None:
    """Parts of the trees per batch: none when the rows fill half the programs, when
    their leaves would not fit, or for a forest of few trees; else enough parts to fill
    the programs, each of at least four trees."""
    assert tree_chunks(1_000, 128, 500, 528) == 66  # 8 blocks: 66 parts fill 528 programs
    assert tree_chunks(1, 128, 500, 528) == 125  # a single row: parts of four trees
    assert tree_chunks(64_000, 128, 500, 528) == 1  # 500 blocks: nearly full already
    assert tree_chunks(1_000, 128, 7, 528) == 1  # fewer than eight trees
    assert tree_chunks(40_000, 1024, 1_000, 528) == 1  # 40M leaves: past the 16M kept
    assert tree_chunks(1_000, 128, 500, 0) == 1  # no device to fill (the interpreter)


def test_the_machine_code_check_finds_a_fused_multiply_add() -> None:
    """The check above can fail: the same kernel built with fusion allowed."""
    from dataclasses import replace

    build = build_for(90, TOP=1, BLOCK=128, BEFORE_TRUNC=False, x="fp32", acc="fp32",
                      ZERO=False, CAT=False, VECTOR=False, LEAVES=False)  # fmt: skip
    fused = replace(build, sass=build.sass + "\n        /*0a10*/   FFMA R1, R2, R3, R4 ;")
    assert _machine_code_faults(build) == [] and _machine_code_faults(fused) == ["FFMA"]


@pytest.mark.parametrize("capability", [80, 90])
def test_every_top_and_category_rule_builds(capability: int) -> None:
    """No top (a purely linked walk), one level, the deepest; categories checked before
    truncation (scikit-learn's rule) or after (LightGBM's); 64-bit offsets."""
    for top, before in itertools.product((0, 1, MAX_TOP), (False, True)):
        build = build_for(capability, TOP=top, BLOCK=128, BEFORE_TRUNC=before, x="fp64",
                          acc="fp64", ZERO=True, CAT=True, VECTOR=False, LEAVES=False)  # fmt: skip
        assert build.spills == 0, (top, before, build.registers)
    for outputs in (0, 8):  # vector leaves: one program per output, eight outputs at once
        build = build_for(capability, TOP=MAX_TOP, BLOCK=256, BEFORE_TRUNC=False, x="fp64",
                          acc="fp64", ZERO=True, CAT=True, VECTOR=True, LEAVES=False,
                          OUTPUTS=outputs)  # fmt: skip
        assert build.spills == 0 and _machine_code_faults(build) == [], (outputs, build.registers)
    for x in ("fp32", "fp64"):  # offsets into a batch past 2**31 values: 64-bit
        build = build_for(capability, TOP=MAX_TOP, BLOCK=256, BEFORE_TRUNC=False, x=x, acc=x,
                          ZERO=True, CAT=True, VECTOR=True, LEAVES=False, OFF32=False)  # fmt: skip
        assert build.spills == 0 and _machine_code_faults(build) == [], (x, build.registers)


def test_every_integer_argument_equal_to_1_compiles() -> None:
    """Triton's JIT compiles an integer argument equal to 1 in as a constant (the row
    stride of a feature-major batch, one tree, one output, one row): every variant such
    a launch meets builds, with 32-bit offsets and without, sums and leaf ids."""
    for off32, vector, leaves in ((True, False, False), (True, True, False), (False, True, False),
                                  (False, False, True)):  # fmt: skip
        build = build_for(90, TOP=2, BLOCK=128, BEFORE_TRUNC=False, x="fp32", acc="fp64",
                          ZERO=True, CAT=True, VECTOR=vector, LEAVES=leaves, OFF32=off32,
                          ones=INTEGER_ARGUMENTS)  # fmt: skip
        assert build.spills == 0, (off32, vector, leaves)


def test_a_build_asked_for_under_the_interpreter_is_made_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interpreter's kernels cannot be compiled: the build happens in a child process
    started without ``TRITON_INTERPRET`` (the GPU suite's registers column under it)."""
    variant = dict(TOP=1, BLOCK=128, BEFORE_TRUNC=False, x="fp32", acc="fp32", ZERO=False,
                   CAT=False, VECTOR=False, LEAVES=False)  # fmt: skip
    direct = build_for(90, **variant)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert build_for(90, **variant) == direct


def test_the_build_reports_spills() -> None:
    """A kernel that cannot fit its registers spills, and the count says so (the check
    above can fail): 512 rows per program on one warp (408 bytes spilled)."""
    build = build_for(90, TOP=MAX_TOP, BLOCK=512, BEFORE_TRUNC=False, warps=1, x="fp64",
                      acc="fp64", ZERO=True, CAT=True, VECTOR=True, LEAVES=False)  # fmt: skip
    assert build.spills > 0


# -- the schedule ------------------------------------------------------------------------------


class _Walk:
    """What choose_schedule reads of a TritonWalk, on a fake device: launches recorded."""

    def __init__(self, name: str) -> None:
        self.forest = built(name)[1]
        self.device = torch.device("cpu")
        self.acc = torch.float32
        self.timings: dict[TritonSchedule, float] = {}
        self.launched: list[TritonSchedule] = []

    def launch(self, schedule: TritonSchedule, rows: torch.Tensor, *, out: torch.Tensor,
               split: bool = True) -> None:  # fmt: skip
        assert not split  # measured as a large batch runs: its trees not split
        self.launched.append(schedule)

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_the_schedule_is_the_fastest_measured() -> None:
    walk = _Walk("xgb_multi")
    seconds = iter(range(100, 0, -1))  # each later candidate faster
    chosen = choose_schedule(walk, timer=lambda run: (run(), next(seconds))[1])  # type: ignore[arg-type]
    candidates = triton_walk.candidates(walk.forest)
    assert list(walk.timings) == candidates  # every one timed, within the budget
    assert chosen == candidates[-1]
    assert all(c.top_depth <= MAX_TOP for c in candidates)
    assert {c.feature_major for c in candidates} == {True, False}


def test_the_schedule_stops_measuring_when_its_budget_is_spent() -> None:
    walk = _Walk("xgb_multi")
    chosen = choose_schedule(walk, timer=lambda run: (run(), 1.0)[1], budget_s=0.0)  # type: ignore[arg-type]
    assert list(walk.timings) == [chosen]  # the first, then the budget is spent

"""``fused`` on CPU: one kernel for every forest (scoring/_compiler/walk.cpp), built once
per machine, the forest passed as tables, its schedule measured per model.

Every schedule must give the eager walk's sums bit for bit, on every recipe, at both
input precisions, on both of the kernel's paths (AVX2 and scalar) and with both node
words (compact and full); and the eager walk's leaf ids, from walk.cpp itself.
"""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import scoring
from scoring._backends import tensor as tensor_backend
from scoring._compiler import compile_forest, generic
from scoring._compiler.generic import GenericWalk, Schedule, torch_on_caller
from scoring._compiler.walk_library import _cpu_flags, _library_root
from scoring._inputs import Columns
from scoring._ir import Forest
from scoring._parity import probe_rows

from .conftest import RECIPES, built

#: Every recipe (a chain: each of its stages).
_SINGLE = [name for name, r in RECIPES.items()]


def _eager(forest: Forest) -> scoring._compiler.TensorForest:
    module, _ = compile_forest(forest, device=torch.device("cpu"), strategy="tree_traversal")
    return module  # type: ignore[return-value]


def _sums(
    walk: GenericWalk, schedule: Schedule, x: torch.Tensor, start: torch.Tensor, *, compact: bool
) -> np.ndarray:
    """The kernel's sums; ``compact=False`` walks with the full words even where the
    compact ones fit."""
    rows, x64 = walk._input(x)
    out = np.array(start.numpy(), copy=True, order="C")
    tables = walk.tables_for(schedule.top_depth)
    if not compact:
        for struct in tables.structs.values():
            struct.compact = None
    walk.run(tables, schedule, rows, x64, out, threads=False)
    return out


def _schedules(depth: int) -> list[Schedule]:
    """Tops from none to past the deepest tree, node-by-node levels from none to past
    the top, both paths, the smallest and largest blocks (300 rows: short last blocks),
    and on the vector path the levels below the top by vectors, by rows and by rows
    packed in vectors (AVX-512VL builds; row by row elsewhere), each with the top eight
    and sixteen rows per vector (AVX-512 builds; eight elsewhere)."""
    tops = sorted({0, 1, min(depth, 10), min(depth + 1, 10)})
    by_blocks = [Schedule(top, uniform, block, vector, below_rows, packed, wide=wide)
                 for top in tops for uniform in (0, 2, 6) for block in (16, 256)
                 for vector, below_rows, packed in ((False, False, False), (True, False, False),
                                                    (True, True, False), (True, True, True))
                 for wide in ((False, True) if vector else (False,))]  # fmt: skip
    # every row of the call by trees (the vector path's few-row calls), any top
    return by_blocks + [Schedule(top, 0, 16, True, few=1 << 20) for top in tops]  # fmt: skip


def _inputs(forest: Forest) -> list[torch.Tensor]:
    """Rows with NaN, +-inf and every threshold, at the model's precision; for float64
    models also float32 values read as float64 (the kernel's float32 path).  Each comes
    twice: as drawn, and with its first 256 rows free of NaN (+-inf in their place), so
    that blocks of 16 and of 256 rows take the path for blocks without NaN, then the
    one for blocks with some, in one call."""
    drawn = probe_rows(forest, n_rows=300, seed=3)
    dense = np.where(np.isnan(drawn), np.where(np.arange(drawn.size).reshape(drawn.shape) % 2,
                                               np.inf, -np.inf), drawn)  # fmt: skip
    later = drawn[256:].copy()
    later[np.arange(len(later)), np.arange(len(later)) % later.shape[1]] = np.nan  # one each
    forms = []
    for rows in (drawn, np.concatenate([dense[:256], later])):
        if forest.input_dtype == "float32":
            forms.append(torch.from_numpy(rows.astype(np.float32)))
        else:
            forms += [torch.from_numpy(rows),
                      torch.from_numpy(rows.astype(np.float32).astype(np.float64))]  # fmt: skip
    return forms


@pytest.mark.parametrize("name", _SINGLE)
def test_every_schedule_gives_the_eager_walks_sums_bit_for_bit(name: str) -> None:
    forest = built(name)[1]
    forests = forest.stages or [forest]
    for stage in forests:
        eager = _eager(stage)
        walk = GenericWalk(stage, acc=eager.acc_dtype, schedule=Schedule(0, 0, 16, False))
        for x in _inputs(stage):
            x = eager._snapped(x)
            start = eager._start(x).contiguous()
            expected = eager._sums(x).numpy()
            columns = Columns([np.ascontiguousarray(c) for c in x.numpy().T])
            for schedule in _schedules(stage.max_depth):
                batches = (x, columns) if schedule.few else (x,)  # rows copied row by row
                for compact, batch in itertools.product((True, False), batches):
                    got = _sums(walk, schedule, batch, start, compact=compact)
                    where = f"{name} {schedule} compact={compact} {x.dtype} {type(batch)}"
                    np.testing.assert_array_equal(got, expected, err_msg=where)
            leaves = eager.leaf_ids(x).numpy()  # leaf ids: walk.cpp's own, at every top
            for top in sorted({s.top_depth for s in _schedules(stage.max_depth)}):
                walk.tables = walk.tables_for(top)
                got = walk.leaf_ids(x).numpy()
                np.testing.assert_array_equal(got, leaves, err_msg=f"{name} top {top} {x.dtype}")


def test_wide_rows_transposed_in_registers_give_the_columns_sums_bit_for_bit() -> None:
    """Where a forest reads most of many features, row-major rows are transposed eight
    by eight into the block; a width and row counts that are not multiples of eight
    take the edges' own copies.  Columns are copied feature by feature: the same sums."""
    import xgboost as xgb

    rng = np.random.default_rng(5)
    n = 75
    train = rng.normal(size=(3_000, n)).astype(np.float32)
    label = train.sum(1) + rng.normal(size=len(train))
    model = xgb.XGBRegressor(n_estimators=30, max_depth=5, n_jobs=1, colsample_bytree=0.5)
    forest = scoring._frameworks.import_model(model.fit(train, label))
    walk = GenericWalk(forest, acc=torch.float32, schedule=Schedule(4, 2, 16, True))
    assert 2 * len(walk._linked["used"]) >= n  # the transposing copy applies
    eager = _eager(forest)
    rows = probe_rows(forest, n_rows=203, seed=4).astype(np.float32)
    x = eager._snapped(torch.from_numpy(rows))
    start = eager._start(x).contiguous()
    expected = eager._sums(x).numpy()
    columns = Columns([np.ascontiguousarray(c) for c in x.numpy().T])
    for schedule in (Schedule(4, 2, 16, True), Schedule(6, 3, 256, True, True)):
        for batch in (x, columns):
            for count in (203, 8, 7):
                got = _sums(walk, schedule, batch[:count], start[:count], compact=True)
                np.testing.assert_array_equal(got, expected[:count], err_msg=f"{schedule}")


def test_few_rows_by_trees_read_a_nan_in_a_feature_no_node_reads_as_nothing() -> None:
    """A call of few rows gathers every tree's node values from the row itself, and a
    leaf reads feature 0: NaN there, where no node tests feature 0, must leave every
    leaf where it is (the row's NaN test covers feature 0 for that reason)."""
    import xgboost as xgb

    rng = np.random.default_rng(2)
    train = rng.normal(size=(2_000, 6)).astype(np.float32)
    train[:, 0] = 1.0  # constant: no split reads it
    model = xgb.XGBRegressor(n_estimators=40, max_depth=4, n_jobs=1)
    forest = scoring._frameworks.import_model(model.fit(train, train[:, 1] - train[:, 2]))
    walk = GenericWalk(forest, acc=torch.float32, schedule=Schedule(2, 0, 16, True, few=64))
    assert 0 not in walk._linked["used"]
    rows = rng.normal(size=(9, 6)).astype(np.float32)
    rows[:, 0] = np.nan
    eager = _eager(forest)
    x = torch.from_numpy(rows)
    expected = eager._sums(x).numpy()
    for batch in (x, Columns([np.ascontiguousarray(c) for c in rows.T])):
        got = _sums(walk, walk.schedule, batch, eager._start(x).contiguous(), compact=True)
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(expected[:, 0], model.predict(rows), rtol=1e-5, atol=1e-5)


def test_the_avx512_paths_are_built_where_the_cpu_has_them() -> None:
    """The packed walk below the top (AVX-512VL) and the top sixteen rows per vector
    (AVX-512F) are compiled only for those: where this CPU has them, the schedules above
    run them (elsewhere they run the row-by-row walk and eight rows per vector twice)."""
    walk = GenericWalk(built("xgb_clf")[1], acc=torch.float32, schedule=Schedule(2, 0, 16, True))
    flags = _cpu_flags().split()
    assert walk.packs == ("avx512vl" in flags and walk.vector_lanes > 0)
    assert walk.wide_lanes == (16 if "avx512f" in flags and walk.vector_lanes > 0 else 0)


def test_float64_rows_of_float32_values_take_the_float32_path() -> None:
    forest = built("lgb_zero_missing")[1]
    assert forest.input_dtype == "float64"
    walk = GenericWalk(forest, acc=torch.float64)
    doubles = torch.from_numpy(probe_rows(forest, n_rows=50, seed=1))
    as_read, x64 = walk._input(doubles.float().double())  # a float32 column read as double
    assert as_read.dtype == np.float32 and not x64
    as_read, x64 = walk._input(doubles)  # LightGBM's thresholds are doubles
    assert as_read.dtype == np.float64 and x64


def test_threads_and_row_chunks_change_no_bit() -> None:
    model, forest, _ = built("xgb_multi")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    chunk = cm.implementation.module.kernel.walk.chunk_rows
    assert chunk % 256 == 0 and 256 <= chunk <= 1 << 16
    rows = probe_rows(forest, n_rows=3 * chunk + 5, seed=2).astype(np.float32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        spread = cm.predict_raw(rows)
        torch.set_num_threads(1)
        alone = cm.predict_raw(rows)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(spread, alone)
    for n in (0, 1, 17, chunk, chunk + 1):  # each row is its own, in any batch
        np.testing.assert_array_equal(cm.predict_raw(rows[:n]), alone[:n])


def test_an_sdk_call_walks_on_the_callers_threads_and_links_on_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's elementwise work around the walk runs on the calling thread alone (its
    OpenMP team, once woken, spins on the cores the walk needs); the walk still spreads
    over as many threads as the caller had, and the count is what it was afterwards."""
    model, forest, _ = built("xgb_clf")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    chunk = cm.implementation.module.kernel.walk.chunk_rows
    rows = probe_rows(forest, n_rows=4 * chunk, seed=3).astype(np.float32)
    spread, linked = [], []
    real_spread, real_transform = generic._spread, tensor_backend.transform

    def spread_noted(work: Any, items: range, workers: int) -> None:
        spread.append(workers)
        real_spread(work, items, workers)

    def transform_noted(forest: Forest, margins: torch.Tensor) -> torch.Tensor:
        linked.append(torch.get_num_threads())
        return real_transform(forest, margins)

    monkeypatch.setattr(generic, "_spread", spread_noted)
    monkeypatch.setattr(tensor_backend, "transform", transform_noted)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        probabilities = cm.predict_proba(rows)
        assert torch.get_num_threads() == 2
        assert spread == [2] and linked == [1]
        with torch_on_caller():
            assert torch.get_num_threads() == 1 and generic._walk_threads() == 2
            with torch_on_caller():  # a call inside one keeps the caller's count
                assert generic._walk_threads() == 2
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2 and generic._walk_threads() == 2
        torch.set_num_threads(1)
        np.testing.assert_array_equal(cm.predict_proba(rows), probabilities)
        assert spread == [2]  # on one thread: one call, nothing spread
    finally:
        torch.set_num_threads(threads)


def test_the_schedule_is_measured_and_recorded(tmp_path: Path) -> None:
    model, forest, native = built("lgb_clf")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    walk = cm.implementation.module.kernel.walk
    fastest = min(walk.timings, key=walk.timings.__getitem__)
    s = walk.schedule
    assert walk.timings and s == replace(fastest, few=s.few) and s.few >= 1  # then its few
    assert walk.chunk_rows == generic._chunk_rows(walk.timings[fastest])  # from its timing
    assert cm.selection == {"fused.top_depth": s.top_depth, "fused.uniform": s.uniform,
                            "fused.block": s.block, "fused.vector": float(s.vector),
                            "fused.below_rows": float(s.below_rows),
                            "fused.packed": float(s.packed), "fused.few": s.few,
                            "fused.wide": float(s.wide),
                            "fused.chunk_rows": float(walk.chunk_rows)}  # fmt: skip
    assert s.described() in cm.strategy_reason
    rows = probe_rows(forest, n_rows=500, seed=8)
    frame = pa.table({f"f{j}": rows[:, j] for j in range(rows.shape[1])})
    pq.write_table(frame, tmp_path / "in.parquet")
    report = scoring.score_parquet(tmp_path / "in.parquet", tmp_path / "out", cm, progress=False)
    assert report.strategy == "fused" and s.described() in report.strategy_reason
    np.testing.assert_allclose(cm.predict_raw(rows), native.predict_raw(rows), rtol=0, atol=1e-12)


#: A process that scores with ``fused`` and says whether it built the kernel.
_PROCESS = """
import sys, numpy as np, scoring
from scoring._compiler import walk_library
built = []
compile_library = walk_library._compile_library
walk_library._compile_library = lambda target: (built.append(target), compile_library(target))
cm = scoring.compile(sys.argv[1], backend="tensor", device="cpu", strategy="fused")
print(float(cm.predict_raw(np.zeros((3, cm.forest.n_features), np.float32))[0]), len(built))
"""


def _process(model_file: Path, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "SCORING_COMPILE_CACHE": str(cache), **env}
    args = [sys.executable, "-c", _PROCESS, str(model_file)]
    return subprocess.run(args, env=environment, capture_output=True, text=True)


def test_the_kernel_is_built_once_per_machine_then_loaded_without_a_compiler(
    tmp_path: Path,
) -> None:
    model = built("xgb_clf")[0]
    model_file = tmp_path / "model.json"
    model.save_model(model_file)
    cache = tmp_path / "cache"
    first = _process(model_file, cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[1] == "1"  # built here
    (library,) = cache.glob("walk-*.so")
    second = _process(model_file, cache, CXX="/nonexistent/c++")
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == [first.stdout.split()[0], "0"]  # loaded, not built
    assert sorted(cache.glob("walk-*")) == [library]  # nothing half written left beside it
    none = _process(model_file, tmp_path / "empty", CXX="/nonexistent/c++")
    assert none.returncode != 0
    last = none.stderr.strip().splitlines()[-1]
    assert "CompileError" in last and "'/nonexistent/c++'" in last and "strategy=" in last


def test_a_cache_others_can_write_to_is_not_where_the_kernel_is_loaded_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(shared.stat().st_mode | stat.S_IWOTH)
    monkeypatch.setenv("SCORING_COMPILE_CACHE", str(shared))
    assert _library_root() != shared
    monkeypatch.setenv("SCORING_COMPILE_CACHE", "off")  # packages off: the user's cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    assert _library_root() == tmp_path / "home" / "scoring" / "compiled"


def test_calls_side_by_side_each_take_one_thread_and_agree() -> None:
    """The kernel lets go of the interpreter lock, so the local engine's calls side by
    side run at once, each on one thread (``for_parallel_calls``)."""
    model, forest, _ = built("lgb_multi")
    backend = scoring.compile(
        model, backend="tensor", device="cpu", strategy="fused"
    ).implementation
    assert backend.for_parallel_calls() is backend
    rows = probe_rows(forest, n_rows=3_000, seed=4)
    alone = backend.predict_raw(rows)
    with ThreadPoolExecutor(2) as pool:
        halves = list(pool.map(backend.predict_raw, (rows[:1_500], rows[1_500:])))
    np.testing.assert_array_equal(np.concatenate(halves), alone)

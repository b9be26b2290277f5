"""The ``compiled`` walk (``fused`` on CUDA): compiled row blocks, how often it compiles;
``fused``'s selection by ``auto``.  The shared CPU kernel of ``fused`` is in
test_generic.py.

Parity with native on every recipe is in test_parity.py (both are in its STRATEGIES).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch._dynamo.utils import counters

import scoring
from scoring._compiler import FUSED_MIN_TESTS, fused_fits
from scoring._compiler.kernels import depth_stages
from scoring._parity import leaf_rows, probe_rows

from .conftest import RECIPES, built


def _graphs() -> int:
    """Graphs torch.compile has traced in this process (each one a compilation)."""
    return int(counters["stats"]["unique_graphs"])


def test_a_job_with_ragged_batches_compiles_once(tmp_path: Path) -> None:
    model, forest, native = built("lgb_cat")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="compiled")
    assert cm.strategy == "compiled" and "compiled in row blocks" in cm.strategy_reason
    rows = probe_rows(forest, n_rows=9_000, seed=5)
    source = tmp_path / "input"
    source.mkdir()
    starts = [0, 1, 18, 4_114, 8_211, 9_000]  # files of 1, 17, 4096, 4097 and 789 rows
    for i, (a, b) in enumerate(itertools.pairwise(starts)):
        frame = pd.DataFrame(rows[a:b], columns=[f"f{j}" for j in range(rows.shape[1])])
        frame.insert(0, "id", np.arange(a, b))
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), source / f"{i}.parquet")
    before = _graphs()
    scoring.score_parquet(source, tmp_path / "out", cm, keep=["id"], outputs="raw",
                          progress=False)  # fmt: skip
    assert _graphs() - before == 1  # one block size, one input dtype
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("id")
    np.testing.assert_allclose(out["raw"], native.predict_raw(rows), rtol=1e-12, atol=1e-12)


def test_every_row_of_a_padded_block_is_its_own() -> None:
    model, forest, native = built("xgb_multi")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="compiled")
    rows = probe_rows(forest, n_rows=5_000, seed=9).astype(np.float32)
    whole = cm.predict_raw(rows)
    before = _graphs()
    for n in (0, 1, 7, 4_096, 4_097):  # none, a short block, a full one, one row past it
        np.testing.assert_array_equal(cm.predict_raw(rows[:n]), whole[:n])
    assert _graphs() == before  # the same block shape throughout
    np.testing.assert_allclose(whole, native.predict_raw(rows), rtol=1e-5, atol=1e-5)
    some = leaf_rows(rows, forest)  # XGBoost's leaf ids refuse rows with inf
    np.testing.assert_array_equal(cm.predict_leaf(some), native.predict_leaf(some))


@pytest.mark.parametrize("name", ["xgb_clf", "lgb_cat", "sk_rf_clf", "sk_chain_clf"])
def test_the_tensor_backend_on_cpu_runs_the_shared_kernel(name: str) -> None:
    """``auto`` on CPU is ``fused`` wherever its tables fit, small forests too (a chain:
    each stage); the backend ``auto`` times it against native and records both."""
    model, forest, _ = built(name)
    assert fused_fits(forest)
    cm = scoring.compile(model, backend="tensor", device="cpu")
    assert cm.strategy == "fused" and "the kernel every forest shares" in cm.strategy_reason
    auto = scoring.compile(model, device="cpu")
    if not forest.stages:
        assert {"native", "tensor:fused", "auto.rounds"} <= set(auto.selection)
        timed = {k: v for k, v in auto.selection.items() if k in ("native", "tensor:fused")}
        fastest = min(timed, key=timed.__getitem__)
        assert fastest == (auto.backend if auto.strategy is None else f"tensor:{auto.strategy}")


def test_a_forest_past_the_kernel_s_ids_falls_back_to_an_eager_strategy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import scoring._compiler as compiler

    forest = built("xgb_clf")[1]
    widest = max(t.n_nodes for t in forest.trees)
    too_many = SimpleNamespace(n_trees=2**31 // widest + 1, trees=forest.trees)
    assert fused_fits(forest) and not fused_fits(too_many)  # type: ignore[arg-type]
    monkeypatch.setattr(compiler, "fused_fits", lambda forest: False)
    assert compiler.choose_strategy(forest, device=torch.device("cpu")).name != "fused"


def test_auto_on_cuda_picks_fused_for_large_forests() -> None:
    from scoring._compiler import choose_strategy

    big = dataclasses.replace(RECIPES["xgb_clf"], n_trees=FUSED_MIN_TESTS // 4, depth=4)
    forest = scoring.compile(big.build(), backend="native").forest
    assert choose_strategy(forest, device=torch.device("cuda")).name == "fused"
    assert choose_strategy(built("xgb_clf")[1], device=torch.device("cuda")).name != "fused"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fused_on_cuda_matches_native() -> None:
    for name in ("xgb_clf", "lgb_cat", "sk_rf_clf"):
        model, forest, native = built(name)
        cm = scoring.compile(model, backend="tensor", device="cuda", strategy="fused")
        rows = probe_rows(forest, n_rows=3_000)
        np.testing.assert_allclose(cm.predict_raw(rows), native.predict_raw(rows), atol=1e-5)
        some = leaf_rows(rows, forest)  # XGBoost's leaf ids refuse rows with inf
    np.testing.assert_array_equal(cm.predict_leaf(some), native.predict_leaf(some))


@pytest.mark.parametrize("stages", [1, 2, 4, 30])
def test_depth_stages_walk_every_tree_to_its_leaves_and_no_further_than_needed(
    stages: int,
) -> None:
    depths = np.random.default_rng(stages).integers(0, 31, size=500)
    plan = depth_stages(depths, stages=stages)
    walked = np.zeros(depths.size, dtype=np.int64)  # trees sorted deepest first
    for count, levels in plan:
        walked[:count] += levels
    assert np.array_equal(walked >= np.sort(depths)[::-1], np.ones(depths.size, bool))
    assert sum(levels for _, levels in plan) == depths.max()
    assert walked.sum() <= depths.size * depths.max()
    if stages > 1:
        assert walked.sum() < depths.size * depths.max()  # the shallow trees stop early


@pytest.mark.parametrize("name", ["sk_et_multi_clf", "sk_mo_et_clf", "xgb_multi"])
def test_the_chain_of_additions_cuda_compiles_keeps_tree_order(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA inductor's reductions add in a tree, so the compiled sum over trees is a
    chain of additions there (an H200 found averaging forests 1-2 ulp off native).  The
    same chain, compiled on CPU, gives native's margins bit for bit."""
    from scoring._compiler import kernels

    monkeypatch.setattr(kernels, "reduces_in_order", lambda device: False)
    model, forest, native = built(name)
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="compiled")
    rows = probe_rows(forest, n_rows=600, seed=9, special=False)
    np.testing.assert_array_equal(cm.predict_raw(rows), native.predict_raw(rows))

"""Run as ``TRITON_INTERPRET=1 python -m tests.triton_parity NAME...``: the Triton walk
(scoring/_compiler/triton_walk.py) under Triton's interpreter held to walk.cpp, bit for
bit, on each recipe's stages; prints one JSON object, recipe -> differences found.

A process of its own because Triton reads ``TRITON_INTERPRET`` when a kernel is
defined, and the build tests of the same kernel need it unset; :func:`run_interpreted`
starts it, with any Python (the GPU image's stand-in too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scoring._compiler import compile_forest, triton_walk
from scoring._compiler.generic import GenericWalk, Schedule
from scoring._compiler.triton_walk import MAX_TOP, TritonSchedule, TritonWalk
from scoring._inputs import Columns
from scoring._ir import Forest
from scoring._parity import probe_rows

from .conftest import ALL_RECIPES as RECIPES
from .conftest import built

ROOT = Path(__file__).resolve().parent.parent
#: Recipes scored through ``scoring.compile(..., strategy="triton")``: every framework,
#: categorical splits, zero-as-missing, vector leaves, a chain.
THROUGH_COMPILE = ["xgb_multi", "xgb_vector_leaves", "xgb_booster_cat", "lgb_cat_frame",
                   "lgb_zero_missing", "sk_hgb_clf", "sk_chain_clf", "sk_iforest",
                   "cb_multi"]  # fmt: skip


def rows_for(forest: Forest) -> list[torch.Tensor]:
    """The parity probes (every threshold and one ulp either side, NaN, +-inf, category
    codes out of range) plus +-0 in every column, at the model's precision; for float64
    models also float32 values read as float64 (the walk's float32 path)."""
    probes = probe_rows(forest, n_rows=300, seed=3)
    signed_zero = np.zeros((2, forest.n_features))
    signed_zero[1] = -0.0
    rows = np.concatenate([probes, signed_zero])
    if forest.input_dtype == "float32":
        return [torch.from_numpy(rows.astype(np.float32))]
    return [torch.from_numpy(rows), torch.from_numpy(rows.astype(np.float32).astype(np.float64))]


def schedules(forest: Forest) -> list[TritonSchedule]:
    """No top, a top of one level and one as deep as the forest allows; one program, and
    several with a short last one; rows as given and feature-major.  The interpreter's
    cost is programs x trees x levels, so each schedule has as few programs as that
    takes."""
    deep = min(forest.max_depth, MAX_TOP)
    return [TritonSchedule(0, 1024, 1, False), TritonSchedule(deep, 256, 1, True),
            TritonSchedule(min(1, deep), 1024, 1, False)]  # fmt: skip


def differences(forest: Forest) -> list[str]:
    eager, _ = compile_forest(forest, device=torch.device("cpu"), strategy="tree_traversal")
    reference = GenericWalk(forest, acc=eager.acc_dtype, schedule=Schedule(0, 0, 16, False))
    found = []
    for i, x in enumerate(rows_for(forest)):
        x = eager._snapped(x)
        start = eager._start(x).contiguous()
        sums = reference.sums(x, start).numpy()
        leaves = eager.leaf_ids(x).numpy()
        # float32 values read as float64 (the second set): the first schedule suffices,
        # as the walk's reading of them does not depend on the schedule.
        for j, schedule in enumerate(schedules(forest)[: None if i == 0 else 1]):
            walk = TritonWalk(forest, acc=eager.acc_dtype, device=torch.device("cpu"),
                              schedule=schedule)  # fmt: skip
            # The last schedule with 64-bit offsets into the rows (a batch past 2**31
            # values), the others with 32-bit ones.
            triton_walk.OFF32_LIMIT = 0 if j == 2 else 2**31
            got = walk.sums(x, start).numpy()
            where = f"{schedule.described()}, {x.dtype}, offsets {triton_walk.OFF32_LIMIT}"
            if not np.array_equal(got, sums):
                rows = int(np.any(got != sums, axis=1).sum())
                found.append(f"sums differ on {rows} rows ({where})")
            got_leaves = walk.leaf_ids(x).numpy()
            if not np.array_equal(got_leaves, leaves):
                rows = int(np.any(got_leaves != leaves, axis=1).sum())
                found.append(f"leaf ids differ on {rows} rows ({where})")
            if j == 0:  # a batch too small to fill a GPU: its trees split over programs
                found += split_differences(walk, x, start, sums, leaves, where)
            if schedule.feature_major:  # a batch as read: one array per feature
                columns = Columns([np.ascontiguousarray(c) for c in x.numpy().T])
                got = walk.sums(columns, start).numpy()
                if not np.array_equal(got, sums):
                    rows = int(np.any(got != sums, axis=1).sum())
                    found.append(f"sums of columns differ on {rows} rows ({where})")
    return found


def split_differences(walk: TritonWalk, x: torch.Tensor, start: torch.Tensor, sums: np.ndarray,
                      leaves: np.ndarray, where: str) -> list[str]:  # fmt: skip
    """The same walk told that a device of many programs waits: leaf ids in one launch
    of tree ranges, sums in two (the leaves, then their values in tree order)."""
    programs, walk.programs = walk.programs, 1 << 30
    try:
        chunks = triton_walk.tree_chunks(len(x), walk.schedule.block, walk.forest.n_trees,
                                         walk.programs)  # fmt: skip
        found = []
        if not np.array_equal(walk.sums(x, start).numpy(), sums):
            found.append(f"sums of {chunks} tree ranges differ ({where})")
        if not np.array_equal(walk.leaf_ids(x).numpy(), leaves):
            found.append(f"leaf ids of {chunks} tree ranges differ ({where})")
        return found
    finally:
        walk.programs = programs


def through_compile(name: str) -> list[str]:
    """``scoring.compile(model, device="cpu", strategy="triton")``, as a user checks the
    CUDA kernel: the outputs of ``fused`` on CPU, and the eager walk's leaf ids."""
    import scoring

    model, forest, _ = built(name)
    triton = scoring.compile(model, device="cpu", strategy="triton")
    if triton.strategy != "triton" or triton.implementation.name != "tensor":
        return [f"compiled as {triton.implementation.name}/{triton.strategy}"]
    fused = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    eager = scoring.compile(model, backend="tensor", device="cpu", strategy="tree_traversal")
    rows = probe_rows(forest, n_rows=200, seed=5, special=False)
    found = []
    if not np.array_equal(triton.predict_raw(rows), fused.predict_raw(rows)):
        found.append("predict_raw differs from fused on CPU")
    if not np.array_equal(triton.predict_leaf(rows), eager.predict_leaf(rows)):
        found.append("predict_leaf differs from the eager walk")
    return found


def _without_overflow_checks() -> None:
    """The interpreter checks every int32 add and multiply for overflow, through int64
    casts and an assert: half its time here.  The kernel's int32 values are node indices
    of forests of at most a few thousand nodes, which these checks can never find near
    2**31; the row offsets, which could overflow, are int64 (triton_kernel.py)."""
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if hasattr(builder.options, "sanitize_overflow"):  # a Triton that has the checks
        builder.options = replace(builder.options, sanitize_overflow=False)


def run_interpreted(*args: str, python: str = sys.executable,
                 env: dict[str, str] | None = None) -> dict[str, list[str]]:  # fmt: skip
    """tests/triton_parity.py on ``args`` by ``python`` (with ``env`` as its whole
    environment, else this one's): the recipes split over one process per core (two
    here), as the interpreter runs on one."""
    flags = [a for a in args if a.startswith("--")]
    names = [a for a in args if not a.startswith("--")]
    parts = max(1, min(os.cpu_count() or 1, 2, len(names)))
    env = {**(os.environ if env is None else env), "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    command = [python, "-m", "tests.triton_parity", *flags]
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    started = [
        subprocess.Popen([*command, *names[i::parts]], cwd=ROOT, env=env, text=True, **pipes)
        for i in range(parts)
    ]
    found: dict[str, list[str]] = {}
    for process in started:
        out, err = process.communicate()
        assert process.returncode == 0, err[-3000:]
        found.update(json.loads(out.strip().splitlines()[-1]))
    return found


def main(args: list[str]) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    _without_overflow_checks()
    compiled = "--compile" in args
    out: dict[str, list[str]] = {}
    for name in (a for a in args if not a.startswith("--")):
        if not RECIPES[name].available:
            continue
        if compiled:
            out[name] = through_compile(name)
            continue
        forest = built(name)[1]
        out[name] = [d for stage in forest.stages or [forest] for d in differences(stage)]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])

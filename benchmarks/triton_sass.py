"""What the CUDA walk costs per node visit, read from its machine code (no GPU needed):
instructions and global loads of one level of the heap-ordered top and one turn of the
linked loop, registers, per row of the three GPU benchmark models (node visits only: a
tree's own few instructions are not counted), and the rows/s that predicts on an H200.

The variant of each model is the one the H200 measured on 2026-11-30 (a top of eight
levels, 128 rows per program, four warps: benchmarks/results/gpu/h200_walk.md), built
for sm_90 by Triton's own ptxas and read with its cuobjdump
(:func:`scoring._compiler.triton_walk.visit_costs`).

"Before" is the kernel of commit 56c38f4, the one the H200 ran, counted the same way.
The prediction scales the H200's measured rows/s of that kernel
(benchmarks/results/gpu/h200_throughput.md) by instructions per row, before over after:
a model that holds while the walk stays bound by issuing instructions, which the next
GPU call checks (its walk and throughput sections print the measured figures).

    python benchmarks/triton_sass.py [--out benchmarks/results/triton_sass.md]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import scoring  # noqa: E402
from scoring._compiler.layout import linked_tables  # noqa: E402
from scoring._compiler.triton_walk import MAX_TOP, VisitCosts, visit_costs, walked_once  # noqa: E402
from scoring._ir import Forest  # noqa: E402
from scoring.recipes import GPU_RECIPES  # noqa: E402

#: The kernel of 56c38f4 counted by visit_costs (sm_90, Triton 3.9), per variant kind.
BEFORE = {
    ("fp32", "fp32", False): VisitCosts(22.0, 3.0, 25, 4, 34),
    ("fp64", "fp64", False): VisitCosts(24.0, 3.0, 26, 4, 32),
    ("fp32", "fp64", True): VisitCosts(22.0, 3.0, 25, 4, 40),
}
#: Rows/s of that kernel on the H200 at 1k, 64k and 1M rows (h200_throughput.md).
MEASURED = {
    "xgb_500x8": (892_730, 55_465_426, 90_973_533),
    "lgb_500x256": (417_446, 25_373_949, 50_055_623),
    "rf_100x12": (2_070_633, 128_924_127, 172_728_280),
}
BATCHES = (1_000, 64_000, 1_000_000)


def variant(forest: Forest, linked: dict[str, np.ndarray]) -> dict[str, object]:
    value = linked["value"]
    return dict(x="fp64" if forest.input_dtype == "float64" else "fp32",
                acc="fp32" if forest.accumulate_dtype == "float32" else "fp64",
                ZERO=bool(forest.has_missing_zero), CAT=bool(forest.has_categorical),
                VECTOR=value.ndim == 2, OUTPUTS=walked_once(value))  # fmt: skip


def levels(linked: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    """Per tree: levels walked in the top (all of them: a leaf above loops to itself)
    and in the linked part."""
    return [(MAX_TOP, max(int(d) - MAX_TOP, 0)) for d in linked["depth"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/triton_sass.md")
    args = parser.parse_args(argv)
    lines = [f"# The CUDA walk per node visit, from its SASS ({date.today()})", "",
             *(line for part in __doc__.split("\n\n")[1:3] for line in (part, "")),
             "| model | kind | top: instructions / loads | linked: instructions / loads | "
             "registers | walks per tree | instructions per row | predicted rows/s at "
             + ", ".join(f"{b:,}" for b in BATCHES) + " |",
             "|---|---|---|---|---:|---:|---:|---|"]  # fmt: skip
    for recipe in GPU_RECIPES:
        forest = scoring.compile(recipe.build(), backend="native").forest
        linked = linked_tables(forest, np.dtype(np.float64))  # the walk's own tables
        kind = variant(forest, linked)
        after = visit_costs(90, TOP=MAX_TOP, BLOCK=128, BEFORE_TRUNC=False, LEAVES=False, **kind)
        before = BEFORE[(str(kind["x"]), str(kind["acc"]), bool(kind["VECTOR"]))]
        walks = (forest.n_outputs if kind["VECTOR"] else 1, 1 if kind["OUTPUTS"] else
                 (forest.n_outputs if kind["VECTOR"] else 1))  # fmt: skip
        rows = levels(linked)
        cost = (walks[0] * before.per_row(rows), walks[1] * after.per_row(rows))
        predicted = ", ".join(f"{m * cost[0] / cost[1] / 1e6:,.1f}M"
                              for m in MEASURED[recipe.name])  # fmt: skip
        for name, costs, walk, per_row, rate in (
            ("before", before, walks[0], cost[0],
             ", ".join(f"{m / 1e6:,.1f}M measured" for m in MEASURED[recipe.name])),
            ("after", after, walks[1], cost[1], predicted),
        ):  # fmt: skip
            lines.append(
                f"| {recipe.name} | {name} ({kind['x']}/{kind['acc']}"
                f"{', vector' if kind['VECTOR'] else ''}) | {costs.top_instructions:g} / "
                f"{costs.top_loads:g} | {costs.linked_instructions} / {costs.linked_loads} | "
                f"{costs.registers} | {walk} | {per_row:,.0f} | {rate} |"
            )
        print(recipe.name, asdict(after), flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

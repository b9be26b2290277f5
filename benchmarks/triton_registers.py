"""Registers and stack bytes of every variant of the CUDA walk (the ``fused`` Triton
kernel), built for sm_80 and sm_90 on this machine (no GPU needed): each constexpr flag
combination at each schedule candidate's rows per program, the deepest top.

    python benchmarks/triton_registers.py [--out benchmarks/results/triton_registers.md]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scoring._compiler.triton_walk import MAX_REGISTERS, MAX_TOP, build_for  # noqa: E402

DTYPES = [("fp32", "fp32"), ("fp32", "fp64"), ("fp64", "fp64")]


def main() -> None:
    import triton

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/triton_registers.md")
    args = parser.parse_args()
    lines = [
        f"# Registers of the CUDA walk's variants ({date.today()})", "",
        f"Built on {platform.machine()} without a GPU by Triton {triton.__version__} "
        f"(`triton.compile` for a `GPUTarget`), 4 warps, top of {MAX_TOP} levels, ptxas "
        f"ceiling {MAX_REGISTERS} registers; read from each cubin with cuobjdump. Stack "
        "bytes are spills (the walk keeps no arrays).", "",
        "| target | rows per program | input | sums at | zero as missing | categorical | "
        "output | registers | stack bytes |",
        "|---|---:|---|---|---|---|---|---:|---:|",
    ]  # fmt: skip
    worst = 0
    for capability, block in itertools.product((80, 90), (128, 256)):
        for (x, acc), zero, cat, output in itertools.product(
            DTYPES, (False, True), (False, True), ("scalar leaves", "vector leaves", "leaf ids")
        ):
            if output == "leaf ids" and acc == "fp32" and x == "fp32":
                continue  # leaf ids do not depend on the accumulation dtype
            build = build_for(capability, x=x, acc=acc, warps=4, TOP=MAX_TOP, BLOCK=block,
                              ZERO=zero, CAT=cat, BEFORE_TRUNC=False,
                              VECTOR=output == "vector leaves",
                              LEAVES=output == "leaf ids")  # fmt: skip
            worst = max(worst, build.spills)
            lines.append(f"| sm_{capability} | {block} | {x} | {acc} | {zero} | {cat} | "
                         f"{output} | {build.registers} | {build.spills} |")  # fmt: skip
            print(lines[-1], flush=True)
    lines += ["", f"Largest stack: {worst} bytes."]
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

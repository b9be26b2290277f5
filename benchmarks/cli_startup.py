"""How long the commands a person types first take: ``scoring --help``, ``--version``,
``models list`` and ``runs`` (a registry of one model), each run as its own process,
best of several runs; and whether each imported torch or a framework.

    python benchmarks/cli_startup.py [--runs 5] [--out benchmarks/results/cli_startup_cpu.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

COMMANDS = [["--help"], ["--version"], ["models", "list"], ["runs"]]
#: Runs a command as ``scoring`` does, then says which heavy modules it imported.
_CHILD = """
import sys
from scoring.cli import app
sys.argv = ["scoring", *sys.argv[1:]]
try:
    app()
except SystemExit:
    pass
heavy = [m for m in ("torch", "xgboost", "lightgbm", "sklearn") if m in sys.modules]
print("HEAVY:" + ",".join(heavy), file=sys.stderr)
"""


def registry_of_one(root: Path) -> None:
    import numpy as np
    import xgboost as xgb

    X = np.random.default_rng(0).normal(size=(200, 4))
    model = xgb.XGBClassifier(n_estimators=2).fit(X, X[:, 0] > 0)
    model.save_model(root / "m.json")
    register = ["models", "register", str(root / "m.json"), "--name", "churn"]
    subprocess.run([sys.executable, "-c", _CHILD, *register, "--registry", str(root / "reg")],
                   check=True, capture_output=True)  # fmt: skip


def timed(command: list[str], registry: Path) -> tuple[float, str]:
    extra = ["--registry", str(registry)] if command[0] in ("models", "runs") else []
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, *command, *extra],
                          capture_output=True, text=True, check=True)  # fmt: skip
    seconds = time.perf_counter() - began
    heavy = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY:"))
    return seconds, heavy.removeprefix("HEAVY:") or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        registry_of_one(Path(tmp))
        best: dict[str, tuple[float, str]] = {}
        load = os.getloadavg()[0]
        for _ in range(args.runs):  # in alternation: the machine's pace drifts
            for command in COMMANDS:
                key = " ".join(command)
                seconds, heavy = timed(command, Path(tmp) / "reg")
                if key not in best or seconds < best[key][0]:
                    best[key] = (seconds, heavy)
    lines = [f"# The CLI's start ({date.today()})", "",
             f"{os.cpu_count()} CPU cores ({platform.machine()}), Python "
             f"{platform.python_version()}; load average {load:.2f} at the start. Each "
             f"command its own process, best of {args.runs}, in alternation.", "",
             "| command | seconds | imported torch or a framework |", "|---|---:|---|"]  # fmt: skip
    for key, (seconds, heavy) in best.items():
        lines.append(f"| `scoring {key}` | {seconds:.2f} | {heavy} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

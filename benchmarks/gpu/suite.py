"""Everything GPU-related, measured in one call: parity, throughput, end to end, OOM.

Sections, each written as markdown under ``--out`` as soon as it is done (a call cut
short still returns what finished):

* ``walk``: the ``fused`` kernel on CUDA (one Triton kernel for every forest), per
  model: rows whose margins differ from walk.cpp on the CPU and whose leaves differ from
  native, the kernel's build time cold and warm, the schedule measured, its registers
  and stack, rows/s at 1M rows, peak device memory, a new model's first 1,000 rows in a
  fresh process, and copy rates to and from the device;
* ``parity``: the Hypothesis parity file on the device, then every strategy on probe
  rows (thresholds and their neighbours, NaN, +-inf, unseen categories) in float32 and
  float64, leaves and outputs against the framework's own predictor;
* ``throughput``: rows/s per strategy at batches of 1k, 64k, 1M and 16M rows (input
  already on the device), Hummingbird on the device, native on every CPU core;
* ``e2e``: Parquet to Parquet through ``score_parquet`` against reading and writing
  the same files alone;
* ``job``: a job run as ``scoring run`` runs it, its report copied beside the tables
  (``gpu_job.html``, ``gpu_job.json``): the GPU's utilisation, memory and power over
  the run, sampled through NVML, or the one line that says why not;
* ``oom``: a batch larger than the device memory left free, split and retried, against
  the same batch scored without pressure;
* ``packages``: strategy ``compiled`` (``fused`` on CUDA) compiled in one process, then
  the ahead-of-time package it leaves loaded by a second process: seconds, and whether
  outputs agree;
* ``explain``: contributions (TreeSHAP) on the device by batch size against the
  frameworks' own on every CPU core, with the largest difference between them.

On a machine without CUDA, ``--dry-run`` runs every section with tiny sizes on the CPU
(``make test`` does, so that the suite cannot rot); with ``TRITON_INTERPRET=1`` set as
well, the walk section runs the CUDA kernel itself under Triton's interpreter.  See
README.md beside this file.

    python benchmarks/gpu/suite.py [--out DIR] [--dry-run] [--sections parity,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import scoring  # noqa: E402
from scoring._backends.hummingbird import HB_STRATEGIES  # noqa: E402
from scoring._compiler import STRATEGIES  # noqa: E402
from scoring._compiler.contributions import Contributions  # noqa: E402
from scoring._parity import max_error, outputs_of, probe_frame, probe_rows  # noqa: E402
from scoring.errors import ScoringError  # noqa: E402
from scoring.recipes import EXPLAIN_RECIPES, GPU_RECIPES, SMALL_RECIPES, Recipe, make_data  # noqa: E402

Builder = Callable[[], Any]
#: pytest's summary lines, apart from the noise libraries print while shutting down.
SUMMARY = re.compile(r"(FAILED|ERROR|.*\b(passed|failed)\b.* in [0-9.]+s)")
SECTIONS = (
    "walk",
    "parity",
    "throughput",
    "e2e",
    "job",
    "oom",
    "hypothesis",
    "packages",
    "explain",
)
#: Strategies measured: ``triton`` is ``fused`` by name on CUDA (and the interpreter on CPU).
MEASURED = tuple(s for s in STRATEGIES if s != "triton")
#: time.monotonic() past which a section starts nothing long (set by --budget).
DEADLINE = float("inf")
#: Throughput variants run: those whose name contains this (set by --variants).
VARIANTS = ""


@dataclasses.dataclass(frozen=True)
class Sizes:
    batches: tuple[int, ...]
    e2e_rows: int
    e2e_file_rows: int
    oom_rows: int
    recipes: tuple[Recipe, ...]
    parity_recipes: tuple[Recipe, ...]
    explain_batches: tuple[int, ...]
    explain_recipes: tuple[Recipe, ...]
    walk_recipes: tuple[Recipe, ...]
    walk_rows: int


#: Beside the suite's shapes, the walk section's: categorical splits, float64 inputs, and
#: splits at 0 (a float32 denormal threshold, which a build flushing to zero would miss).
_WALK_EXTRA = tuple(r for r in SMALL_RECIPES
                    if r.name in ("lgb_cat", "sk_hgb_clf", "xgb_zero_split"))  # fmt: skip

FULL = Sizes(
    batches=(1_000, 64_000, 1_000_000, 16_000_000),
    e2e_rows=8_000_000,
    e2e_file_rows=1_000_000,
    oom_rows=8_000_000,
    recipes=tuple(GPU_RECIPES),
    parity_recipes=tuple(r for r in SMALL_RECIPES if r.available),  # CatBoost: too big to carry
    explain_batches=(1_000, 64_000, 1_000_000),
    explain_recipes=tuple(EXPLAIN_RECIPES),
    walk_recipes=(*GPU_RECIPES, *_WALK_EXTRA),
    walk_rows=1_000_000,
)


def tiny(recipe: Recipe) -> Recipe:
    params = {**recipe.params, **({"num_leaves": 16} if "num_leaves" in recipe.params else {})}
    return dataclasses.replace(
        recipe, name=f"{recipe.name} (tiny)", n_trees=8, depth=4, n_rows=1_000, params=params
    )


DRY = Sizes(
    batches=(1_000, 4_000),
    e2e_rows=20_000,
    e2e_file_rows=10_000,
    oom_rows=4_000,
    recipes=tuple(tiny(r) for r in GPU_RECIPES),
    parity_recipes=tuple(r for r in SMALL_RECIPES if r.name in ("xgb_clf", "lgb_cat")),
    explain_batches=(256, 1_000),
    explain_recipes=tuple(tiny(r) for r in EXPLAIN_RECIPES),
    walk_recipes=(tiny(GPU_RECIPES[0]), *_WALK_EXTRA),
    walk_rows=2_000,
)


#: Models trained in this call, by recipe name: each is trained once (training the
#: LightGBM shape alone took minutes on 2 cores), whichever sections use it.
_TRAINED: dict[str, Any] = {}


def _trained(recipe: Recipe) -> Any:
    if recipe.name not in _TRAINED:
        _TRAINED[recipe.name] = recipe.build()
    return _TRAINED[recipe.name]


def machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{os.cpu_count()} CPU cores ({platform.machine()}), {gpu}, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


class Report:
    """One markdown file per section, rewritten after every line (partial runs count)."""

    def __init__(self, out: Path, section: str, title: str, device: str):
        self.path = out / f"gpu_{section}.md"
        self.lines = [f"# {title} ({date.today()})", "", f"Machine: {machine()}.", ""]
        self.device = device

    def add(self, *lines: str) -> None:
        self.lines += lines
        for line in lines:
            print(line, flush=True)
        self.path.write_text("\n".join(self.lines) + "\n")


def timed(fn: Callable[[], Any], *, budget: float = 0.6, most: int = 10) -> float:
    """Median seconds of ``fn()`` after a warm-up, measured with device events on CUDA."""
    fn()
    first = _once(fn)
    reps = int(min(most, max(2, budget / max(first, 1e-6))))
    return statistics.median([first] + [_once(fn) for _ in range(reps - 1)])


def _once(fn: Callable[[], Any]) -> float:
    if not torch.cuda.is_available():
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000


def failure(exc: BaseException) -> str:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "OOM"
    return (
        f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}" if str(exc) else type(exc).__name__
    )


# -- parity -------------------------------------------------------------------------


def parity(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "parity", "Parity on the device against the native predictor", device)
    report.add(
        f"Every strategy on {device} on probe rows (each threshold and its neighbours, NaN,",
        "+-inf, unseen categories): max error of predict_proba (predict for regressors)",
        "against native, and whether every row's leaf equals native's, on the rows native",
        "gives leaves for (HistGradientBoosting has no apply: '-').",
        "",
        "| model | strategy | input | rows | max error | leaves |",
        "|---|---|---|---:|---:|---|",
    )
    for recipe in sizes.parity_recipes:
        model = _trained(recipe)
        for strategy in MEASURED:
            for dtype in (np.float32, np.float64):
                if time.monotonic() > DEADLINE:
                    return report.add("Stopped: the suite's time budget ran out.")
                report.add(_parity_row(recipe, model, strategy, dtype, device))


def hypothesis(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    """tests/test_parity.py's tensor checks and the CUDA tests, run on the device."""
    report = Report(out, "hypothesis", f"The Hypothesis parity suite on {device}", device)
    # Wide lines: pytest's summary then carries each failure's message, which is all
    # of it that comes back from the GPU machine.
    env = {**os.environ, "SCORING_TEST_DEVICE": device, "PYTHONUNBUFFERED": "1",
           "COLUMNS": "400"}  # fmt: skip
    # Other library versions than the project pins: their deprecations are not ours here.
    quiet = ["-W", "ignore::DeprecationWarning", "-W", "ignore::FutureWarning"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *quiet,
           "tests/test_parity.py", "tests/test_compile.py",
           "-k", "tensor_matches_native or cuda"]  # fmt: skip
    if dry:
        cmd += ["-k", "xgb_clf and tensor_matches_native and gemm"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(30.0, DEADLINE - time.monotonic()))  # fmt: skip
        lines = (done.stdout + done.stderr).strip().splitlines()
        tail = [
            line
            for line in lines
            if re.match(r"(FAILED|ERROR|.*\b(passed|failed)\b.* in [0-9.]+s)", line)
        ]
        tail = tail or lines[-20:]
    except subprocess.TimeoutExpired:
        tail = ["stopped: the suite's time budget ran out"]
    report.add("```", *tail, "```")


def _parity_row(recipe: Recipe, model: Any, strategy: str, dtype: type, device: str) -> str:
    head = f"| {recipe.name} | {strategy} | {np.dtype(dtype).name}"
    try:
        cm = scoring.compile(model, backend="tensor", device=device, strategy=strategy)
        native = scoring.compile(model, backend="native")
        X = probe_frame(cm.forest) if recipe.frame else probe_rows(cm.forest, n_rows=4096)
        if not recipe.frame:
            X = X.astype(dtype)
        elif dtype == np.float32:
            return f"{head} | - | frame input | - |"
        ours, ref = outputs_of(cm, X, leaves=True), outputs_of(native, X, leaves=True)
        leaves = "-"
        if "leaves" in ref:  # HistGradientBoosting has no apply
            same = np.array_equal(ours.get("leaves"), ref["leaves"])
            leaves = "equal" if same else "DIFFER"
        return f"{head} | {len(X):,} | {max_error(ours['values'], ref['values']):.1e} | {leaves} |"
    except (ScoringError, RuntimeError) as exc:
        return f"{head} | - | {failure(exc)} | - |"


# -- the fused walk on CUDA --------------------------------------------------------

#: A new model's first 1,000 rows in a fresh process: imports, compile (tables and the
#: measured schedule), score; one JSON line.
_FIRST_ROWS = """
import json, sys, time
began = time.perf_counter()
import numpy as np, scoring, torch
imported = time.perf_counter()
if sys.argv[2] == "cuda":  # the context, apart from what the model itself costs
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
ready = time.perf_counter()
cm = scoring.compile(sys.argv[1], backend="tensor", device=sys.argv[2], strategy=sys.argv[4])
compiled = time.perf_counter()
cm.predict_raw(np.load(sys.argv[3]))
done = time.perf_counter()
print(json.dumps({"total": done - began, "after_imports": done - imported,
                  "context": ready - imported, "compile": compiled - ready,
                  "score": done - compiled}))
"""


def _predicted() -> dict[str, dict[int, str]]:
    """What the machine code predicts, per model and batch (the "after" rows of
    benchmarks/results/triton_sass.md), to print beside what the card measures."""
    path = ROOT / "benchmarks" / "results" / "triton_sass.md"
    found: dict[str, dict[int, str]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[1].startswith("after"):
            found[cells[0]] = dict(zip((1_000, 64_000, 1_000_000), cells[7].split(", "),
                                       strict=False))  # fmt: skip
    return found


def _walked_by(device: str) -> str:
    """The strategy that runs the Triton kernel on ``device``: ``fused`` on CUDA; on CPU,
    ``triton`` under Triton's interpreter, else ``fused`` (walk.cpp stands in)."""
    from scoring._compiler.triton_walk import interpreting

    return "triton" if device == "cpu" and interpreting() else "fused"


def walk(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    """``fused`` on the device against walk.cpp and native; on CPU (the dry run) the
    kernel under Triton's interpreter, or if that is not running, the CPU kernel standing
    in, as the table says."""
    import triton

    title = "The fused walk: one Triton kernel for every forest"
    report = Report(out, "walk", title, device)
    report.add(
        f"Triton {triton.__version__}. Per model: rows of probe data (thresholds and their",
        "neighbours, NaN, +-inf) whose margins differ from walk.cpp on the CPU and whose",
        "leaves differ from native (on probe rows without NaN or inf); seconds to build",
        "the scorer, cold (first in the process: kernel compiles included) and warm (the",
        "same model again); the schedule measured; the kernel's registers and stack bytes;",
        "rows/s of margins at",
        f"{sizes.walk_rows:,} rows (input on the device), with what the machine code predicts",
        "(benchmarks/results/triton_sass.md); peak device memory of that batch;",
        "a new model's first 1,000 rows in a fresh process (after imports: the device's",
        "context, the compile with its schedule's measurements, the first call); rows/s",
        "of 1,000-row calls with the trees split over programs (the default for a batch",
        "that cannot fill the device) and not split.",
        "",
        "| model | margins differ | leaves differ | build cold s | warm s | schedule | "
        "registers / stack | rows/s | peak MiB | first 1,000 rows s | 1,000 rows/s split / not |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|",
    )
    work = Path(tempfile.mkdtemp(prefix="scoring-gpu-walk-"))
    predicted = _predicted()
    for recipe in sizes.walk_recipes:
        if time.monotonic() > DEADLINE:
            return report.add("Stopped: the suite's time budget ran out.")
        try:
            report.add(_walk_row(recipe, work, sizes, device, predicted))
        except (ScoringError, RuntimeError, ImportError) as exc:
            report.add(f"| {recipe.name} | {failure(exc)} |" + " - |" * 9)
    report.add("", *_copy_rates(device, dry))


def _walk_row(recipe: Recipe, work: Path, sizes: Sizes, device: str,
              predicted: dict[str, dict[int, str]]) -> str:  # fmt: skip
    from scoring._compiler.triton_walk import TritonWalk, build_for, candidates

    model, strategy = _trained(recipe), _walked_by(device)
    begin = time.perf_counter()
    cm = scoring.compile(model, backend="tensor", device=device, strategy=strategy)
    cold = time.perf_counter() - begin
    begin = time.perf_counter()
    scoring.compile(model, backend="tensor", device=device, strategy=strategy)
    warm = time.perf_counter() - begin
    on_cpu = scoring.compile(model, backend="tensor", device="cpu", strategy="fused")
    native = scoring.compile(model, backend="native")
    X = probe_rows(cm.forest, n_rows=4096, special=not recipe.frame)
    X = X.astype(np.float32 if cm.forest.input_dtype == "float32" else np.float64)
    margins = (cm.predict_raw(X) != on_cpu.predict_raw(X)).reshape(len(X), -1)
    finite = probe_rows(cm.forest, n_rows=4096, special=False).astype(X.dtype)  # as native takes
    try:  # HistGradientBoosting has no apply; a frame model may refuse plain rows
        leaf_rows = np.any(cm.predict_leaf(finite) != native.predict_leaf(finite), axis=1)
        leaves = f"{int(leaf_rows.sum()):,}"
    except (ScoringError, AttributeError, ValueError, TypeError):
        leaves = "-"
    kernel = getattr(cm.implementation.module.kernel, "walk", None)
    schedule, regs = "CPU kernel (dry run)", "-"
    if isinstance(kernel, TritonWalk):
        schedule = kernel.schedule.described().removeprefix("Triton: ")
        built_as = kernel.schedule
        if device == "cpu":  # the interpreter's one large program: the GPU's first try
            built_as = candidates(cm.forest)[0]
            as_built = built_as.described().removeprefix("Triton: ")
            schedule = f"interpreter; registers for sm_90 as {as_built}"
        x = "fp64" if cm.forest.input_dtype == "float64" else "fp32"
        acc = "fp64" if kernel.acc == torch.float64 else "fp32"
        capability = torch.cuda.get_device_capability() if device == "cuda" else (9, 0)
        built = build_for(capability[0] * 10 + capability[1], x=x, acc=acc,
                          warps=built_as.warps, **kernel.variant(built_as))  # fmt: skip
        regs = f"{built.registers} / {built.spills}"
    rows = _rows(recipe, sizes.walk_rows, distinct=sizes.walk_rows)
    x_dev = torch.from_numpy(rows).to(device)
    module = cm.implementation.module
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        seconds = timed(lambda: module(x_dev))
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    first = _first_rows(model, recipe, work, device)
    said = predicted.get(recipe.name, {}).get(sizes.walk_rows, "-")
    return (f"| {recipe.name} | {int(margins.any(axis=1).sum()):,} | {leaves} | {cold:.2f} | "
            f"{warm:.2f} | {schedule} | {regs} | {sizes.walk_rows / seconds:,.0f} "
            f"(predicted {said}) | {peak:,.0f} | {first} | "
            f"{_split_or_not(module, kernel, x_dev[:1_000])} |")  # fmt: skip


def _split_or_not(module: Any, kernel: Any, rows: torch.Tensor) -> str:
    """Rows/s of calls of ``rows`` with the trees split over programs, then not."""
    programs = getattr(kernel, "programs", None)
    if programs is None:  # the CPU kernel standing in
        return "-"
    rates = []
    try:
        for split in (programs, 0):
            kernel.programs = split
            with torch.inference_mode():
                rates.append(f"{len(rows) / timed(lambda: module(rows)):,.0f}")
    finally:
        kernel.programs = programs
    return " / ".join(rates)


def _first_rows(model: Any, recipe: Recipe, work: Path, device: str) -> str:
    """Seconds for a fresh process to score 1,000 rows of a model it has not seen."""
    path = _model_file(model, recipe, work / recipe.name.split()[0])
    rows = work / "first.npy"
    np.save(rows, _rows(recipe, 1_000, distinct=1_000))
    argv = [sys.executable, "-c", _FIRST_ROWS, str(path), device, str(rows), _walked_by(device)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": _with_root()})  # fmt: skip
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    t = json.loads(done.stdout.strip().splitlines()[-1])
    return (
        f"{t['total']:.2f} ({t['after_imports']:.2f}: context {t['context']:.2f}, "
        f"compile {t['compile']:.2f}, score {t['score']:.2f})"
    )


def _with_root() -> str:
    """``PYTHONPATH`` with the repository first: a child keeps the wheels carried there."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def _model_file(model: Any, recipe: Recipe, stem: Path) -> Path:
    """``model`` saved as its framework saves it (scikit-learn: skops), at ``stem``."""
    if recipe.framework == "xgboost":
        model.save_model(path := stem.with_suffix(".ubj"))
    elif recipe.framework == "lightgbm":
        (model.booster_ if hasattr(model, "booster_") else model).save_model(
            path := stem.with_suffix(".txt")
        )
    else:
        import skops.io

        skops.io.dump(model, path := stem.with_suffix(".skops"))
    return path


def _copy_rates(device: str, dry: bool) -> list[str]:
    """GB/s of one pinned 256 MiB buffer to the device and back (pageable on CPU)."""
    if device != "cuda":
        return ["Copy rates: skipped, no CUDA device."]
    size = (16 << 20) if dry else (256 << 20)
    host = torch.empty(size // 4, dtype=torch.float32, pin_memory=True)
    dev = torch.empty_like(host, device=device)
    to = timed(lambda: dev.copy_(host, non_blocking=True))
    back = timed(lambda: host.copy_(dev, non_blocking=True))
    return [f"Copy rates (pinned, {size >> 20} MiB): to the device {size / to / 1e9:.1f} GB/s, "
            f"from it {size / back / 1e9:.1f} GB/s."]  # fmt: skip


# -- throughput ---------------------------------------------------------------------


def throughput(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "throughput", "Throughput by batch size", device)
    report.add(
        f"Rows/s of margins (tensor, Hummingbird: input already on {device}, median of",
        "repeats timed with device events) and of native predict_proba on every CPU core",
        "(numpy input). Compile: seconds to build the scorer.",
        "",
        *_with_predicted(_batch_header(["model", "variant", "compile s"], sizes.batches)),
    )
    predicted = _predicted()  # fused's rows end with what the machine code predicts
    for recipe in sizes.recipes:
        model = _trained(recipe)
        top = max(sizes.batches)
        X = _rows(recipe, top, distinct=1_000_000)
        x_dev = torch.from_numpy(X).to(device)
        for variant, build in _variants(model, device, x_dev[: min(top, 1 << 19)]):
            if VARIANTS not in variant:
                continue
            row = _throughput_row(recipe.name, variant, build, X, x_dev, sizes.batches)
            said = predicted.get(recipe.name, {}).items() if variant == "tensor fused" else ()
            row += " " + (", ".join(f"{b:,}: {r}" for b, r in said) or "-") + " |"
            report.add(row)
        del x_dev
        if device == "cuda":
            torch.cuda.empty_cache()


def _with_predicted(header: list[str]) -> list[str]:
    """A table head with a last column for the machine code's predictions."""
    return [header[0] + " predicted rows/s |", header[1] + "---|"]


def _batch_header(first: list[str], batches: tuple[int, ...]) -> list[str]:
    """A markdown table's head: ``first`` columns (text, then numbers), one per batch."""
    names = [*first, *(f"{b:,}" for b in batches)]
    align = ["---"] * 2 + ["---:"] * (len(names) - 2)
    return ["| " + " | ".join(names) + " |", "|" + "|".join(align) + "|"]


def _rows(recipe: Recipe, rows: int, *, distinct: int) -> np.ndarray:
    """``rows`` float32 rows of the recipe's data, at most ``distinct`` of them distinct."""
    base, _ = make_data(recipe, seed=1, n_rows=min(rows, distinct))
    return np.resize(np.asarray(base, dtype=np.float32), (rows, recipe.n_features))


def _variants(model: Any, device: str, sample: torch.Tensor) -> list[tuple[str, Builder]]:
    def tensor(strategy: str) -> Builder:
        walked = _walked_by(device) if strategy == "fused" else strategy

        def build() -> Any:
            cm = scoring.compile(model, backend="tensor", device=device, strategy=walked)
            module = cm.implementation.module
            for rows in (1, len(sample)):  # compiles each block size fused will use
                module(sample[:rows])
            return module

        return build

    def hummingbird(strategy: str) -> Builder:
        def build() -> Any:
            cm = scoring.compile(
                model, backend="hummingbird", device=device, strategy=strategy, verify=False
            )
            return cm.implementation.model.model  # hummingbird's own torch executor

        return build

    def native() -> Any:
        cm = scoring.compile(model, backend="native")
        return lambda x: cm.predict_proba(x.cpu().numpy() if isinstance(x, torch.Tensor) else x)

    depth = scoring.compile(model, backend="native").forest.max_depth
    out: list[tuple[str, Builder]] = [(f"tensor {s}", tensor(s)) for s in MEASURED]
    for strategy in HB_STRATEGIES:
        if strategy == "perfect_tree_traversal" and depth > 12:
            continue  # hummingbird allocates 2**depth nodes per tree: the host runs out
        out.append((f"hummingbird {strategy}", hummingbird(strategy)))
    out.append((f"native ({os.cpu_count()} cores)", native))
    return out


def _throughput_row(
    name: str, variant: str, build: Callable[[], Any], X: np.ndarray, x_dev: torch.Tensor,
    batches: tuple[int, ...],
) -> str:  # fmt: skip
    start = time.perf_counter()
    try:
        fn = build()
    except (ScoringError, RuntimeError) as exc:
        return f"| {name} | {variant} | {failure(exc)} |" + " - |" * len(batches)
    cells = [f"{time.perf_counter() - start:.1f}"]
    walk = getattr(getattr(fn, "kernel", None), "walk", None)
    if hasattr(walk, "schedule"):  # which schedule the build measured, beside its rates
        variant = f"{variant} ({walk.schedule.described().removeprefix('Triton: ')})"
    host = variant.startswith("native")
    slow = False
    for batch in batches:
        if slow or (host and batch > 1_000_000) or time.monotonic() > DEADLINE:
            cells.append("-")
            continue
        rows = X[:batch] if host else x_dev[:batch]
        try:
            with torch.inference_mode():
                seconds = timed(lambda rows=rows: fn(rows))
            cells.append(f"{batch / seconds:,.0f}")
            # Rows/s grows with the batch: the next size at this rate is an upper bound.
            following = [b for b in batches if b > batch]
            slow = bool(following) and seconds * following[0] / batch > 20
        except (ScoringError, RuntimeError) as exc:
            cells.append(failure(exc))
            slow = True
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return f"| {name} | {variant} | " + " | ".join(cells) + " |"


# -- end to end ---------------------------------------------------------------------


def e2e(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "e2e", "Parquet to Parquet on the device against IO alone", device)
    recipe = sizes.recipes[0]
    work = Path(tempfile.mkdtemp(prefix="scoring-gpu-e2e-"))
    model_path = work / "model.ubj"
    _trained(recipe).save_model(model_path)
    data = _write_input(work / "input", recipe, sizes)
    io_seconds = timed(lambda: _io_only(data, work / "io-out"), budget=0, most=2)
    report.add(
        f"Model: {recipe.name}; {sizes.e2e_rows:,} rows of {recipe.n_features} float32 features "
        f"in files of {sizes.e2e_file_rows:,} rows, page cache warm. IO alone: read every file",
        "with pyarrow and write the id and one float32 column per row.",
        "",
        "| run | backend | seconds | rows/s | vs IO alone |",
        "|---|---|---:|---:|---:|",
        f"| IO alone | - | {io_seconds:.2f} | {sizes.e2e_rows / io_seconds:,.0f} | 100% |",
    )
    runs = [("tensor", device, "perfect_tree_traversal"), ("tensor", device, "fused"),
            ("native", "cpu", "-")]  # fmt: skip
    for backend, on, strategy in runs:
        target = work / f"out-{backend}-{strategy}"
        start = time.perf_counter()  # compiling is part of the run, as in a job
        try:
            cm = scoring.compile(model_path, backend=backend, device=on, strategy=strategy
                                 if strategy != "-" else "auto")  # fmt: skip
            scoring.score_parquet(data, target, cm, keep=["id"], progress=False)
            seconds = time.perf_counter() - start
            share = io_seconds / seconds
            report.add(
                f"| score_parquet ({cm.strategy or cm.backend}) | {backend} | "
                f"{seconds:.2f} | {sizes.e2e_rows / seconds:,.0f} | {share:.0%} |"
            )
        except ScoringError as exc:
            report.add(f"| score_parquet | {backend} | {failure(exc)} | - | - |")


def _write_input(data: Path, recipe: Recipe, sizes: Sizes) -> Path:
    data.mkdir(parents=True)
    X, _ = make_data(recipe, seed=7, n_rows=sizes.e2e_file_rows)
    cols = {f"f{j}": np.asarray(X[:, j], dtype=np.float32) for j in range(X.shape[1])}
    for i, start in enumerate(range(0, sizes.e2e_rows, sizes.e2e_file_rows)):
        ids = np.arange(start, start + sizes.e2e_file_rows)
        pq.write_table(pa.table({"id": ids, **cols}), data / f"part-{i:05d}.parquet")
    return data


def _io_only(data: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for path in sorted(data.glob("*.parquet")):
        table = pq.read_table(path)
        column = table.column("f0").combine_chunks()
        pq.write_table(pa.table({"id": table.column("id"), "score": column}), target / path.name)


# -- a job's report ---------------------------------------------------------------------


def job(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    """``scoring run``'s job on the device, as a CronJob runs it: what its report says
    the GPU did (NVML samples: utilisation, memory, power, this process's memory), and
    the report itself beside the tables (gpu_job.html, gpu_job.json)."""
    from scoring.jobs import JobSpec, run_job

    report = Report(out, "job", "A job's run report: the GPU over the run", device)
    if time.monotonic() > DEADLINE:
        report.add("Skipped: the budget was spent before it started.")
        return
    recipe = sizes.recipes[0]
    work = Path(tempfile.mkdtemp(prefix="scoring-gpu-job-"))
    model_path = work / "model.ubj"
    _trained(recipe).save_model(model_path)
    data = _write_input(work / "input", recipe, sizes)
    spec = JobSpec.model_validate({
        "name": "gpu-suite", "model": str(model_path), "input": f"{data}/",
        "output": f"{work / 'scores'}/", "keep": ["id"], "device": device,
        "registry": str(work / "registry"),
    })  # fmt: skip
    try:
        done = run_job(spec, progress=False)
    except ScoringError as exc:
        report.add(f"The job failed: {failure(exc)}")
        return
    for name in done.report_files:
        shutil.copyfile(name, out / f"gpu_job{Path(name).suffix}")
    written = json.loads((out / "gpu_job.json").read_text())
    gpu = written.get("gpu") or {"absent": "none recorded"}
    report.add(f"Model: {recipe.name}; {written['rows']:,} rows in {written['wall_seconds']:.1f} s "
               f"on {written['device']} ({written['backend']}/{written['strategy'] or '-'}); "
               f"{_gpu_said(gpu)}.")  # fmt: skip
    if "devices" in gpu:
        report.add("", "| device | name | utilisation mean | max | memory max (MiB) | "
                   "this process (MiB) | power mean (W) | samples |",
                   "|---:|---|---:|---:|---:|---:|---:|---:|")  # fmt: skip
        for d in gpu["devices"]:
            count = sum(1 for s in gpu["series"] if s[1] == d["device"])
            power = "-" if d["power_mean_w"] is None else f"{d['power_mean_w']:.0f}"
            report.add(f"| {d['device']} | {d['name']} | {d['utilisation_mean_pct']:.0f}% | "
                       f"{d['utilisation_max_pct']:.0f}% | {d['memory_max_mib']:,.0f} | "
                       f"{d['process_memory_max_mib']:,.0f} | {power} | {count} |")  # fmt: skip


def _gpu_said(gpu: dict[str, Any]) -> str:
    if "absent" in gpu:
        return f"GPU: {gpu['absent']}"
    return f"GPU sampled every {gpu['every_seconds']:g} s on {len(gpu['devices'])} device(s)"


# -- out of memory ------------------------------------------------------------------


def oom(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "oom", "A batch larger than free device memory", device)
    if device != "cuda":
        report.add("Skipped: needs a CUDA device (the split itself is tested on CPU).")
        return
    recipe = sizes.recipes[0]
    # An eager strategy: its per-tree scratch is what the split has to fit.
    strategy = "perfect_tree_traversal"
    cm = scoring.compile(_trained(recipe), backend="tensor", device=device, strategy=strategy)
    backend = cm.implementation
    X, _ = make_data(recipe, seed=3, n_rows=sizes.oom_rows)
    X = np.asarray(X, dtype=np.float32)
    features = pa.table({"f0": pa.array([0.0])})
    reference, _ = backend.score(features, X, raw=False)
    report.add(
        f"Model: {recipe.name}, strategy {backend.strategy}; one batch of {len(X):,} rows "
        f"({X.nbytes >> 20} MiB of input). A blocker tensor leaves only the free memory shown.",
        "",
        "| free MiB | outcome | batch rows after | same as unpressured |",
        "|---:|---|---:|---|",
    )
    for free_mib in (4096, 1024, 512, 128):
        backend.batch_rows = len(X)
        torch.cuda.empty_cache()
        available, _ = torch.cuda.mem_get_info()
        blocker = torch.empty(
            max(0, available - (free_mib << 20)), dtype=torch.uint8, device=device
        )
        try:
            values, _ = backend.score(features, X, raw=False)
            same = "yes" if np.array_equal(values, reference) else "NO"
            report.add(f"| {free_mib:,} | scored | {backend.batch_rows:,} | {same} |")
        except (ScoringError, RuntimeError) as exc:
            report.add(f"| {free_mib:,} | {failure(exc)} | - | - |")
        finally:
            del blocker


# -- packages -----------------------------------------------------------------------

#: The second process of ``packages``: compile, score, report as one JSON line.
_SECOND = """
import json, sys, time
import numpy as np, torch
import scoring
began = time.perf_counter()
cm = scoring.compile(sys.argv[1], backend="tensor", device=sys.argv[3], strategy="compiled")
out = cm.predict_raw(np.load(sys.argv[2]))
seconds = time.perf_counter() - began
np.save(sys.argv[4], out)
print(json.dumps({"seconds": seconds, "dynamo": "torch._dynamo" in sys.modules}))
"""


def packages(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "packages", "Compiled packages of strategy compiled", device)
    report.add("| model | first process | package built after | second process | "
               "Dynamo in second | max diff |", "|---|---:|---:|---:|---|---:|")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="scoring-gpu-packages-"))
    os.environ["SCORING_COMPILE_CACHE"] = str(work / "packages")
    try:
        for recipe in sizes.recipes[: 1 if dry else 2]:
            report.add(_packages_row(recipe, work, device))
    finally:
        os.environ["SCORING_COMPILE_CACHE"] = "off"


def _packages_row(recipe: Recipe, work: Path, device: str) -> str:
    model = _trained(recipe)
    path = _model_file(model, recipe, work / "model")
    rows = np.asarray(make_data(recipe, seed=2, n_rows=5_000)[0], dtype=np.float32)
    np.save(work / "rows.npy", rows)
    began = time.perf_counter()
    cm = scoring.compile(path, backend="tensor", device=device, strategy="compiled")
    first = cm.predict_raw(rows)
    compiled = time.perf_counter() - began
    store = cm.implementation.module.kernel.blocks.store
    codes = store.wait() if store else []
    built = time.perf_counter() - began - compiled
    if codes != [0]:
        return f"| {recipe.name} | {compiled:.1f} | builder exit {codes} | - | - | - |"
    args = [sys.executable, "-c", _SECOND, str(path), str(work / "rows.npy"), device,
            str(work / "second.npy")]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": _with_root()})  # fmt: skip
    if done.returncode != 0:
        crash = failure(RuntimeError(done.stderr[-300:]))
        return f"| {recipe.name} | {compiled:.1f} | {built:.1f} | {crash} | - | - |"
    second = json.loads(done.stdout.strip().splitlines()[-1])
    diff = float(np.abs(np.load(work / "second.npy") - first).max())
    return (f"| {recipe.name} | {compiled:.1f} | {built:.1f} | {second['seconds']:.1f} | "
            f"{'yes' if second['dynamo'] else 'no'} | {diff:.1e} |")  # fmt: skip


# -- contributions ------------------------------------------------------------------


def explain(out: Path, sizes: Sizes, device: str, dry: bool) -> None:
    report = Report(out, "explain", "Contributions (TreeSHAP) by batch size", device)
    report.add(
        f"Rows/s of contributions: ours on {device} (input already there, median of repeats",
        "timed with device events), and XGBoost's pred_contribs / LightGBM's pred_contrib on",
        "every CPU core. Build: seconds to make the path tables. Max diff: the largest",
        "difference between ours and native on the first 2,000 rows.",
        "",
        *_batch_header(["model", "variant", "build s", "max diff"], sizes.explain_batches),
    )
    for recipe in sizes.explain_recipes:
        model = _trained(recipe)
        X = _rows(recipe, max(sizes.explain_batches), distinct=100_000)
        native = scoring.compile(model, backend="native")
        start = time.perf_counter()
        ours = Contributions(native.forest, device=torch.device(device))
        ours(torch.from_numpy(X[:64]).to(device))
        build = time.perf_counter() - start
        sample = X[:2000]
        got = ours(torch.from_numpy(sample).to(device)).cpu().numpy()
        diff = float(np.abs(got - native.implementation.predict_contributions(sample)).max())
        x_dev = torch.from_numpy(X).to(device)
        cells = _explain_cells(ours, x_dev, sizes.explain_batches)
        report.add(f"| {recipe.name} | tensor | {build:.1f} | {diff:.1e} | {cells} |")
        host = _explain_cells(native.implementation.predict_contributions, X,
                              tuple(b for b in sizes.explain_batches if b <= 64_000))  # fmt: skip
        cores = f"native ({os.cpu_count()} cores)"
        report.add(f"| {recipe.name} | {cores} | - | - | {host} |")
        del x_dev
        if device == "cuda":
            torch.cuda.empty_cache()


def _explain_cells(fn: Callable[[Any], Any], X: Any, batches: tuple[int, ...]) -> str:
    cells = []
    for batch in batches:
        if time.monotonic() > DEADLINE:
            cells.append("-")
            continue
        try:
            cells.append(f"{batch / timed(lambda b=batch: fn(X[:b]), most=3):,.0f}")
        except (ScoringError, RuntimeError) as exc:
            cells.append(failure(exc))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return " | ".join(cells)


# -- driver -------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Path, Sizes, str, bool], None]] = {
    "walk": walk,
    "parity": parity,
    "throughput": throughput,
    "e2e": e2e,
    "oom": oom,
    "hypothesis": hypothesis,
    "packages": packages,
    "explain": explain,
    "job": job,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-results")))
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes; CPU without CUDA")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--variants", default="", help="throughput: only names containing this")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all sections")
    args = parser.parse_args(argv)
    global DEADLINE, VARIANTS
    DEADLINE = time.monotonic() + args.budget
    VARIANTS = args.variants
    warnings.filterwarnings("ignore")
    # No package builders beside the timings; the packages section turns them on.
    os.environ["SCORING_COMPILE_CACHE"] = "off"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.dry_run:
        parser.error("no CUDA device: pass --dry-run to run the suite with tiny sizes on CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = DRY if args.dry_run else FULL
    print(f"machine: {machine()}", flush=True)
    failed = []
    for section in args.sections.split(","):
        start = time.perf_counter()
        try:
            RUNNERS[section](args.out, sizes, device, args.dry_run)
        except Exception:  # one section's crash must not cost the others' results
            traceback.print_exc()
            failed.append(section)
        print(f"== {section}: {time.perf_counter() - start:.0f} s", flush=True)
    if failed:
        print(f"sections that crashed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``fused`` strategy on CUDA: one Triton kernel for every forest, the forest as data.

The same tables as the CPU walk (:mod:`.generic`, walk.cpp), built by the same layout
code: each tree's top levels a complete tree in heap order, then linked nodes below it
(breadth first, siblings side by side, a leaf a node every value leaves to the left
whose first child is itself).  A program takes ``block`` rows through every tree in
tree order and adds each leaf onto what ``out`` holds, at the accumulation dtype: one
rounding per addition and no multiplication (so no fused multiply-add can form), the
additions in walk.cpp's order, hence its sums bit for bit.  The node test is
``NodeTest``'s: ``x <= threshold`` at the input's precision, NaN (and, where flagged,
``|x| <=`` the zero threshold) to the default side, categorical bitsets.  The same
program writes each row's native leaf id per tree when asked, so ``predict_leaf`` needs
no second walk.  A batch too small to keep the device busy (:func:`tree_chunks`) splits
its trees over programs: each writes its trees' leaves, and a second launch adds their
values in tree order, the same additions.

Why a hand-written kernel rather than a generic ``torch.compile`` program: the kernel
is compiled once per machine and variant (input and accumulation dtype, categorical
splits, zero-as-missing, vector leaves, top depth, rows per program), never per model,
so a new model costs its tables only, where the per-model walk (``compiled``) took
25-76 s on an H100 with an empty cache; and ``torch.compile`` with the tables as inputs
sums trees out of order (not bit-identical).

Without a GPU the very kernel runs on CPU tensors under Triton's interpreter
(``TRITON_INTERPRET=1`` set before Python starts): ``strategy="triton"`` on CPU.  That is
how the tests hold it to walk.cpp, at 3-5 ms per program, tree and level, so only for
small forests.  :func:`build_for` compiles a variant for an sm_80 or sm_90 target on a
machine without a GPU, with the registers and stack bytes of the cubin Triton built.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._inputs import Columns
from .._ir import Forest
from ..errors import CompileError, DependencyError
from .kernels import ZERO_THRESHOLD
from .layout import linked_tables, top_tables

__all__ = [
    "TritonSchedule", "TritonWalk", "VisitCosts", "build_for", "checked_on_host",
    "interpreting", "kernel", "tree_chunks", "visit_costs",
]  # fmt: skip

#: Set while float64 rows were already narrowed where they could be, on the host.
_CHECKED_ON_HOST = contextvars.ContextVar("checked_on_host", default=False)


@contextlib.contextmanager
def checked_on_host() -> Iterator[None]:
    """Walks in this block take float64 rows as float64: the caller narrowed on the host
    every batch whose values are all float32 values, so the device is not asked again
    (that check reads a flag back, which would wait for the stream's queued work)."""
    token = _CHECKED_ON_HOST.set(True)
    try:
        yield
    finally:
        _CHECKED_ON_HOST.reset(token)


#: Deepest heap-ordered top: 2**8 positions per tree, unrolled in the program.
MAX_TOP = 8


def interpreting() -> bool:
    """Whether Triton runs kernels on CPU tensors: ``TRITON_INTERPRET``, which Triton reads
    when a kernel is defined, so it must be set before the first kernel is needed."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@cache
def kernel() -> Any:
    """The walk as a ``triton.jit`` function (Triton imported on first use)."""
    try:
        from . import triton_kernel
    except ImportError:
        raise DependencyError(
            "strategy 'fused' on CUDA needs Triton (shipped with CUDA builds of torch); "
            "install it (pip install triton) or use strategy='compiled'"
        ) from None
    return triton_kernel.walk


@dataclass(frozen=True)
class TritonSchedule:
    """How one forest is walked: heap-ordered top levels, rows per program, warps, and
    whether rows are read feature-major (one feature of a program's rows is contiguous,
    coalesced on a GPU) or as given."""

    top_depth: int
    block: int
    warps: int
    feature_major: bool

    def described(self) -> str:
        layout = "feature-major" if self.feature_major else "row-major"
        return (f"Triton: top {self.top_depth} levels heap-ordered, {self.block} rows per "
                f"program, {self.warps} warps, {layout} rows")  # fmt: skip

    def selection(self) -> dict[str, float]:
        return {"fused.top_depth": self.top_depth, "fused.block": self.block,
                "fused.warps": self.warps,
                "fused.feature_major": float(self.feature_major)}  # fmt: skip


#: The interpreter's cost grows with programs, not rows: one large program per call.
_INTERPRETED = TritonSchedule(top_depth=0, block=1024, warps=1, feature_major=False)


class TritonWalk:
    """Rows ``[B, F]`` -> ``start`` plus every tree's leaf, and leaf ids, on one device.

    The tables are walk.cpp's (:func:`.layout.linked_tables`), moved to the device once.
    Float64 rows whose values are all float32 values are walked as float32 against the
    float32 thresholds, as walk.cpp does: no branch changes.
    """

    def __init__(self, forest: Forest, *, acc: torch.dtype, device: torch.device,
                 schedule: TritonSchedule | None = None):  # fmt: skip
        if device.type == "cpu" and not interpreting():
            raise CompileError(
                "strategy 'triton' runs on CPU only under Triton's interpreter: start Python "
                "with TRITON_INTERPRET=1 set (slow: for checking the CUDA kernel), or use "
                "strategy='fused'"
            )
        self.walk = kernel()
        self.forest = forest
        self.device = device
        self.acc = acc
        np_acc = np.dtype(np.float64 if acc == torch.float64 else np.float32)
        self._linked = linked_tables(forest, np_acc)
        self._tables: dict[int, dict[str, torch.Tensor]] = {}
        self._zeros: dict[torch.dtype, torch.Tensor] = {}
        #: Seconds each schedule tried took (empty when one was given or none measured).
        self.timings: dict[TritonSchedule, float] = {}
        #: Programs that fill the device: a smaller batch splits its trees over programs.
        self.programs = _programs_filling(device)
        self._chunks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if schedule is None:
            schedule = _INTERPRETED if device.type == "cpu" else choose_schedule(self)
        self.schedule = schedule

    def tables(self, top_depth: int) -> dict[str, torch.Tensor]:
        """The device tables for a top of ``top_depth`` levels (built once each)."""
        if top_depth not in self._tables:
            linked = {**self._linked, "packed": _default_in_sign(self._linked["packed"])}
            top = top_tables(linked, top_depth)
            host = {**linked, **top, **_node_words(linked, top),
                    **_tree_ranges(self.forest, linked)}  # fmt: skip
            self._tables[top_depth] = {k: _on(v, self.device) for k, v in host.items()}
        return self._tables[top_depth]

    def sums(self, x: torch.Tensor | Columns, start: torch.Tensor) -> torch.Tensor:
        """``start [B, K]`` plus each row's leaves, added in tree order (acc dtype)."""
        out = start.to(self.device, self.acc).contiguous().clone()
        self.launch(self.schedule, self._input(x), out=out)
        return out

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        """The native predictor's leaf id per row and tree, ``[B, T]`` (int64)."""
        rows = self._input(x)
        leaves = torch.empty((rows.shape[0], self.forest.n_trees), dtype=torch.int32,
                             device=self.device)  # fmt: skip
        self.launch(self.schedule, rows, leaves=leaves)
        return leaves.long()

    def launch(self, schedule: TritonSchedule, rows: torch.Tensor, *,
               out: torch.Tensor | None = None, leaves: torch.Tensor | None = None,
               split: bool = True) -> None:  # fmt: skip
        """Sums onto ``out`` (one program per block of rows and output), or leaf ids into
        ``leaves``.  A batch of fewer blocks than fill the device splits its trees over
        programs (unless ``split`` is false): leaf ids in one launch; sums in two, each
        row's leaf per tree, then their values added in tree order (the same additions,
        so the same sums)."""
        n = rows.shape[0]
        if n == 0:
            return
        if schedule.feature_major != _feature_major(rows):  # the schedule's layout
            rows = rows.t().contiguous().t() if schedule.feature_major else rows.contiguous()
        programs = self.programs if split else 0
        chunks = tree_chunks(n, schedule.block, self.forest.n_trees, programs)
        if chunks == 1:
            return self._launch(schedule, rows, out=out, leaves=leaves)
        span = self._chunk_span(chunks)
        if leaves is not None:
            return self._launch(schedule, rows, leaves=leaves, span=span)
        nodes = torch.empty((n, self.forest.n_trees), dtype=torch.int32, device=self.device)
        self._launch(schedule, rows, leaves=nodes, span=span, nodes=True)
        self._launch(schedule, rows, out=out, leaves=nodes, from_nodes=True)

    def _launch(self, schedule: TritonSchedule, rows: torch.Tensor, *,
                out: torch.Tensor | None = None, leaves: torch.Tensor | None = None,
                span: tuple[torch.Tensor, torch.Tensor] | None = None, nodes: bool = False,
                from_nodes: bool = False) -> None:  # fmt: skip
        """One kernel launch: sums onto ``out`` (from the leaves in ``leaves`` with
        ``from_nodes``), else into ``leaves`` leaf ids (the walk's nodes with ``nodes``),
        the trees of ``span``'s ranges, one per program along axis 1 (default: all)."""
        n = rows.shape[0]
        t = self.tables(schedule.top_depth)
        x64 = rows.dtype == torch.float64
        stride_row, stride_feature = rows.stride()
        k = self.forest.n_outputs
        summing = out is not None
        if span is None:
            span = (t["tree_from"], t["tree_to"]) if summing else (t["all_from"], t["all_to"])
        variant = self.variant(schedule, leaves=not summing)
        # Along axis 1: each output's trees (vector leaves walked once: one program for
        # every output), or each range of trees for leaves.
        across = (1 if variant["OUTPUTS"] else k) if summing else int(span[0].shape[0])
        grid = (-(-n // schedule.block), across)
        self.walk[grid](
            rows, stride_row, stride_feature, n,
            out if summing else t["value"],  # neither is written to ...
            leaves if leaves is not None else t["child"],  # ... unless given
            self._zero(rows.dtype),
            t["top_packed"], t["top_thr64" if x64 else "top_thr32"], t["top_word"],
            t["top_node"], t["top_exit"], t["tree_levels"],
            t["link_word"], t["thr64" if x64 else "thr32"], t["value"].reshape(-1),
            t["native_id"], t["tree_order"], span[0], span[1],
            t["cat_row"], t["cat_unknown_left"], t["bits_left"], t["bits_known"],
            self.forest.n_trees, k, int(t["bits_left"].shape[1]),
            **variant, WORD=not x64,
            OFF32=(n - 1) * stride_row + (rows.shape[1] - 1) * stride_feature < OFF32_LIMIT,
            NODES=nodes, FROM_NODES=from_nodes, num_warps=schedule.warps, **_launch_options(),
        )  # fmt: skip

    def _chunk_span(self, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tree ranges ``[from, to)`` of ``chunks`` near-equal parts, on the device."""
        if chunks not in self._chunks:
            bounds = np.linspace(0, self.forest.n_trees, chunks + 1).round().astype(np.int32)
            self._chunks[chunks] = (_on(bounds[:-1], self.device), _on(bounds[1:], self.device))
        return self._chunks[chunks]

    def variant(self, schedule: TritonSchedule, *, leaves: bool = False) -> dict[str, int | bool]:
        """The kernel's constexprs for this forest under ``schedule``, but the rows'
        (``WORD``: float32 rows; ``OFF32``: every offset into them within 32 bits); what
        :func:`build_for` takes to build the same variant for another target."""
        return dict(TOP=schedule.top_depth, BLOCK=schedule.block,
                    ZERO=bool(self.forest.has_missing_zero),
                    CAT=bool(self.forest.has_categorical),
                    BEFORE_TRUNC=bool(self.forest.cat_check_before_trunc),
                    VECTOR=self._linked["value"].ndim == 2, LEAVES=leaves,
                    OUTPUTS=0 if leaves else walked_once(self._linked["value"]))  # fmt: skip

    def _zero(self, dtype: torch.dtype) -> torch.Tensor:
        """The zero threshold at the input's precision, on the device (made once: a copy
        from the host per launch would wait for the stream's earlier work)."""
        if dtype not in self._zeros:
            self._zeros[dtype] = torch.tensor([ZERO_THRESHOLD[dtype]], dtype=dtype,
                                              device=self.device)  # fmt: skip
        return self._zeros[dtype]

    def _input(self, x: torch.Tensor | Columns) -> torch.Tensor:
        """Rows on the device, float64 ones narrowed to float32 where no value changes.
        That check reads a flag back from the device; batches in flight are narrowed on
        the host before they are copied (``TensorBackend.submit``), so under
        :func:`checked_on_host` it is not made.
        Feature-major rows stay feature-major (the kernel reads either by its strides)."""
        if isinstance(x, Columns):
            cols = x.narrowed()
            block = np.empty(cols.shape[::-1], dtype=cols.dtype)
            cols.into(block)
            x = torch.from_numpy(block).t()
        rows = x.detach().to(self.device)
        if rows.dtype != torch.float32:
            rows = rows.to(torch.float64)
            if not _CHECKED_ON_HOST.get():
                as32 = rows.float()
                if bool(((as32.double() == rows) | torch.isnan(rows)).all()):
                    rows = as32
        return rows if _feature_major(rows) else rows.contiguous()


#: Programs per multiprocessor that fill a GPU: a smaller batch splits its trees.
PROGRAMS_PER_SM = 4
#: Fewest trees a program of a split batch walks.
TREES_PER_PROGRAM = 4
#: Most leaves (rows x trees) a split batch writes between its two launches (64 MiB).
MAX_SPLIT_LEAVES = 1 << 24


def _programs_filling(device: torch.device) -> int:
    """Programs that keep every multiprocessor of a CUDA device busy; 0 elsewhere (the
    interpreter runs one program at a time: nothing to fill)."""
    if device.type != "cuda":
        return 0
    return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def tree_chunks(n_rows: int, block: int, n_trees: int, programs: int) -> int:
    """Parts to split the trees into, so that blocks of rows times parts reach
    ``programs``; 1 when the rows alone fill half of them (a second launch would cost
    more than it gains), or their leaves would not fit :data:`MAX_SPLIT_LEAVES`."""
    blocks = -(-n_rows // block)
    if 2 * blocks > programs or n_rows * n_trees > MAX_SPLIT_LEAVES:
        return 1
    return max(1, min(-(-programs // blocks), n_trees // TREES_PER_PROGRAM))


#: Vector leaves of at most this many outputs are walked once, all sums side by side.
MAX_OUTPUTS_AT_ONCE = 8


def walked_once(value: np.ndarray) -> int:
    """The accumulator's width for leaves of ``value``'s shape walked once (a power of
    two), or 0: scalar leaves, or so many outputs that one program per output keeps its
    registers."""
    if value.ndim != 2 or value.shape[1] > MAX_OUTPUTS_AT_ONCE:
        return 0
    return 1 << max(1, (value.shape[1] - 1).bit_length())


def _default_in_sign(packed: np.ndarray) -> np.ndarray:
    """walk.cpp's node words with the default-left bit (28) copied to the sign bit: the
    kernel tests it as ``p < 0``, one instruction where a bit test takes two."""
    words = packed.astype(np.int32)
    return words | np.where((words >> 28) & 1 != 0, np.int32(np.iinfo(np.int32).min), 0)


def _node_words(linked: dict[str, np.ndarray], top: dict[str, np.ndarray]
                ) -> dict[str, np.ndarray]:  # fmt: skip
    """Each node in one 8-byte word, low half its packed test: beside a top node's
    float32 threshold's bits (``top_word``) and a linked node's first child
    (``link_word``)."""
    return {"top_word": _halves(top["top_thr32"].view(np.uint32), top["top_packed"]),
            "link_word": _halves(linked["child"], linked["packed"])}  # fmt: skip


def _halves(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """int64 words of two 32-bit halves (read back by the kernel's shift and truncation)."""

    def bits(a: np.ndarray) -> np.ndarray:
        return a.astype(np.uint32).astype(np.uint64)

    return np.ascontiguousarray(((bits(high) << np.uint64(32)) | bits(low)).view(np.int64))


def _feature_major(rows: torch.Tensor) -> bool:
    """Whether one feature of consecutive rows is contiguous (``[F, B]`` memory, viewed
    as ``[B, F]``)."""
    return rows.shape[0] > 1 and rows.stride(0) == 1


def _on(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A table on the device; uint32 bitset words as int32 (the kernel shifts and masks
    one bit, so the sign is never read)."""
    if array.dtype == np.uint32:
        array = array.view(np.int32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


#: Past this many elements, offsets into a batch's rows are computed in 64 bits.
OFF32_LIMIT = 2**31

#: A ceiling for ptxas's register allocator.  Without one, ptxas 13 (Triton 3.9) put
#: some variants at 32-48 registers with 16-32 bytes spilled to the stack; with it, the
#: same variants take 48 registers and spill nothing (benchmarks/results/triton_registers.md).
MAX_REGISTERS = 128


def _launch_options(*, compiling: bool = False) -> dict[str, Any]:
    """No contraction of a multiply and an add into one rounding (Triton 3.9 still fuses
    by default), and :data:`MAX_REGISTERS`; the interpreter takes no compiler options."""
    if interpreting() and not compiling:
        return {}
    return {"enable_fp_fusion": False, "maxnreg": MAX_REGISTERS}


def _tree_ranges(forest: Forest, linked: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Which trees add to each output, as ranges of one order of the trees: scalar leaves
    of several outputs sorted by output, stably (so each output's trees stay in tree
    order, the order walk.cpp adds them in); otherwise every tree for every output."""
    n_trees, k = forest.n_trees, forest.n_outputs
    if "group" in linked:
        group = linked["group"].astype(np.int64)
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(k + 1))
        begin, end = bounds[:-1], bounds[1:]
    else:
        order = np.arange(n_trees)
        begin, end = np.zeros(k, np.int64), np.full(k, n_trees)
    return {"tree_order": order.astype(np.int32), "tree_from": begin.astype(np.int32),
            "tree_to": end.astype(np.int32), "all_from": np.zeros(1, np.int32),
            "all_to": np.full(1, n_trees, np.int32)}  # fmt: skip


# -- the schedule: measured on the device ----------------------------------------------------

#: Probe rows per timing: enough rows to fill an H100's programs at the largest block.
_PROBE_ROWS = 1 << 16
#: At most this long measuring, start to end (first launches compile each variant).
_BUDGET_S = 0.5


def candidates(forest: Forest) -> list[TritonSchedule]:
    """Schedules worth timing, most promising first: the top as deep as the forest (or
    :data:`MAX_TOP`), then shallower; 128 or 256 rows per program with 4 warps; rows as
    given or feature-major."""
    depth = min(max(forest.max_depth, 0), MAX_TOP)
    tops = sorted({depth, min(depth, 6), min(depth, 4)}, reverse=True)
    return [TritonSchedule(top, block, 4, major)
            for major in (True, False) for top in tops for block in (128, 256)]  # fmt: skip


def choose_schedule(walk: TritonWalk, *, timer: Callable[[Callable[[], None]], float] | None = None,
                    budget_s: float = _BUDGET_S) -> TritonSchedule:  # fmt: skip
    """The fastest candidate on probe rows by device time, within ``budget_s``: each
    launched once to compile and warm, then timed; candidates left when the budget is
    spent are not tried."""
    from .._parity import probe_rows  # the parity module imports the compiler

    time_it = timer or _device_seconds
    forest = walk.forest
    probes = probe_rows(forest, n_rows=_PROBE_ROWS, special=False)
    dtype = np.float32 if forest.input_dtype == "float32" else np.float64
    rows = walk._input(torch.from_numpy(probes.astype(dtype)))  # the path such rows take
    out = torch.zeros((rows.shape[0], forest.n_outputs), dtype=walk.acc, device=walk.device)
    begin = time.perf_counter()
    for schedule in candidates(forest):
        if walk.timings and time.perf_counter() - begin > budget_s:
            break

        def run(schedule: TritonSchedule = schedule) -> None:
            walk.launch(schedule, rows, out=out, split=False)  # rows of a large batch

        run()  # compiles the variant the first time
        walk.timings[schedule] = time_it(run)
    return min(walk.timings, key=walk.timings.__getitem__)


def _device_seconds(run: Callable[[], None]) -> float:
    """Seconds ``run`` takes on the current CUDA stream, by a pair of events."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    run()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


# -- building for a GPU without one --------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """One variant built for one target: its PTX, the machine code (SASS) of the cubin
    Triton built from it, and that cubin's registers and stack bytes (spills: the walk
    keeps no arrays)."""

    target: str
    registers: int
    spills: int
    ptx: str
    sass: str


#: The kernel's integer arguments: Triton's JIT passes one equal to 1 as a constant.
INTEGER_ARGUMENTS = ("stride_row", "stride_feature", "n_rows", "n_trees", "n_outputs", "words")


def variant_signature(*, x: str, acc: str, off32: bool = True) -> dict[str, str]:
    """The kernel's argument types for inputs of dtype ``x`` (``fp32``/``fp64``) and
    sums at ``acc``: what :func:`build_for` compiles without tensors to launch on.  The
    strides are int32 where offsets fit 32 bits, as the JIT passes them there."""
    ptr = {"fp32": "*fp32", "fp64": "*fp64"}
    stride = "i32" if off32 else "i64"
    return {
        "x": ptr[x], "stride_row": stride, "stride_feature": stride, "n_rows": "i32",
        "out": ptr[acc], "leaf_out": "*i32", "zero_ptr": ptr[x],
        "top_packed": "*i32", "top_threshold": ptr[x], "top_word": "*i64", "top_node": "*i32",
        "top_exit": "*i32", "tree_levels": "*i32", "link_word": "*i64", "threshold": ptr[x],
        "value": ptr[acc], "native_id": "*i32", "tree_order": "*i32", "tree_from": "*i32",
        "tree_to": "*i32", "cat_row": "*i32",
        "cat_unknown_left": "*u8", "bits_left": "*i32", "bits_known": "*i32",
        "n_trees": "i32", "n_outputs": "i32", "words": "i32",
    }  # fmt: skip


def build_for(capability: int, *, x: str = "fp32", acc: str = "fp32", warps: int = 4,
              ones: tuple[str, ...] = (), **constexprs: int | bool) -> Build:  # fmt: skip
    """Compile one variant for ``sm_<capability>`` (80, 90) on any machine, with the
    launch options :class:`TritonWalk` uses, and read the cubin's registers and stack.
    Under Triton's interpreter, in a Python process of its own started without it: the
    interpreter's kernels are not compiled."""
    if interpreting():
        return _built_apart(capability, x=x, acc=acc, warps=warps, ones=ones, **constexprs)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # As a launch sets them for float32 rows within 32-bit offsets; vector leaves walked
    # once for two outputs (a binary random forest).
    vector = bool(constexprs.get("VECTOR")) and not constexprs.get("LEAVES")
    constexprs = {"WORD": x == "fp32", "OFF32": True, "OUTPUTS": 2 if vector else 0,
                  "NODES": False, "FROM_NODES": False, **constexprs}  # fmt: skip
    # ``ones``: integer arguments equal to 1, which the JIT compiles in as constants.
    constexprs = {**constexprs, **dict.fromkeys(ones, 1)}
    signature = {**variant_signature(x=x, acc=acc, off32=bool(constexprs["OFF32"])),
                 **dict.fromkeys(constexprs, "constexpr")}  # fmt: skip
    source = ASTSource(fn=kernel(), signature=signature, constexprs=dict(constexprs))
    options = {"num_warps": warps, **_launch_options(compiling=True)}
    compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
    usage, sass = _cuobjdump(compiled.asm["cubin"], "--dump-resource-usage", "--dump-sass")
    registers, stack = _resources(usage)
    return Build(f"sm_{capability}", registers, stack, compiled.asm["ptx"], sass)


def _built_apart(capability: int, **options: Any) -> Build:
    """:func:`build_for` in a child process without ``TRITON_INTERPRET``, which finds
    this package where this process found it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    code = ("import dataclasses, json, sys; from scoring._compiler.triton_walk import build_for; "
            "a = json.loads(sys.argv[1]); a['ones'] = tuple(a['ones']); "
            "print(json.dumps(dataclasses.asdict(build_for(int(sys.argv[2]), **a))))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, json.dumps(options), str(capability)],
                          capture_output=True, text=True, env=env)  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CompileError(f"building the walk for sm_{capability} failed: {last}")
    return Build(**json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class VisitCosts:
    """What a variant's SASS costs per node visit: instructions and global loads of one
    level of the unrolled top and of one turn of the linked loop (its remainder loop:
    ptxas also unrolls it by four), and registers per thread.  A tree's own few
    instructions (its exit, its leaf, the loop) are not in them."""

    top_instructions: float
    top_loads: float
    linked_instructions: int
    linked_loads: int
    registers: int

    def per_row(self, levels: list[tuple[int, int]]) -> float:
        """Instructions of the node visits of one row over trees of (top levels, linked
        levels)."""
        return sum(top * self.top_instructions + linked * self.linked_instructions
                   for top, linked in levels)  # fmt: skip


def visit_costs(capability: int, **variant: Any) -> VisitCosts:
    """:class:`VisitCosts` of ``variant`` (``build_for``'s arguments) for ``sm_<capability>``:
    the top's level as the difference between a top of ``TOP`` and one of ``TOP - 4``
    levels over four, the linked loop as the innermost loop that loads."""
    top = int(variant.get("TOP", MAX_TOP))
    if top < 4:
        raise ValueError("visit costs need a top of at least 4 levels")
    low, high = (build_for(capability, **{**variant, "TOP": t}) for t in (top - 4, top))
    (low_n, low_loads), (high_n, high_loads) = (_counted(_sass_ops(b.sass)) for b in (low, high))
    loops = sorted(_loops(_sass_ops(high.sass)), key=len)
    linked = next(loop for loop in loops if _counted(loop)[1])
    return VisitCosts((high_n - low_n) / 4, (high_loads - low_loads) / 4, len(linked),
                      _counted(linked)[1], high.registers)  # fmt: skip


_SASS_OP = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def _sass_ops(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of each instruction in cuobjdump's listing."""
    return [(int(a, 16), op, rest) for a, op, rest in _SASS_OP.findall(sass)]


def _counted(ops: list[tuple[int, str, str]]) -> tuple[int, int]:
    """Instructions, and global loads among them."""
    return len(ops), sum(op.startswith("LDG") for _, op, _ in ops)


def _loops(ops: list[tuple[int, str, str]]) -> list[list[tuple[int, str, str]]]:
    """The instructions of each loop: from a backward branch's target to the branch."""
    found = []
    for address, op, rest in ops:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < address:
            begin = int(target.group(1), 16)
            found.append([o for o in ops if begin <= o[0] <= address])
    return found


def _cuobjdump(cubin: bytes, *reports: str) -> list[str]:
    """cuobjdump's ``reports`` of ``cubin``, one run each."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "walk.cubin"
        path.write_bytes(cubin)
        return [subprocess.run([_tool("cuobjdump"), report, str(path)], capture_output=True,
                               text=True).stdout for report in reports]  # fmt: skip


def _resources(usage: str) -> tuple[int, int]:
    """Registers and stack bytes of the one kernel in a resource-usage report."""
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    if found is None:
        raise CompileError(f"cuobjdump reported no resource usage: {usage.strip()[:200]}")
    return int(found.group(1)), int(found.group(2))


def _tool(name: str) -> str:
    """A CUDA tool Triton ships (its NVIDIA backend's ``bin``)."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise DependencyError(f"no {name}: Triton's CUDA backend is not installed")
    return found

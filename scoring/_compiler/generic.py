"""The ``fused`` strategy on CPU: one walk compiled once per machine, the forest as data.

The compiled walk (:mod:`.fused`, strategy ``compiled``) generates and compiles code per
model: 7-17 s on the quiet 2-core machine for XGBoost 500x8, a minute when it is busy,
paid again by every new model version, worker and torch upgrade.  Here the forest's
tables are arguments of one C++ kernel (``walk.cpp``) that every model shares, so a new
model costs building its tables and measuring a schedule: well under a second.

Why a C++ kernel through ``ctypes`` rather than a generic ``torch.compile`` program:
measured on the 2-core machine (XGBoost 500x8, 100k rows, in alternation), the walk
written scalar in C++ scored 173k rows/s and with AVX2 vectors of eight rows 297k,
against the per-model compiled walk's 195k; inductor's generated loops gather one row
at a time and cannot test a whole level of the top of every tree at once.  It needs
only the system's C++ compiler, which ``torch.compile`` on CPU needs too; the library
is plain C ABI (no torch headers: it builds in about 7 s), and ``ctypes`` lets go of the
GIL while it runs, so row chunks are spread over threads from Python (sized per forest,
:func:`_chunk_rows`, and taken in turn: a busy core slows its own chunks only, where
an OpenMP team waits for its slowest thread at every barrier).

What the measurements kept, and left (same machine, one run each, in alternation):

* levels outermost over a block's vectors, rather than each vector down its tree:
  XGBoost 500x8 250k -> 340k rows/s (the vectors' gathers overlap);
* siblings side by side, the next node the first child plus the test: LightGBM
  500x256 83k -> 110k; below the top, a vector stops once its rows all sit on leaves;
* compact node words (feature, flags and the first child's offset in one int32, where
  they fit): one gather less per level, LightGBM 138k -> 155k; the vector kept or
  dropped without a branch: 155k -> 168k;
* not kept: a node's word and threshold in one 64-bit gather (Zen 3: 138k -> 121k), and
  compacting the rows still walking into full vectors after each level (155k -> 139k,
  though a vector of eight rows walks 7.8 levels below the top where a row walks 3.1).

Later, on an AVX-512 host (Zen 4, one core, 20k rows, in alternation in one process):

* a top level's node words and thresholds looked up in registers by permutes instead
  of gathered (levels 3 to 9): XGBoost 500x8 230k -> 442k, the forest 199k -> 345k,
  LightGBM 500x256 (a top of 6) 112k -> 128k, 147k at the top of 8 it now takes;
* below the top, row by row (each row walks its own path's length, not its vector's
  longest), chosen per model: LightGBM 108k -> 117k;
* rows of many features transposed eight by eight in registers into the block, where
  the forest reads most of them: 2,000 features, 100 trees, 41 -> 33 ms;
* not kept: reading row-major rows in place, without the block (2,000 features:
  41 -> 88 ms; the node-by-node levels become gathers from rows 8 KB apart).

Later still, on an Intel Xeon with AVX-512 (one core, 20k rows, in alternation, every
variant bit for bit the one before):

* below the top, the rows still walking packed into vectors after each level by
  AVX-512VL's compress (the packing Zen 3 paid for in blends, above), and the rows the
  top left on a leaf never entering: LightGBM 113k -> 165k;
* the top levels sixteen rows per vector, the tests as masks (AVX-512F): XGBoost
  347k -> 603k, the forest 285k -> 440k, LightGBM 167k -> 210k, and 271k with the
  packed walk below sixteen rows per vector too;
* the leaves added sixteen rows per vector (eight doubles): XGBoost 598k -> 660k; a
  forest's two class fractions added as one pair per row: 449k -> 535k;
* a call of a few rows walks each row through eight trees at once (lanes over trees,
  up to a call size measured per model): one row of XGBoost 500x8, 68 -> 15 us;
* not kept: the eight-row top's lookups from 512-bit registers (one permute among 32
  entries): no faster, the gathers of the rows' values bound those levels.

The library is built once per machine (:mod:`.walk_library`); the forest's tables are
laid out by :mod:`.layout`.

How a forest is laid out and walked is chosen per model by measurement
(:func:`choose_schedule`): how many top levels are a heap-ordered complete tree, eight
or sixteen rows per vector there and how many of those levels are tested node by node,
rows per block, how the rows go on below the top, and up to how many rows a call goes
by trees; the scalar path where the vector one does not apply (categorical splits,
float64 values).
The choice is recorded in :attr:`CompiledModel.selection` and the strategy's reason,
which a job's report carries.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import torch

from .._inputs import Columns
from .._ir import Forest
from ..errors import CompileError
from .kernels import ZERO_THRESHOLD
from .layout import linked_tables, top_tables
from .walk_library import Tables, kernel_library

__all__ = ["CHUNK_ROWS", "GenericWalk", "Schedule", "choose_schedule", "narrowed"]

#: Rows per kernel call where a forest's cost per row was not measured (a schedule
#: given): enough to amortise the call, few enough that two threads share a batch
#: evenly when one core is busy.
CHUNK_ROWS = 2048
#: Otherwise a chunk is the rows one core walks in about this long: a handoff to a
#: helper thread costs tens of microseconds, so a call is spread over threads only
#: where each gets that much work (a 1-tree forest walks 100k rows in less), and a big
#: forest's calls of a few thousand rows still use every core.
_CHUNK_SECONDS = 5e-4
_CHUNK_MIN, _CHUNK_MAX = 256, 1 << 16
#: Deepest heap-ordered top: 2**10 positions per tree.
_MAX_TOP = 10

# -- tables --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """How one forest is walked (see walk.cpp): heap-ordered top levels, how many of
    them are tested node by node, rows per block, the AVX2 path or the scalar one, and
    on the AVX2 path whether the levels below the top go by vectors or row by row."""

    top_depth: int
    uniform: int
    block: int
    vector: bool
    below_rows: bool = False
    #: Below the top by rows, the rows still walking packed into vectors after each level
    #: (where the kernel was built with AVX-512VL; elsewhere row by row).
    packed: bool = False
    #: On the AVX2 path, a call of at most this many rows walks each row through eight
    #: trees at once (lanes over trees, not over rows).
    few: int = 0
    #: On the AVX2 path, the top levels sixteen rows per vector (AVX-512 builds; eight
    #: elsewhere).
    wide: bool = False

    def described(self) -> str:
        lanes = "AVX-512, the top 16 rows per vector" if self.wide else "AVX2"
        path = f"{lanes}, {self.uniform} levels node by node" if self.vector else "scalar"
        if self.below_rows:
            path += ", below the top by rows packed in vectors" if self.packed else (
                ", below the top row by row")  # fmt: skip
        path += f", calls of up to {self.few} rows by trees" if self.vector and self.few else ""
        return f"top {self.top_depth} levels heap-ordered, {self.block}-row blocks, {path}"

    def selection(self) -> dict[str, float]:
        """The schedule as numbers, for :attr:`CompiledModel.selection`."""
        return {"fused.top_depth": self.top_depth, "fused.uniform": self.uniform,
                "fused.block": self.block, "fused.vector": float(self.vector),
                "fused.below_rows": float(self.below_rows), "fused.packed": float(self.packed),
                "fused.few": self.few, "fused.wide": float(self.wide)}  # fmt: skip


class _WalkTables:
    """A forest's tables for walk.cpp with a top of ``top_depth`` levels; the arrays
    live as long as this object, the structs point into them: one for float32 inputs,
    one for float64 (calls side by side may each take either, so neither is changed)."""

    def __init__(self, forest: Forest, linked: dict[str, np.ndarray], top_depth: int):
        self.arrays = {**linked, **top_tables(linked, top_depth)}
        self.top_depth = top_depth
        self.structs = {x64: self._struct(forest, x64) for x64 in (False, True)}

    def _struct(self, forest: Forest, x64: bool) -> Tables:
        a = self.arrays
        precision = "64" if x64 else "32"
        struct = Tables(
            n_trees=forest.n_trees, n_features=forest.n_features, n_outputs=forest.n_outputs,
            top_depth=self.top_depth, vector_leaves=int(a["value"].ndim == 2),
            words=int(a["bits_left"].shape[1]),
            cat_check_before_trunc=int(forest.cat_check_before_trunc),
            threshold=a["thr" + precision].ctypes.data,
            top_threshold=a["top_thr" + precision].ctypes.data,
            zero=ZERO_THRESHOLD[torch.float64 if x64 else torch.float32],
            n_used=int(a["used"].size), width=a["child"].size // max(forest.n_trees, 1),
        )  # fmt: skip
        for field, name in _POINTERS.items():
            setattr(struct, field, a[name].ctypes.data if name in a else None)
        return struct


#: Struct field -> array name.
_POINTERS = {
    "top_packed": "top_packed", "top_node": "top_node", "top_exit": "top_exit",
    "tree_levels": "tree_levels", "compact": "compact", "packed": "packed", "child": "child",
    "value": "value",
    "group": "group", "cat_row": "cat_row", "cat_unknown_left": "cat_unknown_left",
    "bits_left": "bits_left", "bits_known": "bits_known", "used": "used",
}  # fmt: skip


# -- scoring -------------------------------------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: Per calling thread: the walk's thread count while torch's own arithmetic runs on the
#: calling thread alone (:func:`torch_on_caller`); unset, torch's count.
_caller = threading.local()


@contextlib.contextmanager
def torch_on_caller() -> Iterator[None]:
    """Torch's elementwise work around the walk (snapping, start, link, averaging) on the
    calling thread alone, the walk still spread over the caller's torch threads.

    Torch runs an op over more than 32,768 elements on its OpenMP team, whose threads then
    spin for milliseconds waiting for more: on the cores the walk's own threads need.  One
    link over 50,000 rows cost the next walk (100 trees) 2.6 ms of 11 on two cores, where
    the link itself takes 0.02 ms on one thread."""
    threads = torch.get_num_threads()
    if threads == 1 or getattr(_caller, "threads", None):
        yield  # already on one thread, or inside such a call
        return
    _caller.threads = threads
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        _caller.threads = None


def _walk_threads() -> int:
    return getattr(_caller, "threads", None) or torch.get_num_threads()


def _spread(work: Callable[[int], None], items: range, workers: int) -> None:
    """``work(item)`` for every item on ``workers`` threads (the caller's one of them),
    each taking the next item when done with its last: a thread on a busy core takes
    fewer, where a fixed split would wait for it."""
    if workers <= 1:
        for item in items:
            work(item)
        return
    pending = iter(items)
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                item = next(pending, None)
            if item is None:
                return
            work(item)

    helpers = [_helpers(workers - 1).submit(drain) for _ in range(workers - 1)]
    drain()
    for helper in helpers:
        helper.result()  # raises a helper's error


def _helpers(count: int) -> ThreadPoolExecutor:
    """A process-wide pool with at least ``count`` threads (grown, never shrunk)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < count:
            _pool = ThreadPoolExecutor(count, thread_name_prefix="scoring-walk")
        return _pool


class GenericWalk:
    """Rows ``[B, F]`` (a tensor, or :class:`~scoring._inputs.Columns` read where they
    are) -> ``start`` plus every tree's leaf, through walk.cpp.

    Float64 rows whose values are all float32 values (a float32 column read at double
    precision) are walked as float32 against float32 thresholds: for a float32 ``x``,
    ``x <= t`` exactly when ``x <= largest_float32_at_most(t)``, so no branch changes,
    and the vector path applies.
    """

    def __init__(self, forest: Forest, *, acc: torch.dtype, schedule: Schedule | None = None):
        self.lib = kernel_library()
        self.acc = acc
        self.zero = int(forest.has_missing_zero)
        self.cat = int(forest.has_categorical)
        self.vector_lanes = int(self.lib.walk_vector_lanes())
        self.packs = bool(self.lib.walk_packs())
        self.wide_lanes = int(self.lib.walk_wide_lanes())
        np_acc = np.float64 if acc == torch.float64 else np.float32
        self._linked = linked_tables(forest, np.dtype(np_acc))
        self._forest = forest
        #: Seconds each schedule tried took on the probe rows (empty when one was given).
        self.timings: dict[Schedule, float] = {}
        #: Tables the schedule's measurement built, by top depth: the chosen one is kept.
        self._measured: dict[int, _WalkTables] = {}
        #: Rows per call on a thread (see :data:`_CHUNK_SECONDS`), once measured.
        self.chunk_rows = CHUNK_ROWS
        self.schedule = schedule or choose_schedule(self)
        top = self.schedule.top_depth
        self.tables = self._measured.get(top) or self.tables_for(top)
        self._measured.clear()
        # timed on the probe rows in blocks: the schedule before its few-row size
        self.chunk_rows = _chunk_rows(self.timings.get(replace(self.schedule, few=0)))

    def tables_for(self, top_depth: int) -> _WalkTables:
        return _WalkTables(self._forest, self._linked, top_depth)

    def sums(self, x: torch.Tensor | Columns, start: torch.Tensor) -> torch.Tensor:
        """``start [B, K]`` plus each row's leaves, added in tree order (acc dtype)."""
        rows, x64 = self._input(x)
        out = np.array(start.detach().to("cpu", self.acc).numpy(), copy=True, order="C")
        self.run(self.tables, self.schedule, rows, x64, out, threads=True)
        return torch.from_numpy(out)

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        """The native predictor's leaf id per row and tree, ``[B, T]`` (int64), from the
        same walk (its scalar path) over rows as :meth:`sums` reads them."""
        rows, x64 = self._input(x)
        assert isinstance(rows, np.ndarray)  # a tensor's rows
        ids = np.empty((len(rows), self._forest.n_trees), dtype=np.int32)
        native_id = self._linked["native_id"]
        if len(rows):
            self.lib.walk_leaf_ids(ctypes.byref(self.tables.structs[x64]), int(x64), self.zero,
                                   self.cat, rows.ctypes.data, len(rows),
                                   native_id.ctypes.data, ids.ctypes.data)  # fmt: skip
        return torch.from_numpy(ids).long()

    def run(self, tables: _WalkTables, schedule: Schedule, rows: np.ndarray | Columns,
            x64: bool, out: np.ndarray, *, threads: bool) -> None:  # fmt: skip
        """Every tree's leaf added to ``out``: one call, or with ``threads`` calls of
        :attr:`chunk_rows` rows each taken in turn by the caller's torch threads (as many
        as it had on entering :func:`torch_on_caller`)."""
        struct = ctypes.byref(tables.structs[x64])
        args = (int(x64), int(self.acc == torch.float64), self.zero, self.cat)
        options = (schedule.block, schedule.uniform, int(schedule.vector),
                   2 if schedule.packed else int(schedule.below_rows), schedule.few,
                   int(schedule.wide))  # fmt: skip
        if isinstance(rows, Columns):
            pointers = (ctypes.c_void_p * rows.shape[1])(*(a.ctypes.data for a in rows.arrays))

            def call(first: int, count: int, out_at: int) -> int:
                return int(self.lib.walk_score_columns(struct, *args, pointers, first, count,
                                                       out_at, *options))  # fmt: skip
        else:
            row_bytes = rows.shape[1] * rows.itemsize

            def call(first: int, count: int, out_at: int) -> int:
                x_at = rows.ctypes.data + first * row_bytes
                return int(self.lib.walk_score(struct, *args, x_at, count, out_at, *options))

        n = len(rows)
        chunks = -(-n // self.chunk_rows)
        workers = min(_walk_threads(), chunks) if threads and chunks > 1 else 1
        step = self.chunk_rows if workers > 1 else max(n, 1)  # chunks only to share the rows

        def chunk(first: int) -> None:
            out_at = out.ctypes.data + first * out.shape[1] * out.itemsize
            if call(first, min(step, n - first), out_at) != 0:
                raise CompileError(f"strategy 'fused': the kernel refused {schedule}")

        if workers == 1:  # one call (a one-row call would spend more on spreading it)
            chunk(0)
        else:
            _spread(chunk, range(0, n, step), workers)

    @staticmethod
    def _input(x: torch.Tensor | Columns) -> tuple[np.ndarray | Columns, bool]:
        """The rows as walk.cpp reads them, and whether they are doubles."""
        if isinstance(x, Columns):
            cols = x.narrowed()
            return cols, cols.dtype == np.float64
        rows = narrowed(np.ascontiguousarray(x.detach().cpu().numpy()))
        if rows.dtype == np.float32:
            return rows, False
        return rows.astype(np.float64, copy=False), True


def _chunk_rows(probe_seconds: float | None) -> int:
    """Rows a core walks in :data:`_CHUNK_SECONDS`, from the schedule's timing of
    :data:`_PROBE_ROWS` rows on one thread; a multiple of 256 (a whole number of blocks)."""
    if not probe_seconds:
        return CHUNK_ROWS
    rows = _CHUNK_SECONDS / (probe_seconds / _PROBE_ROWS)
    return int(min(_CHUNK_MAX, max(_CHUNK_MIN, -(-int(rows) // 256) * 256)))


def narrowed(rows: np.ndarray) -> np.ndarray:
    """Float64 rows as float32 where every value is a float32 value (a float32 column
    read as double): for a float32 ``x``, ``x <= t`` exactly when ``x <=
    largest_float32_at_most(t)``, so the walks read them against float32 thresholds
    with no branch changed.  Other rows as they are."""
    if rows.dtype != np.float64:
        return rows
    as32 = rows.astype(np.float32)
    return as32 if np.array_equal(as32, rows, equal_nan=True) else rows


#: Probe rows per timing: enough to time a 500-tree forest, few enough that the whole
#: choice stays well under a second for LightGBM 500x256 on one core.
_PROBE_ROWS = 512


def choose_schedule(walk: GenericWalk) -> Schedule:
    """The fastest of a few schedules on probe rows, on one thread, greedily: the top's
    depth, its rows per vector and its node-by-node levels at 128-row blocks, then the
    block size, then (on the vector path, where trees go deeper than the top) the levels
    below it by rows or by rows packed in vectors, then the few-row call size."""
    from .._parity import probe_rows  # the parity module imports the compiler

    forest = walk._forest
    rows = probe_rows(forest, n_rows=_PROBE_ROWS, special=False).astype(np.float32)
    out = np.zeros((_PROBE_ROWS, forest.n_outputs), np.float64 if walk.acc == torch.float64
                   else np.float32)  # fmt: skip
    depth = max(forest.max_depth, 1)
    tops = [depth] if depth <= _MAX_TOP - 2 else [6, 8, _MAX_TOP]
    vector = walk.vector_lanes > 0 and not walk.cat
    if not vector:  # the scalar path has no node-by-node levels
        candidates = [Schedule(top, 0, 128, False) for top in tops]
    else:  # 16 rows per vector test fewer levels node by node (a gather serves 16)
        widths = [False, True] if walk.wide_lanes else [False]
        candidates = [
            Schedule(top, u, 128, True, wide=wide)
            for top in tops
            for wide in widths
            for u in sorted({min(u, top) for u in ((1, 2, 3) if wide else (3, 4, 5))})
        ]
    best = _fastest(walk, candidates, rows, out)
    best = _fastest(walk, [best, *(replace(best, block=b) for b in (64, 256))], rows, out)
    if vector and forest.max_depth > best.top_depth:  # below the top: vectors or rows
        below = [replace(best, below_rows=True)]
        below += [replace(best, below_rows=True, packed=True)] if walk.packs else []
        best = _fastest(walk, [best, *below], rows, out)
    return replace(best, few=_few_rows(walk, best, rows, out)) if vector else best


#: Call sizes tried by trees (lanes over trees) against blocks, in turn while trees win.
_FEW_SIZES = (4, 8, 16, 32, 64, 128)


def _few_rows(walk: GenericWalk, schedule: Schedule, rows: np.ndarray, out: np.ndarray) -> int:
    """The largest call size up to which rows walked eight trees at once beat blocks of
    rows (a block's top levels cost as much for one row as for 256); 1 at least, where
    trees always win (a call of one row leaves seven of a block's eight lanes empty)."""
    table = walk._measured[schedule.top_depth]
    by_trees = replace(schedule, few=_FEW_SIZES[-1])
    few = 1
    for size in _FEW_SIZES:
        seconds = {}
        for candidate in (schedule, by_trees):
            walk.run(table, candidate, rows[:size], False, out[:size], threads=False)  # warm
            seconds[candidate] = min(_timed(walk, table, candidate, rows[:size], out[:size])
                                     for _ in range(3))  # fmt: skip
        if seconds[by_trees] >= seconds[schedule]:
            break
        few = size
    return few


def _timed(walk: GenericWalk, table: _WalkTables, schedule: Schedule, rows: np.ndarray,
           out: np.ndarray) -> float:  # fmt: skip
    """Seconds of four calls over ``rows`` on one thread."""
    begin = time.perf_counter()
    for _ in range(4):
        walk.run(table, schedule, rows, False, out, threads=False)
    return time.perf_counter() - begin


def _fastest(walk: GenericWalk, candidates: list[Schedule], rows: np.ndarray,
             out: np.ndarray) -> Schedule:  # fmt: skip
    tables = walk._measured
    for schedule in candidates:
        if schedule in walk.timings:
            continue
        if schedule.top_depth not in tables:
            tables[schedule.top_depth] = walk.tables_for(schedule.top_depth)
        table = tables[schedule.top_depth]
        walk.run(table, schedule, rows[:64], False, out[:64], threads=False)  # warm
        seconds = []
        for _ in range(2):
            begin = time.perf_counter()
            walk.run(table, schedule, rows, False, out, threads=False)
            seconds.append(time.perf_counter() - begin)
        walk.timings[schedule] = min(seconds)
    return min(candidates, key=walk.timings.__getitem__)

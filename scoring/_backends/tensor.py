"""``backend="tensor"``: the product's own compiler, on CPU or CUDA.

On CUDA the batch size comes from free device memory, and batches are in flight
(:meth:`TensorBackend.submit`, :mod:`.staged`): each takes a slot of pinned host buffers,
its copy-in, kernel, output transform and copy-out are queued on the device, and the
caller gets a pending result while the next batch is prepared.  A batch that runs out
of device memory is scored again synchronously, split in halves and retried (later
batches start at the smaller size).

Where the kernel is the walk every forest shares (``fused``), a batch comes feature-major
as it was read (:attr:`TensorBackend.takes_columns`, :class:`~scoring._inputs.Columns`):
walk.cpp reads the Arrow buffers where they are, and a CUDA slot takes them as one
``[features, rows]`` block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from functools import cached_property

import numpy as np
import pyarrow as pa
import torch

from .._compiler import compile_forest, transform
from .._compiler.contributions import Contributions
from .._compiler.generic import GenericWalk, narrowed, torch_on_caller
from .._compiler.kernel import CompiledKernel, Kernel, WalkKernel
from .._compiler.triton_walk import checked_on_host
from .._inputs import Columns
from .._ir import Forest
from .._outputs import predictions, probabilities, squeeze
from ..errors import ResourceLimitError
from . import CPU_BATCH_ROWS, Backend, as_rows
from .staged import CudaDevice, Layout, Pending, Ready, Stager, torch_dtype

__all__ = ["CUDA_MAX_BATCH_ROWS", "TensorBackend", "cuda_batch_rows", "finish"]

CUDA_MAX_BATCH_ROWS = 1 << 21
MIN_BATCH_ROWS = 1024


def cuda_batch_rows(forest: Forest, device: torch.device, *, fraction: float = 0.5) -> int:
    """Rows whose input, margins and intermediates fit in ``fraction`` of free memory."""
    free, _ = torch.cuda.mem_get_info(device)
    # inputs (float64 worst case), margins and values, and the strategy's per-row tables.
    per_row = 8 * forest.n_features + 16 * forest.n_outputs + 8 * max(forest.n_trees, 1) * 4
    return int(max(MIN_BATCH_ROWS, min(CUDA_MAX_BATCH_ROWS, free * fraction // per_row)))


def host_outputs(forest: Forest, values: np.ndarray, margins: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """What :meth:`TensorBackend.score` returns, from the transformed values and the
    margins (when asked for) on the host."""
    if forest.task in ("binary", "multiclass", "multilabel"):
        values = probabilities(forest, values)
    elif forest.task != "anomaly":
        values = squeeze(values)
    if margins is None:
        return values, None
    # an anomaly model's raw score is its decision_function
    return values, values if forest.task == "anomaly" else margins


@torch.inference_mode()
def finish(
    forest: Forest, margins: torch.Tensor, *, raw: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """What :meth:`TensorBackend.score` returns, from ``forest``'s margins (computed by
    its own module, or its slice of a combined forest's: :mod:`scoring._compiler.group`)."""
    values = transform(forest, margins).cpu().numpy()
    return host_outputs(forest, values, margins.cpu().numpy() if raw else None)


class TensorBackend:
    name = "tensor"
    explains = True

    def __init__(
        self,
        forest: Forest,
        *,
        device: torch.device,
        strategy: str = "auto",
        batch_size: int | None = None,
    ):
        self.forest = forest
        self.device = device
        self.module, self.choice = compile_forest(
            forest, device=device, strategy=strategy, batch_size=batch_size
        )
        self.strategy: str | None = self.choice.name
        self.strategy_reason = self.choice.reason
        #: Whether a run hands batches over feature-major (:class:`Columns`).
        self.takes_columns = bool(getattr(self.module, "takes_columns", False))
        on_cuda = device.type == "cuda"
        self.batch_rows = cuda_batch_rows(forest, device) if on_cuda else CPU_BATCH_ROWS
        #: Batches a CUDA device holds at once (:meth:`submit`); the engine sets it from
        #: its file lanes (two each) before the first batch: :meth:`allow_in_flight`.
        self.in_flight = 2
        self._stagers: dict[tuple[torch.dtype, bool], Stager] = {}
        self._stager_lock = threading.Lock()
        #: torch threads of a :meth:`score` call (None: torch's own count).
        self.threads_per_call: int | None = None
        self._process_threads = torch.get_num_threads()

    def for_parallel_calls(self) -> Backend | None:
        """On CPU, this backend with each :meth:`score` call on one torch thread (torch's
        thread count is the calling thread's own), for calls side by side as native
        runs them: one call spread over every core waits at each op for its slowest
        thread, and on a busy machine that one shares a core with the reader or the
        writer (one batch: 46 ms on one thread, 1,068 ms on two, measured under load).
        Not ``compiled``: its compiled blocks hold the interpreter lock, so calls side by
        side would take turns on one thread each (``fused`` on CPU lets go of it).  A
        GPU takes one call at a time."""
        if self.device.type != "cpu" or isinstance(_kernel(self.module), CompiledKernel):
            return None
        self.threads_per_call = 1
        # What the calls restore: read here, before any runs, since a call starting
        # while another holds one thread would read that.
        self._process_threads = torch.get_num_threads()
        return self

    def _tensor(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor:
        return torch.as_tensor(as_rows(mat)).to(self.device, non_blocking=True)

    def _kernel_input(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor | Columns:
        """An SDK call's rows for the module: columns as they are where the kernel is the
        shared walk (it reads them in place on CPU, and moves its own feature-major block
        of them to a GPU), else a tensor on the device."""
        return mat if isinstance(mat, Columns) and self.takes_columns else self._tensor(mat)

    @torch.inference_mode()
    def margins(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor:
        """Margins ``[B, K]`` on the device (base score included, before the link)."""
        with self._walk_apart(len(mat)):
            return self.module(self._kernel_input(mat))

    @torch.inference_mode()
    def values(self, mat: np.ndarray | torch.Tensor | Columns) -> np.ndarray:
        with self._walk_apart(len(mat)):  # margins' own context, entered once
            margins = self.module(self._kernel_input(mat))
            return transform(self.forest, margins).cpu().numpy()

    def _walk_apart(self, rows: int | None = None) -> contextlib.AbstractContextManager[None]:
        """Where the kernel is walk.cpp, which spreads rows over threads of its own: torch's
        arithmetic around it on the calling thread (:func:`torch_on_caller`).  Not for a
        call of ``rows`` too few for torch to spread its arithmetic (at most its grain of
        32,768 elements), where setting the thread count twice would cost more than a
        one-row call's walk."""
        if rows is not None and rows * self.forest.n_outputs <= _TORCH_GRAIN:
            return contextlib.nullcontext()
        kernel = _kernel(self.module)
        if isinstance(kernel, WalkKernel) and isinstance(kernel.walk, GenericWalk):
            return torch_on_caller()
        return contextlib.nullcontext()

    def predict_raw(self, mat: np.ndarray | torch.Tensor | Columns) -> np.ndarray:
        if self.forest.post_transform == "isolation":  # its raw score: decision_function
            return squeeze(self.values(mat))
        with torch.inference_mode():
            return squeeze(self.margins(mat).cpu().numpy())

    def predict_proba(self, mat: np.ndarray | torch.Tensor | Columns) -> np.ndarray:
        return probabilities(self.forest, self.values(mat))

    def predict(self, mat: np.ndarray | torch.Tensor | Columns) -> np.ndarray:
        return predictions(self.forest, self.values(mat))

    @torch.inference_mode()
    def predict_leaf(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return self.module.leaf_ids(self._tensor(mat)).cpu().numpy()

    def predict_contributions(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return self._contributions(self._tensor(mat)).cpu().numpy()

    @cached_property
    def _contributions(self) -> Contributions:
        """Built on first use: scoring alone never pays for the path tables."""
        return Contributions(self.forest, device=self.device)

    # -- batches for the Scorer -----------------------------------------------------

    @torch.inference_mode()
    def score(
        self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *, raw: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        with self._per_call():
            return finish(self.forest, self._halving(mat), raw=raw)

    @torch.inference_mode()
    def batch_margins(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor:
        """A job batch's margins ``[B, K]`` (base score included, before the link), its
        rows staged, split and threaded as :meth:`score` does them: what a set of
        models' combined forest is scored with, each member linking its own slice."""
        with self._per_call():
            return self._halving(mat)

    def _halving(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor:
        """The margins of a batch, which is scored in halves where it runs out of device
        memory (and later batches start at the half that fit)."""
        try:
            return self._margins_once(mat)
        except torch.cuda.OutOfMemoryError:
            # Below this the strategy's own scratch is what does not fit: halving again
            # would only turn the batch into millions of failing calls.
            if len(mat) <= MIN_BATCH_ROWS:
                raise ResourceLimitError(
                    f"{len(mat):,} rows do not fit in the memory free on {self.device}; free "
                    "device memory, use strategy='fused' (no per-tree scratch) or device='cpu'"
                ) from None
            torch.cuda.empty_cache()
            half = len(mat) // 2
            self.batch_rows = max(MIN_BATCH_ROWS, half)  # later batches start smaller
            return torch.cat([self._halving(mat[:half]), self._halving(mat[half:])])

    def _margins_once(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor:
        return self.module(self._staged(mat))

    @contextlib.contextmanager
    def _per_call(self) -> Iterator[None]:
        """The threads of one job call: ``threads_per_call`` of them, else the caller's
        (:meth:`_walk_apart`)."""
        if not self.threads_per_call:
            with self._walk_apart():
                yield
            return
        # OpenMP's count is the calling thread's own, but torch keeps a process-wide copy
        # too (read by compiled kernels and new threads): restored after the call, or a
        # fused model scored later in the process runs on one thread (2x slower).
        torch.set_num_threads(self.threads_per_call)
        try:
            yield
        finally:
            torch.set_num_threads(self._process_threads)

    def submit(self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *,
               raw: bool, stop: threading.Event | None = None) -> Pending:  # fmt: skip
        """One batch in flight: on CUDA its steps queued on the device (:mod:`.staged`),
        the result pending; elsewhere scored now.  A batch that does not fit a slot, or
        runs out of device memory when queued, is scored now by :meth:`score`."""
        if not self._takes_in_flight(mat):
            return Ready(self.score(features, mat, raw=raw))
        mat = self._narrowed(mat)
        stager = self._stager_for(mat)
        if stager is None:  # larger than a slot
            return Ready(self.score(features, mat, raw=raw))

        def compute(x: torch.Tensor) -> list[torch.Tensor]:
            with checked_on_host():  # narrowed above: no read-back inside the stream
                margins = self.module(x)
            values = transform(self.forest, margins)
            return [values, margins] if raw else [values]

        try:
            pending = stager.submit(mat, compute, stop=stop)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return Ready(self.score(features, mat, raw=raw))
        return _Outputs(self.forest, pending)

    def _takes_in_flight(self, mat: np.ndarray | torch.Tensor | Columns) -> bool:
        """Host rows for a CUDA device go through slots; anything else is scored now."""
        if self.device.type != "cuda":
            return False
        if isinstance(mat, Columns):
            return True
        host = torch.as_tensor(mat)
        return host.device.type == "cpu" and host.ndim == 2

    def _narrowed(self, mat: np.ndarray | torch.Tensor | Columns
                  ) -> np.ndarray | torch.Tensor | Columns:  # fmt: skip
        """Float64 rows of float32 values as float32 when the kernel is the shared walk,
        which reads them so anyway (:func:`narrowed`): half the copy, and no check on the
        device."""
        if not isinstance(_kernel(self.module), WalkKernel):
            return mat
        if isinstance(mat, Columns):
            return mat.narrowed()
        host = np.asarray(mat)  # host rows: numpy, or a CPU tensor's memory
        narrow = narrowed(host)
        return narrow if narrow is not host else mat

    def allow_in_flight(self, batches: int) -> None:
        """Let the device hold ``batches`` at once; on CUDA each batch then gets its share
        of the free memory a single batch would have had (its rows, its slot)."""
        with self._stager_lock:
            if any(stager.in_flight for stager in self._stagers.values()):
                return  # a run in progress keeps its slots
            self.in_flight = max(2, batches)
            self._stagers = {}
            if self.device.type == "cuda":
                self.batch_rows = cuda_batch_rows(self.forest, self.device,
                                                  fraction=0.5 / self.in_flight)  # fmt: skip

    def _stager_for(self, mat: np.ndarray | torch.Tensor | Columns) -> Stager | None:
        """The slots for batches of ``mat``'s dtype and layout (made on first use), or
        None for a batch larger than a slot."""
        rows, features = mat.shape
        if rows > self.batch_rows:
            return None
        dtype = torch_dtype(mat)
        key = (dtype, isinstance(mat, Columns))
        with self._stager_lock:  # lanes submit side by side
            stager = self._stagers.get(key)
            if stager is None or stager.rows < rows:
                stager = Stager(CudaDevice(self.device), slots=max(2, self.in_flight),
                                rows=self.batch_rows, features=features, dtype=dtype,
                                feature_major=key[1])  # fmt: skip
                self._stagers[key] = stager
            return stager

    def _staged(self, mat: np.ndarray | torch.Tensor | Columns) -> torch.Tensor | Columns:
        """On CUDA, host rows copied through pinned rows of their own, without blocking (a
        batch of columns feature-major, as it came); on CPU, the rows as they are.

        Own rows per call, never a buffer kept for the next: lanes fall back here side by
        side (a batch larger than a slot, a slot out of device memory), and a copy queued
        without blocking reads its host rows later.  PyTorch's pinned allocator hands a
        block out again only once the copies queued from it have run."""
        if not self._stages_through_host():
            return mat if isinstance(mat, Columns) else torch.as_tensor(mat)
        if isinstance(mat, torch.Tensor) and mat.device.type != "cpu":
            return mat
        n, features = mat.shape
        layout = Layout(n, features, isinstance(mat, Columns))
        host = self._host_rows(n * features, torch_dtype(mat))
        if isinstance(mat, Columns):
            mat.into(layout.block(host).numpy())
        else:
            layout.matrix(host).copy_(torch.as_tensor(mat))
        block = self._copied_in(layout.block(host))
        return block.t() if layout.feature_major else block

    def _stages_through_host(self) -> bool:
        return self.device.type == "cuda"

    def _host_rows(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, pin_memory=self.device.type == "cuda")

    def _copied_in(self, block: torch.Tensor) -> torch.Tensor:
        return block.to(self.device, non_blocking=True)


#: Elements below which torch runs an elementwise op on the calling thread alone.
_TORCH_GRAIN = 32_768


def _kernel(module: torch.nn.Module) -> Kernel | None:
    """A compiled forest's kernel (a chain has one per stage: None)."""
    return getattr(module, "kernel", None)


class _Outputs:
    """A pending batch's values and margins, as :meth:`TensorBackend.score` returns them."""

    def __init__(self, forest: Forest, pending: Pending):
        self.forest, self.pending = forest, pending

    def result(self) -> tuple[np.ndarray, np.ndarray | None]:
        outputs = self.pending.result()
        return host_outputs(self.forest, outputs[0], outputs[1] if len(outputs) > 1 else None)

    def cancel(self) -> None:
        self.pending.cancel()

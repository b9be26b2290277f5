"""Batches in flight (scoring/_backends/staged.py) on a fake device: threads and random
delays stand in for a GPU's copy and compute streams, so ordering, back-pressure,
buffer reuse, a failing batch and cancellation are proven without CUDA; then a whole
local run with its model pass submitted to that device."""

from __future__ import annotations

import queue
import random
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import scoring
from scoring._backends.staged import (
    Compute,
    Layout,
    Slot,
    Stager,
    Stopped,
    _fit_outputs,
    torch_dtype,
)
from scoring._backends.tensor import TensorBackend
from scoring._inputs import Columns
from scoring._parity import probe_rows
from scoring._scorer import Scorer

from .conftest import built

#: Long enough to wait for something that must happen; never reached when it does.
_PATIENCE_S = 60


class FakeDevice:
    """A copy thread and a compute thread taking steps in order, each after a random
    delay of up to a millisecond.  The copy step checks that the slot's host rows are
    still those submitted (a slot refilled too early fails its batch)."""

    def __init__(
        self, *, seed: int = 0, fail_on: float | None = None, gate: threading.Event | None = None,
        fail_in_start: float | None = None, hold_copies: threading.Event | None = None,
    ):  # fmt: skip
        self.rng = random.Random(seed)
        self.fail_on = fail_on  # a batch whose first value is this fails in compute
        self.gate = gate  # compute waits for it (a device that is busy)
        # A batch whose first value is this fails in start once its copy-in is queued.
        self.fail_in_start = fail_in_start
        # Copies wait for it (a copy engine behind), or for someone to wait on the device.
        self.hold_copies = hold_copies
        self.copies: queue.Queue[Any] = queue.Queue()
        self.computes: queue.Queue[Any] = queue.Queue()
        self.slots_made = 0
        self.reused_early: list[int] = []
        for work in (self._copy, self._compute):
            threading.Thread(target=work, daemon=True).start()

    def slot(self, number: int, rows: int, features: int, dtype: torch.dtype) -> Slot:
        self.slots_made += 1
        return Slot(number, rows, torch.empty(rows * features, dtype=dtype),
                    torch.empty(rows * features, dtype=dtype))  # fmt: skip

    def start(self, slot: Slot, layout: Layout, compute: Compute) -> Any:
        marker: dict[str, Any] = {"done": threading.Event(), "error": None}
        digest = zlib.crc32(layout.block(slot.host_in).numpy().tobytes())
        first = float(layout.matrix(slot.host_in)[0, 0]) if layout.rows else None
        if self.fail_in_start is not None and first == self.fail_in_start:
            self.copies.put((slot, layout, None, digest, marker))  # the copy alone
            raise RuntimeError("the kernel could not be queued")
        self.copies.put((slot, layout, compute, digest, marker))
        return marker

    def settle(self, slot: Slot) -> None:
        if self.hold_copies is not None:
            self.hold_copies.set()
        reached = threading.Event()  # behind everything queued so far, on both threads
        self.copies.put(reached)
        assert reached.wait(_PATIENCE_S)

    def wait(self, marker: Any) -> None:
        assert marker["done"].wait(_PATIENCE_S)
        if marker["error"] is not None:
            raise marker["error"]

    def _pause(self) -> None:
        threading.Event().wait(self.rng.random() / 1000)

    def _copy(self) -> None:
        while True:
            item = self.copies.get()
            if isinstance(item, threading.Event):
                self.computes.put(item)
                continue
            slot, layout, compute, digest, marker = item
            if self.hold_copies is not None:
                assert self.hold_copies.wait(_PATIENCE_S)
            self._pause()
            if zlib.crc32(layout.block(slot.host_in).numpy().tobytes()) != digest:
                self.reused_early.append(slot.number)
            layout.block(slot.device_in).copy_(layout.block(slot.host_in))
            if compute is not None:
                self.computes.put((slot, layout, compute, marker))

    def _compute(self) -> None:
        while True:
            item = self.computes.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            slot, layout, compute, marker = item
            if self.gate is not None:
                self.gate.wait()
            self._pause()
            rows = layout.rows
            try:
                x = layout.matrix(slot.device_in)
                if self.fail_on is not None and rows and float(x[0, 0]) == self.fail_on:
                    raise RuntimeError("the kernel failed on this batch")
                outputs = compute(x)
                _fit_outputs(slot, outputs, pinned=False)
                for out, host in zip(outputs, slot.host_out, strict=True):
                    self._pause()
                    host[:rows].copy_(out)
            except Exception as exc:
                marker["error"] = exc
            marker["done"].set()


def _compute(x: torch.Tensor) -> Sequence[torch.Tensor]:
    return [x.sum(1, keepdim=True), x[:, :1] * 2]


def _batch(i: int, rows: int = 64) -> np.ndarray:
    return np.full((rows, 3), float(i), np.float32) + np.arange(rows, dtype=np.float32)[:, None]


def _small(device: FakeDevice) -> Stager:
    """Two slots of eight rows on ``device``."""
    return Stager(device, slots=2, rows=8, features=3, dtype=torch.float32)


def _both_slots_held() -> tuple[threading.Event, Stager, list[Any]]:
    """A device held busy until the gate opens, with both slots in flight."""
    gate = threading.Event()
    stager = _small(FakeDevice(gate=gate))
    return gate, stager, [stager.submit(_batch(i, 8), _compute) for i in range(2)]


def test_every_batch_gets_its_own_results_with_slots_reused() -> None:
    device = FakeDevice(seed=1)
    # Two slots per lane, as the engine sizes it: one batch a lane holds unread while it
    # submits the next (a lane holding more than the slots allow would wait on itself).
    stager = Stager(device, slots=8, rows=64, features=3, dtype=torch.float32)

    def lane(first: int) -> list[tuple[int, Any]]:
        pending = []
        for i in range(first, first + 60):
            pending.append((i, stager.submit(_batch(i, rows=1 + i % 64), _compute)))
            if len(pending) > 1:  # a writer one batch behind its reader
                j, p = pending.pop(0)
                check(j, p.result())
        return [(j, p.result()) for j, p in pending]

    def check(i: int, result: list[np.ndarray]) -> None:
        x = _batch(i, rows=1 + i % 64)
        np.testing.assert_array_equal(result[0], x.sum(1, keepdims=True))
        np.testing.assert_array_equal(result[1], x[:, :1] * 2)

    with ThreadPoolExecutor(4) as pool:
        for done in pool.map(lane, range(0, 240, 60)):
            for i, result in done:
                check(i, result)
    assert device.slots_made <= 8  # eight slots at most served 240 batches
    assert device.reused_early == []
    assert stager.in_flight == 0


def test_submit_waits_for_a_slot_when_all_are_in_flight() -> None:
    gate, stager, first = _both_slots_held()
    started = threading.Event()

    def third() -> Any:
        pending = stager.submit(_batch(2, 8), _compute)
        started.set()
        return pending

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(third)
        assert not started.wait(0.2)  # both slots in flight: it waits (it cannot pass)
        gate.set()
        first[0].result()  # a slot comes back ...
        assert started.wait(_PATIENCE_S)  # ... and the third batch starts in it
        np.testing.assert_array_equal(waiting.result().result()[1], _batch(2, 8)[:, :1] * 2)
    first[1].result()
    assert stager.in_flight == 0


def test_a_failing_batch_fails_alone_and_gives_its_slot_back() -> None:
    stager = _small(FakeDevice(fail_on=5.0))
    results: dict[int, Any] = {}
    for i in range(10):
        pending = stager.submit(_batch(i, 8), _compute)
        try:
            results[i] = pending.result()
        except RuntimeError as exc:
            results[i] = exc
    assert isinstance(results[5], RuntimeError) and "kernel failed" in str(results[5])
    assert all(isinstance(results[i], list) for i in range(10) if i != 5)
    assert stager.in_flight == 0


def test_a_stopped_run_starts_no_batch_and_cancelled_ones_free_their_slots() -> None:
    gate, stager, held = _both_slots_held()
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(stager.submit, _batch(2, 8), _compute, stop=stop)
        stop.set()  # the run fails elsewhere: the waiting submit gives up
        with pytest.raises(Stopped):
            waiting.result(timeout=_PATIENCE_S)
    gate.set()
    for pending in held:
        pending.cancel()
    assert stager.in_flight == 0
    again = stager.submit(_batch(3, 8), _compute)  # the slots serve later batches
    np.testing.assert_array_equal(again.result()[1], _batch(3, 8)[:, :1] * 2)
    stager.close()
    with pytest.raises(Stopped):
        stager.submit(_batch(4, 8), _compute)


def test_a_batch_that_fails_to_start_keeps_its_slot_until_its_copy_has_run() -> None:
    """A start that fails once its copy-in is queued: the slot goes back for the next
    batch only after that copy has read its host rows."""
    hold = threading.Event()
    device = FakeDevice(fail_in_start=0.0, hold_copies=hold)
    stager = _small(device)
    with pytest.raises(RuntimeError, match="could not be queued"):
        stager.submit(_batch(0, 8), _compute)
    second = stager.submit(_batch(1, 8), _compute)  # in the slot given back
    hold.set()
    np.testing.assert_array_equal(second.result()[1], _batch(1, 8)[:, :1] * 2)
    assert device.reused_early == [] and device.slots_made == 1


def test_a_result_is_read_once() -> None:
    stager = _small(FakeDevice())
    pending = stager.submit(_batch(0, 8), _compute)
    pending.result()
    with pytest.raises(scoring.errors.EngineError, match="twice"):
        pending.result()


# -- a whole run with its batches in flight ------------------------------------------------


class _InFlightBackend(TensorBackend):
    """The CPU tensor backend with its batches submitted to a fake device, as a CUDA
    backend submits them to its streams."""

    device_for_test: FakeDevice

    def _takes_in_flight(self, mat: Any) -> bool:
        return isinstance(mat, Columns) or torch.as_tensor(mat).ndim == 2

    def _stager_for(self, mat: Any) -> Stager | None:
        key = (torch_dtype(mat), isinstance(mat, Columns))
        if key not in self._stagers:
            self._stagers[key] = Stager(self.device_for_test, slots=max(2, self.in_flight),
                                        rows=self.batch_rows, features=mat.shape[1],
                                        dtype=key[0], feature_major=key[1])  # fmt: skip
        return self._stagers[key]


@pytest.fixture
def in_flight(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(Scorer, "in_flight", property(lambda self: True))

    def compiled(device: FakeDevice, strategy: str = "tree_traversal") -> scoring.CompiledModel:
        model = built("xgb_multi")[0]
        cm = scoring.compile(model, backend="tensor", device="cpu", strategy=strategy)
        backend = cm.implementation
        backend.__class__ = _InFlightBackend
        backend.device_for_test = device
        backend._stagers = {}
        backend.batch_rows = 100  # many batches per file
        return cm

    return compiled


def _files(folder: Path, forest: Any, *, files: int = 3, rows: int = 450) -> Path:
    folder.mkdir()
    for f in range(files):
        x = probe_rows(forest, n_rows=rows, seed=f, special=False)
        table = pa.table(
            {"id": np.arange(rows) + f * rows, **{f"f{j}": x[:, j] for j in range(x.shape[1])}}
        )
        pq.write_table(table, folder / f"part-{f}.parquet")
    return folder


@pytest.mark.parametrize("strategy", ["tree_traversal", "fused"])
def test_a_run_with_batches_in_flight_writes_what_scoring_now_writes(
    tmp_path: Path, in_flight: Any, strategy: str
) -> None:
    """Row-major slots, and for the shared walk feature-major ones filled from the
    batch's columns as read."""
    forest = built("xgb_multi")[1]
    data = _files(tmp_path / "in", forest)
    device = FakeDevice(seed=3)
    cm = in_flight(device, strategy)
    report = scoring.score_parquet(data, tmp_path / "out", cm, keep=["id"], progress=False)
    reference = scoring.compile(built("xgb_multi")[0], backend="tensor", device="cpu",
                                strategy=strategy)  # fmt: skip
    expected = scoring.score_parquet(data, tmp_path / "ref", reference, keep=["id"], progress=False)
    got = pq.read_table(tmp_path / "out").sort_by("id")
    want = pq.read_table(tmp_path / "ref").sort_by("id")
    assert report.rows == expected.rows == 1350
    assert got.equals(want)
    assert device.slots_made >= 2 and device.reused_early == []
    stagers = cm.implementation._stagers
    assert [(s.in_flight, s.feature_major) for s in stagers.values()] == [
        (0, strategy == "fused")]  # fmt: skip


def test_columns_go_in_flight_feature_major_with_the_results_of_rows() -> None:
    """A batch of columns fills a feature-major slot one feature at a time; its kernel
    sees the same rows, so the results equal a row-major slot's."""
    rows = _batch(7, 8) * np.array([1.0, -2.0, 0.5], np.float32)
    columns = Columns([np.ascontiguousarray(rows[:, j]) for j in range(3)])
    by_rows = _small(FakeDevice(seed=1)).submit(rows, _compute).result()
    stager = Stager(FakeDevice(seed=2), slots=2, rows=8, features=3, dtype=torch.float32,
                    feature_major=True)  # fmt: skip
    by_columns = stager.submit(columns, _compute).result()
    for got, want in zip(by_columns, by_rows, strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="a slot holds 8 rows of 3"):
        stager.submit(Columns([np.zeros(8, np.float32)] * 2), _compute)  # two features


def test_a_failing_batch_fails_the_run_and_a_rerun_finds_every_slot(
    tmp_path: Path, in_flight: Any
) -> None:
    forest = built("xgb_multi")[1]
    data = _files(tmp_path / "in", forest)
    device = FakeDevice(seed=4)
    cm = in_flight(device)
    first_value = float(pq.read_table(data / "part-1.parquet").column("f0")[100].as_py())
    device.fail_on = first_value  # the second batch of the second file
    with pytest.raises(RuntimeError, match="kernel failed"):
        scoring.score_parquet(data, tmp_path / "out", cm, keep=["id"], progress=False)
    assert [s.in_flight for s in cm.implementation._stagers.values()] == [0]  # none held
    device.fail_on = None
    report = scoring.score_parquet(data, tmp_path / "out", cm, keep=["id"], progress=False)
    assert report.rows + report.rows_skipped == 1350  # the file written before resumes
    assert sorted(pq.read_table(tmp_path / "out").column("id").to_pylist()) == list(range(1350))


def test_float64_batches_of_float32_values_go_in_flight_as_float32() -> None:
    """Half the copy, and the shared walk reads them at float32 anyway; a value that is
    not a float32 keeps its batch at float64."""
    model, forest, _ = built("lgb_clf")
    backend = scoring.compile(
        model, backend="tensor", device="cpu", strategy="fused"
    ).implementation
    rows = probe_rows(forest, n_rows=50, seed=2, special=False)
    as_read = rows.astype(np.float32).astype(np.float64)  # a float32 column read as double
    narrowed = backend._narrowed(as_read)
    assert narrowed.dtype == np.float32
    np.testing.assert_array_equal(backend.predict_raw(narrowed), backend.predict_raw(as_read))
    as_read[3, 0] = 0.1  # not a float32 value
    assert backend._narrowed(as_read).dtype == np.float64


def test_a_slot_that_cannot_be_made_is_not_counted() -> None:
    """No memory for a new slot's buffers fails that batch; later batches still get every
    slot (a slot counted but never made would leave them waiting)."""
    device = FakeDevice()
    made = device.slot
    failures = iter([True, False, False])

    def slot(*args: Any) -> Slot:
        if next(failures, False):
            raise MemoryError("no pinned memory")
        return made(*args)

    device.slot = slot  # type: ignore[method-assign]
    stager = _small(device)
    with pytest.raises(MemoryError):
        stager.submit(_batch(0, 8), _compute)
    pending = [stager.submit(_batch(i, 8), _compute) for i in (1, 2)]  # both slots made
    assert [p.result()[1][0, 0] for p in pending] == [2.0, 4.0]
    assert device.slots_made == 2


def test_out_of_device_memory_for_a_slot_scores_the_batch_now(
    tmp_path: Path, in_flight: Any
) -> None:
    """A slot's buffers that do not fit on the device: that batch is scored at once
    (after the allocator gives back its cache), and the run writes what it writes with
    every batch in flight."""
    forest = built("xgb_multi")[1]
    data = _files(tmp_path / "in", forest)
    device = FakeDevice(seed=5)
    made, refused = device.slot, []

    def slot(*args: Any) -> Slot:
        if not refused:
            refused.append(args)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return made(*args)

    device.slot = slot  # type: ignore[method-assign]
    cm = in_flight(device)
    scoring.score_parquet(data, tmp_path / "out", cm, keep=["id"], progress=False)
    reference = scoring.compile(built("xgb_multi")[0], backend="tensor", device="cpu",
                                strategy="tree_traversal")  # fmt: skip
    scoring.score_parquet(data, tmp_path / "ref", reference, keep=["id"], progress=False)
    got = pq.read_table(tmp_path / "out").sort_by("id")
    assert len(refused) == 1 and got.equals(pq.read_table(tmp_path / "ref").sort_by("id"))
    assert [s.in_flight for s in cm.implementation._stagers.values()] == [0]


def test_a_run_stopped_while_a_batch_waits_for_a_slot_stops_that_lane_quietly() -> None:
    """The engine's side of :class:`Stopped`: a lane whose submit gave up because the
    run failed elsewhere ends as stopped, so that the first error is the one raised."""
    from scoring._engines.local import _Stopped, _Submitted
    from scoring._progress import StageClock

    def gives_up(batch: Any, **options: Any) -> Any:
        raise Stopped("the run stopped")

    run = SimpleNamespace(scorer=SimpleNamespace(submit=gives_up))
    batch = pa.record_batch({"f0": [1.0]})
    with pytest.raises(_Stopped):
        _Submitted(run, batch, StageClock(), threading.Event())  # type: ignore[arg-type]


class _HostStagedBackend(TensorBackend):
    """The CPU tensor backend staging a batch that is scored now as a CUDA one does:
    host rows, then a copy queued without blocking.  Its fake copy reads the host rows
    as late as a real one may, when the kernel runs (the device rows alias them), and
    two lanes both fill their host rows before either copy is queued."""

    both_filled: threading.Barrier

    def _stages_through_host(self) -> bool:
        return True

    def _copied_in(self, block: torch.Tensor) -> torch.Tensor:
        self.both_filled.wait(_PATIENCE_S)
        return block


def test_two_lanes_scored_outside_the_slots_at_once_keep_their_own_rows() -> None:
    """A batch larger than a slot, or one whose slot ran out of device memory, is scored
    now: two lanes doing so at once must not copy each other's rows."""
    model, forest, _ = built("xgb_multi")
    cm = scoring.compile(model, backend="tensor", device="cpu", strategy="tree_traversal")
    reference = cm.implementation
    backend = scoring.compile(model, backend="tensor", device="cpu",
                              strategy="tree_traversal").implementation  # fmt: skip
    backend.__class__ = _HostStagedBackend
    backend.both_filled = threading.Barrier(2)
    batches = [probe_rows(forest, n_rows=300, seed=s, special=False).astype(np.float32)
               for s in (1, 2)]  # fmt: skip
    features = pa.table({"f0": [0.0]})
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda x: backend.score(features, x, raw=True), batches))
    for x, (values, margins) in zip(batches, got, strict=True):
        want_values, want_margins = reference.score(features, x, raw=True)
        np.testing.assert_array_equal(margins, want_margins)
        np.testing.assert_array_equal(values, want_values)

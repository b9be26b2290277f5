"""Parity verification: the tensor backend against the native predictor, per device type.

Rows are the caller's sample plus generated probes (each threshold and its neighbours,
NaN, +-inf where native accepts them, unseen and negative categories).  Held: outputs
within :data:`TOLERANCE` (absolute, relative above 1), the same labels, and the same
leaf for every row and tree where native reports leaves.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..compiler import choose_strategy
from ..errors import ScoringError
from ..ir import Forest
from ..model import CompiledModel, compile_imported
from ..probes import probe_rows
from .schema import Verification, library_versions

__all__ = ["TOLERANCE", "available_device_types", "probe_frame", "verify_model"]

TOLERANCE = 1e-5
PROBE_ROWS = 2048


def available_device_types() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def probe_frame(forest: Forest, *, n_rows: int = PROBE_ROWS) -> Any:
    """Probe rows as the model reads them: a frame when it has feature names, with
    category columns where its categories carry labels (an unknown code becomes missing
    for models that refuse unseen labels, else a label never seen); else a float array."""
    rows = probe_rows(forest, n_rows=n_rows)
    if not forest.feature_names and not forest.categories:
        return rows
    names = forest.feature_names or [f"f{i}" for i in range(forest.n_features)]
    frame = pd.DataFrame(rows, columns=names)
    for index, labels in forest.categories.items():
        frame[names[index]] = _categorical(rows[:, index], list(labels), forest)
    return frame


def _categorical(codes: np.ndarray, known: list[Any], forest: Forest) -> pd.Categorical:
    unseen = None if forest.reject_unknown_categories else _unseen_label(known)
    valid = np.isfinite(codes) & (codes >= 0) & (codes < len(known))
    values = [
        known[int(c)] if ok else (np.nan if np.isnan(c) else unseen)
        for c, ok in zip(codes, valid, strict=True)
    ]
    return pd.Categorical(values, categories=known if unseen is None else [*known, unseen])


def _unseen_label(known: list[Any]) -> Any:
    if all(isinstance(v, str) for v in known):
        return "__unseen__"
    return max((float(v) for v in known), default=0.0) + 1000.0


def verify_model(
    model: Any,
    forest: Forest,
    *,
    sample: Any = None,
    candidate: Forest | None = None,
    devices: list[str] | None = None,
) -> dict[str, Verification]:
    """One :class:`Verification` per device type (default: every one available).

    ``candidate``: the Forest to compile, when it is not ``forest`` itself (the registry
    compiles what it restores from the stored bytes and holds it to the original model).
    """
    native = compile_imported(model, forest, backend="native")
    inputs = [probe_frame(forest)] + ([] if sample is None else [sample])
    references = [_outputs(native, X, leaves=True) for X in inputs]
    tensor_forest = candidate or forest
    return {
        dev: _verify_on(tensor_forest, inputs, references, dev)
        for dev in devices or available_device_types()
    }


def _strategies(forest: Forest, device: torch.device) -> list[str]:
    """Every strategy ``auto`` may pick on this device type (batch size decides on CUDA)."""
    picks = {choose_strategy(forest, device=device, batch_size=b).name for b in (None, 4096)}
    return sorted(picks)


def _verify_on(
    forest: Forest,
    inputs: list[Any],
    references: list[dict[str, np.ndarray]],
    device_type: str,
) -> Verification:
    device = torch.device(device_type)
    strategies = _strategies(forest, device)
    worst, labels, detail = 0.0, 0, ""
    leaves: int | None = 0 if all("leaves" in r for r in references) else None
    # predict gives labels to match exactly; for a Booster it gives values, held above.
    discrete = forest.predict_returns != "value" or forest.post_transform == "isolation"
    for strategy in strategies:
        try:
            cm = compile_imported(None, forest, backend="tensor", device=device, strategy=strategy)
            for X, ref in zip(inputs, references, strict=True):
                ours = _outputs(cm, X, leaves=leaves is not None)
                worst = max(worst, _max_error(ours["values"], ref["values"]))
                if discrete:
                    labels += int(np.sum(~_same(ours["labels"], ref["labels"])))
                if leaves is not None:
                    leaves += int(np.sum(np.any(ours["leaves"] != ref["leaves"], axis=1)))
        except ScoringError as exc:
            worst, detail = float("inf"), f"{strategy}: {exc}"
    passed = worst <= TOLERANCE and labels == 0 and not leaves
    return Verification(
        device_type=device_type,
        strategies=strategies,
        rows=sum(len(X) for X in inputs),
        max_error=worst,
        label_mismatches=labels,
        leaf_mismatches=leaves,
        passed=passed,
        detail=detail,
        verified_at=datetime.now(timezone.utc),
        library_versions=library_versions(forest.framework),
    )


def _outputs(cm: CompiledModel, X: Any, *, leaves: bool) -> dict[str, np.ndarray]:
    forest = cm.forest
    if forest.task in ("binary", "multiclass"):
        values = cm.predict_proba(X)
    elif forest.task == "anomaly":
        values = cm.predict_raw(X)
    else:
        values = cm.predict(X)
    out = {"values": np.asarray(values, dtype=np.float64), "labels": np.asarray(cm.predict(X))}
    if leaves:
        with contextlib.suppress(ScoringError):  # HistGradientBoosting reports no leaves
            out["leaves"] = cm.predict_leaf(X)
    return out


def _max_error(ours: np.ndarray, ref: np.ndarray) -> float:
    if ours.shape != ref.shape:
        return float("inf")
    both_nan = np.isnan(ours) & np.isnan(ref)
    err = np.abs(ours - ref) / np.maximum(1.0, np.abs(ref))
    err = np.where(both_nan, 0.0, np.nan_to_num(err, nan=np.inf))
    return float(err.max(initial=0.0))


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        return np.zeros(max(len(a), len(b)), dtype=bool)
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return np.asarray(a == b)

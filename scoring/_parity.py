"""Parity with the framework's own predictor: probe rows, the one error metric, and
the verification record every backend is held to.

Probes: per feature the candidates are every split threshold and the float32
neighbours either side of it, zero, NaN and +-inf (where the native predictor accepts
them), and for categorical features known, unseen and negative categories.  Rows draw
one candidate per feature at random, so every branch rule is exercised in combination.

The metric: per value ``|ours - ref| / max(1, |ref|)`` (absolute, relative above 1),
NaN where both are NaN counts as equal.  A candidate passes when its worst error is at
most :data:`TOLERANCE`, its labels are the reference's, and (where the framework
reports leaves) every row it gives leaves for reaches the same leaf in every tree.
The registry, the hummingbird backend, the benchmarks and the tests all use these
functions; nothing here compiles a model, the callers hand in what they compiled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from ._ir import REFUSABLE, SPLIT_CATEGORICAL, Forest
from .errors import ScoringError

__all__ = [
    "PROBE_ROWS",
    "TOLERANCE",
    "Predictor",
    "Verification",
    "as_frame",
    "feature_candidates",
    "leaf_rows",
    "max_error",
    "outputs_of",
    "probe_frame",
    "probe_rows",
    "row_errors",
    "verify",
]

#: The one tolerance: float32 accumulation over hundreds of trees stays well inside it.
TOLERANCE = 1e-5
PROBE_ROWS = 2048


class Predictor(Protocol):
    """What parity calls on a compiled model (ours, or the native reference)."""

    forest: Forest

    def predict(self, X: Any) -> np.ndarray: ...
    def predict_proba(self, X: Any) -> Any: ...
    def predict_raw(self, X: Any) -> np.ndarray: ...
    def predict_leaf(self, X: Any) -> np.ndarray: ...


class Verification(BaseModel):
    """Parity of a backend with native on one device type."""

    model_config = ConfigDict(frozen=True)

    device_type: str
    backend: str = "tensor"
    strategies: list[str]
    rows: int
    max_error: float
    label_mismatches: int
    leaf_mismatches: int | None
    passed: bool
    detail: str = ""
    verified_at: datetime
    library_versions: dict[str, str]


def feature_candidates(forest: Forest, *, special: bool = True) -> list[np.ndarray]:
    """Values worth trying for each feature (thresholds +- one float32 ulp, specials)."""
    found: list[list[np.ndarray]] = [[] for _ in range(forest.n_features)]
    # Every tree's numeric splits at once (one pass per feature, not per tree and feature).
    nodes = [(t.feature, t.threshold, (t.left >= 0) & (t.split_kind != SPLIT_CATEGORICAL))
             for t in forest.trees]  # fmt: skip
    feature = np.concatenate([f[m] for f, _, m in nodes]) if nodes else np.zeros(0, int)
    threshold = np.concatenate([t[m] for _, t, m in nodes]) if nodes else np.zeros(0)
    # A chain's later stage splits on an earlier prediction; sklearn's missing-only
    # splits test against inf.
    keep = (feature < forest.n_features) & np.isfinite(threshold)
    feature, threshold = feature[keep], threshold[keep]
    for f in np.unique(feature):
        t = threshold[feature == f]
        found[f].append(_neighbours(t.astype(np.float32)).astype(np.float64))
        if forest.input_dtype == "float64":  # float64 readers: float64 neighbours too
            found[f].append(_neighbours(t))
    out = []
    for f in range(forest.n_features):
        values = np.concatenate(found[f]) if found[f] else np.array([0.0, 1.0])
        values = np.unique(values)[:4096]
        extra = [0.0, -1.0, 1.0]
        if f in forest.categorical_features:
            extra = [0.0, 1.0, 2.0, 3.0, 5.0, 31.0, 32.0, 1000.0, -1.0, -0.5, 0.5]
        if special and forest.accepts_nan:
            extra.append(np.nan)
        if special and forest.accepts_inf(f):
            extra += [np.inf, -np.inf]
        out.append(np.concatenate([values, np.array(extra)]))
    return out


def _neighbours(t: np.ndarray) -> np.ndarray:
    """Each value and the next representable value either side, in its own precision."""
    inf = t.dtype.type(np.inf)
    with np.errstate(over="ignore"):  # past the largest finite value is inf, also a probe
        return np.concatenate([t, np.nextafter(t, inf), np.nextafter(t, -inf)])


def probe_rows(
    forest: Forest, *, n_rows: int = 1024, seed: int = 0, special: bool = True
) -> np.ndarray:
    """``n_rows`` float64 rows mixing each feature's candidate values."""
    rng = np.random.default_rng(seed)
    candidates = feature_candidates(forest, special=special)
    cols = [c[rng.integers(0, c.size, n_rows)] for c in candidates]
    return np.column_stack(cols)


def probe_frame(forest: Forest, *, n_rows: int = PROBE_ROWS) -> Any:
    """Probe rows as the model reads them: a frame when it has feature names, with
    category columns where its categories carry labels (an unknown code becomes missing
    for models that refuse unseen labels, else a label never seen); else a float array."""
    rows = probe_rows(forest, n_rows=n_rows)
    if not forest.feature_names and not forest.categories:
        return rows
    return as_frame(rows, forest)


def as_frame(rows: np.ndarray, forest: Forest) -> pd.DataFrame:
    """Float rows, with category codes in categorical columns, as a frame the model
    reads: category columns, or for a Pipeline's encoder its labels as they are (an
    unknown code becomes a label never seen, or where the encoder refuses those, its
    first label)."""
    names = forest.feature_names or [f"f{i}" for i in range(forest.n_features)]
    frame = pd.DataFrame(rows, columns=names)
    for index, labels in forest.categories.items():
        make = _encoder_labels if index in forest.encoded else _categorical
        frame[names[index]] = make(rows[:, index], list(labels), forest.encoded.get(index, {}),
                                   reject=forest.reject_unknown_categories)  # fmt: skip
    return frame


def _encoder_labels(
    codes: np.ndarray, known: list[Any], refused: dict[str, str], *, reject: bool
) -> np.ndarray:
    unseen = known[0] if "unknown" in refused else _unseen_label(known)
    missing = known[0] if "nan" in refused else np.nan
    values = [
        known[int(c)] if ok else (missing if np.isnan(c) else unseen)
        for c, ok in zip(codes, _valid(codes, known), strict=True)
    ]
    return np.array(values, dtype=object)


def _categorical(
    codes: np.ndarray, known: list[Any], refused: dict[str, str], *, reject: bool
) -> pd.Categorical:
    unseen = None if reject else _unseen_label(known)
    values = [
        known[int(c)] if ok else (np.nan if np.isnan(c) else unseen)
        for c, ok in zip(codes, _valid(codes, known), strict=True)
    ]
    return pd.Categorical(values, categories=known if unseen is None else [*known, unseen])


def _valid(codes: np.ndarray, known: list[Any]) -> np.ndarray:
    return np.isfinite(codes) & (codes >= 0) & (codes < len(known)) & (codes == np.trunc(codes))


def _unseen_label(known: list[Any]) -> Any:
    if any(isinstance(v, str) for v in known):
        return "__unseen__"
    numbers = [float(v) for v in known if isinstance(v, (int, float)) and np.isfinite(v)]
    return max(numbers, default=0.0) + 1000.0


# -- the metric -------------------------------------------------------------------------


def row_errors(ours: Any, ref: Any) -> np.ndarray:
    """The worst error of each row (inf where the shapes differ or only one is NaN)."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if a.shape != b.shape:
        return np.full(max(len(a), len(b)), np.inf)
    err = np.abs(a - b) / np.maximum(1.0, np.abs(b))
    err = np.where(np.isnan(a) & np.isnan(b), 0.0, np.nan_to_num(err, nan=np.inf))
    return err.reshape(len(a), -1).max(axis=1, initial=0.0)


def max_error(ours: Any, ref: Any) -> float:
    """The worst error over every value; see the module docstring."""
    return float(row_errors(ours, ref).max(initial=0.0))


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        return np.zeros(max(len(a), len(b)), dtype=bool)
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return np.asarray(a == b)


def outputs_of(model: Predictor, X: Any, *, leaves: bool) -> dict[str, np.ndarray]:
    """What parity compares: probabilities (classifiers), the anomaly score or the
    prediction; the labels; the leaves when asked and reported."""
    forest = model.forest
    if forest.task in ("binary", "multiclass", "multilabel"):
        values = model.predict_proba(X)
    elif forest.task == "multioutput":  # each target's probabilities, side by side
        values = np.hstack(model.predict_proba(X))
    elif forest.task == "anomaly":
        values = model.predict_raw(X)
    else:
        values = model.predict(X)
    out = {"values": np.asarray(values, dtype=np.float64), "labels": np.asarray(model.predict(X))}
    rows = leaf_rows(X, forest) if leaves else []
    if len(rows):
        with contextlib.suppress(ScoringError):  # HistGradientBoosting reports no leaves
            out["leaves"] = model.predict_leaf(rows)
    return out


def leaf_rows(X: Any, forest: Forest) -> Any:
    """The rows of ``X`` native gives leaf ids for: without the NaN or +-inf (with
    float32 overflow) that leaf ids refuse and scores take (XGBoost's DMatrix refuses
    inf), else all of them."""
    refuses = forest.refuses
    only_leaves = {k for k in REFUSABLE if f"leaf_{k}" in refuses and k not in refuses}
    nan, inf = "nan" in only_leaves, bool(only_leaves - {"nan"})
    if not (nan or inf):
        return X
    frame = isinstance(X, pd.DataFrame)
    values = X.select_dtypes("number").to_numpy(np.float64) if frame else np.asarray(X, np.float64)
    bad = np.zeros(len(values), dtype=bool)
    if nan:
        bad |= np.isnan(values).any(axis=1)
    if inf:
        bad |= (np.abs(values) > np.finfo(np.float32).max).any(axis=1)
    return X[~bad] if frame else np.asarray(X)[~bad]


# -- verification -----------------------------------------------------------------------


def verify(
    reference: Predictor,
    build: Callable[[str, str], Predictor],
    *,
    strategies: Mapping[str, Sequence[str]],
    versions: dict[str, str],
    sample: Any = None,
) -> dict[str, Verification]:
    """One :class:`Verification` per device type in ``strategies`` (device type ->
    the strategies to hold to ``reference``); ``build(device_type, strategy)`` compiles
    a candidate.  Rows: generated probes plus the caller's sample."""
    forest = reference.forest
    inputs = [probe_frame(forest)] + ([] if sample is None else [sample])
    refs = [outputs_of(reference, X, leaves=True) for X in inputs]
    return {
        device: _verify_on(device, list(names), build, inputs, refs, versions)
        for device, names in strategies.items()
    }


def _verify_on(
    device: str,
    strategies: list[str],
    build: Callable[[str, str], Predictor],
    inputs: list[Any],
    refs: list[dict[str, np.ndarray]],
    versions: dict[str, str],
) -> Verification:
    worst, labels, detail = 0.0, 0, ""
    leaves: int | None = 0 if all("leaves" in r for r in refs) else None
    for strategy in strategies:
        try:
            candidate = build(device, strategy)
            # predict gives labels to match exactly; for a Booster it gives values.
            forest = candidate.forest
            discrete = forest.predict_returns != "value" or forest.post_transform == "isolation"
            for X, ref in zip(inputs, refs, strict=True):
                ours = outputs_of(candidate, X, leaves=leaves is not None)
                worst = max(worst, max_error(ours["values"], ref["values"]))
                if discrete:
                    labels += int(np.sum(~_same(ours["labels"], ref["labels"])))
                if leaves is not None:
                    leaves += int(np.sum(np.any(ours["leaves"] != ref["leaves"], axis=1)))
        except ScoringError as exc:
            worst, detail = float("inf"), f"{strategy}: {exc}"
    return Verification(
        device_type=device,
        strategies=strategies,
        rows=sum(len(X) for X in inputs),
        max_error=worst,
        label_mismatches=labels,
        leaf_mismatches=leaves,
        passed=worst <= TOLERANCE and labels == 0 and not leaves,
        detail=detail,
        verified_at=datetime.now(timezone.utc),
        library_versions=versions,
    )

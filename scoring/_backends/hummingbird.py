"""``backend="hummingbird"``: hummingbird-ml's compiler, verified against native.

Hummingbird ignores missing-value rules (NaN always goes right), XGBoost's automatic
base_score and categorical splits, among others, so a conversion is probed against the
native predictor on generated rows before it is handed out; a divergence raises
:class:`ParityError` unless the caller passed ``verify=False``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

from .._frameworks import framework_named
from .._inputs import Columns
from .._ir import Forest
from .._outputs import squeeze
from .._parity import TOLERANCE, probe_rows, row_errors
from ..errors import (
    CompileError,
    DependencyError,
    ParityError,
    UnsupportedModelError,
    translated,
)
from . import CPU_BATCH_ROWS, Backend, as_rows
from .native import NativeBackend
from .staged import OnHost

__all__ = ["HB_STRATEGIES", "HummingbirdBackend"]

#: Our strategy names -> hummingbird's tree_implementation names.
HB_STRATEGIES = {
    "gemm": "gemm",
    "tree_traversal": "tree_trav",
    "perfect_tree_traversal": "perf_tree_trav",
}


class HummingbirdBackend(OnHost):
    name = "hummingbird"
    strategy_reason = "requested"
    batch_rows = CPU_BATCH_ROWS
    explains = False  # see predict_contributions
    takes_columns = False

    def __init__(
        self, model: Any, forest: Forest, *, device: torch.device, strategy: str, verify: bool
    ):
        self.forest = forest
        self.device = device
        self.strategy: str | None = strategy
        native = NativeBackend(model, forest)
        if not framework_named(forest.framework).hummingbird:
            raise UnsupportedModelError(
                f"hummingbird has no converter for {forest.described}; use backend='tensor'"
            )
        if forest.encoded:
            raise UnsupportedModelError(
                f"hummingbird cannot read the labels a Pipeline's encoder reads before "
                f"{forest.described}; use backend='tensor'"
            )
        if forest.multi_target:
            raise UnsupportedModelError(
                f"hummingbird cannot score {forest.described} of several targets; use "
                "backend='tensor'"
            )
        if not native.predictor.sklearn_api:
            # It refuses xgboost.Booster and returns raw margins for lightgbm.Booster.
            raise UnsupportedModelError(
                f"hummingbird cannot score {forest.described} correctly; pass the "
                "sklearn-API estimator or use backend='tensor'"
            )
        self.model = _convert(model, forest, device=device, strategy=strategy)
        if verify:
            self._verify(native)

    def for_parallel_calls(self) -> Backend | None:
        return None

    def score(
        self, features: pa.Table, mat: np.ndarray | torch.Tensor | Columns, *, raw: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        mat = as_rows(mat)
        return self._outputs(self, mat), (self.predict_raw(mat) if raw else None)

    def predict_leaf(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        raise CompileError("backend 'hummingbird' does not report leaves")

    def predict_contributions(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        raise CompileError(
            "backend 'hummingbird' does not compute contributions; use backend='tensor'"
        )

    def _input(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        arr = mat.cpu().numpy() if isinstance(mat, torch.Tensor) else mat
        return np.asarray(arr, dtype=np.float32)

    def predict(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return np.asarray(self.model.predict(self._input(mat)))

    def predict_proba(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return np.asarray(self.model.predict_proba(self._input(mat)))

    def predict_raw(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        if not hasattr(self.model, "decision_function"):
            raise CompileError(
                f"hummingbird gives no raw margins for {self.forest.described}; "
                "use backend='tensor' for predict_raw"
            )
        return squeeze(np.asarray(self.model.decision_function(self._input(mat))))

    def _outputs(self, backend: Any, rows: np.ndarray | torch.Tensor) -> np.ndarray:
        if self.forest.task in ("binary", "multiclass"):
            return np.asarray(backend.predict_proba(rows), dtype=np.float64)
        return np.asarray(backend.predict(rows), dtype=np.float64)

    def _verify(self, native: NativeBackend) -> None:
        rows = probe_rows(self.forest, n_rows=2048).astype(np.float32)
        err = row_errors(self._outputs(self, rows), self._outputs(native, rows))
        bad = err > TOLERANCE
        if bad.any():
            with_nan = int(np.isnan(rows[bad]).any(axis=1).sum())
            raise ParityError(
                f"hummingbird ({self.strategy}) differs from native {self.forest.described} "
                f"by up to {float(err.max()):.3g} on {int(bad.sum())} of {len(rows)} probe rows "
                f"({with_nan} of them hold NaN: hummingbird ignores the model's missing-value "
                "directions, base_score and float64 thresholds); use backend='tensor', "
                "or verify=False to accept these differences"
            )


def _convert(model: Any, forest: Forest, *, device: torch.device, strategy: str) -> Any:
    try:
        import hummingbird.ml as hb
    except ImportError as exc:
        raise DependencyError("backend='hummingbird' needs hummingbird-ml installed") from exc
    extra = {} if strategy == "auto" else {"tree_implementation": HB_STRATEGIES[strategy]}
    with translated("hummingbird", f"hummingbird cannot convert {forest.described}"):
        converted = hb.convert(model, "torch", extra_config=extra)
    return converted.to(str(device))

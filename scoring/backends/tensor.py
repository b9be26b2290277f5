"""``backend="tensor"``: the product's own compiler, on CPU or CUDA."""

from __future__ import annotations

import numpy as np
import torch

from ..compiler import compile_forest, transform
from ..ir import Forest
from ._outputs import predictions, probabilities, squeeze


class TensorBackend:
    name = "tensor"

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

    def _tensor(self, mat: np.ndarray | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(mat).to(self.device, non_blocking=True)

    @torch.inference_mode()
    def margins(self, mat: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Margins ``[B, K]`` on the device (base score included, before the link)."""
        return self.module(self._tensor(mat))

    def transform(self, margins: torch.Tensor) -> torch.Tensor:
        """Margins -> the model's output space (probabilities, values, scores)."""
        return transform(self.forest, margins)

    @torch.inference_mode()
    def values(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return self.transform(self.margins(mat)).cpu().numpy()

    def predict_raw(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        if self.forest.post_transform == "isolation":  # its raw score: decision_function
            return squeeze(self.values(mat))
        with torch.inference_mode():
            return squeeze(self.margins(mat).cpu().numpy())

    def predict_proba(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return probabilities(self.forest, self.values(mat))

    def predict(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return predictions(self.forest, self.values(mat))

    @torch.inference_mode()
    def predict_leaf(self, mat: np.ndarray | torch.Tensor) -> np.ndarray:
        return self.module.leaf_ids(self._tensor(mat)).cpu().numpy()

"""Chains (scikit-learn's ``RegressorChain``/``ClassifierChain``): one compiled forest per
target, run in the chain's order, each reading the rows and what the ones before it
predicted.

A regressor passes on its prediction; a classifier its predicted label (the class whose
probability is largest, the first on a tie, as ``predict`` picks it) and reports the
probability of its second class, as ``ClassifierChain.predict_proba`` does.  The values
passed on are the chain's float64, read by the next forest in its own input precision,
as scikit-learn's ``hstack`` then the forest's own check convert them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .._ir import Forest
from .transforms import transform

__all__ = ["ChainForest"]


class ChainForest(nn.Module):
    """Rows ``[B, F]`` -> each target's prediction (regressors) or probability of its
    second class (classifiers) ``[B, K]``, in target order."""

    def __init__(self, stages: list[nn.Module], forests: list[Forest], targets: list[int]):
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.forests = forests
        self.targets = targets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((x.shape[0], len(self.targets)), dtype=torch.float64, device=x.device)
        for target, (_, score) in zip(self.targets, self._walk(x), strict=True):
            out[:, target] = score
        return out

    def leaf_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Every stage's leaf ids, stage after stage."""
        walked = zip(self.stages, self._walk(x), strict=True)
        ids = [stage.leaf_ids(features) for stage, (features, _) in walked]  # type: ignore[operator]
        return torch.cat(ids, dim=1)

    def _walk(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per stage: the features it read and what it reports."""
        steps: list[tuple[torch.Tensor, torch.Tensor]] = []
        passed: list[torch.Tensor] = []
        for stage, forest in zip(self.stages, self.forests, strict=True):
            features = torch.cat([x, *(p[:, None].to(x.dtype) for p in passed)], dim=1)
            value = transform(forest, stage(features)).to(torch.float64)
            score, label = _score_and_label(value, forest)
            passed.append(score if label is None else label)
            steps.append((features, score))
        return steps


def _score_and_label(
    value: torch.Tensor, forest: Forest
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A regressor's prediction; a binary classifier's probability of its second class
    and its label (class values as floats)."""
    if forest.task != "binary":
        return value[:, 0], None
    proba = torch.stack([1.0 - value[:, 0], value[:, 0]], 1) if value.shape[1] == 1 else value
    classes = torch.as_tensor(np.asarray(forest.classes, dtype=np.float64), device=value.device)
    return proba[:, 1], classes[proba.argmax(dim=1)]

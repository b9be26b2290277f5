"""Link functions applied to margins, per :attr:`scoring._ir.Forest.post_transform`."""

from __future__ import annotations

import functools

import torch

from .._ir import Forest


def transform(forest: Forest, margin: torch.Tensor) -> torch.Tensor:
    """Margins ``[B, K]`` -> the model's output space (probabilities, values, scores)."""
    kind = forest.post_transform
    if kind == "identity":
        return margin
    if kind in ("sigmoid", "ova_sigmoid"):  # 1.0 * x is x: one op less on one-row calls
        alpha = forest.sigmoid_alpha
        return torch.sigmoid(margin if alpha == 1.0 else alpha * margin)
    if kind == "softmax":
        return torch.softmax(margin, dim=1)
    if kind == "exp":
        return torch.exp(margin)
    if kind == "square":  # LightGBM reg_sqrt: the model was fit on sign(y) * sqrt(|y|)
        return torch.sign(margin) * margin * margin
    if kind == "softplus":  # LightGBM cross_entropy_lambda, as it computes it
        return torch.log1p(torch.exp(margin))
    if kind == "hinge":  # XGBoost binary:hinge: the class, 1.0 where the margin is > 0
        return (margin > 0).to(margin.dtype)
    if kind == "isolation":  # decision_function of IsolationForest
        return -torch.pow(2.0, divided(-margin, forest.isolation_norm)) - forest.isolation_offset
    raise AssertionError(f"unknown post transform {kind}")  # importers only emit the above


def divided(x: torch.Tensor, by: float) -> torch.Tensor:
    """``x / by`` correctly rounded on every device, as numpy divides.  PyTorch on CUDA
    multiplies by the reciprocal of a divisor given as a Python number (one bit off on
    about a quarter of the rows); a divisor that is a tensor on ``x``'s device is
    divided by."""
    return x / _scalar(float(by), x.dtype, x.device)


@functools.lru_cache(maxsize=64)
def _scalar(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    made = torch.full((), value, dtype=dtype, device=device)
    if device.type == "cuda":  # filled on this stream: done before another stream reads it
        torch.cuda.current_stream(device).synchronize()
    return made

"""The per-process cache of compiled models is bounded by count and by device memory."""

from __future__ import annotations

from scoring import Bundle
from scoring._cache import CompiledCache

from .conftest import built


def _bundles() -> list[Bundle]:
    return [Bundle.of(built(name)[0]) for name in ("xgb_clf", "xgb_reg", "lgb_reg")]


def test_least_recently_used_model_goes_past_the_count() -> None:
    first, second, third = _bundles()
    cache = CompiledCache(max_models=2)
    a = cache.get(first, backend="tensor", device="cpu")
    b = cache.get(second, backend="tensor", device="cpu")
    assert cache.get(first, backend="tensor", device="cpu") is a  # compiled once: a hit
    cache.get(third, backend="tensor", device="cpu")  # second is now the oldest
    assert len(cache) == 2
    assert cache.get(first, backend="tensor", device="cpu") is a
    assert cache.get(second, backend="tensor", device="cpu") is not b  # compiled again


def test_models_past_the_memory_budget_go_oldest_first() -> None:
    first, second, _ = _bundles()
    one = CompiledCache(max_bytes=0).get(first, backend="tensor", device="cpu")
    assert one.device_bytes() > 0
    cache = CompiledCache(max_bytes=one.device_bytes())
    a = cache.get(first, backend="tensor", device="cpu")
    cache.get(second, backend="tensor", device="cpu")  # both together exceed the budget
    assert len(cache) == 1
    assert cache.get(first, backend="tensor", device="cpu") is not a
    native = CompiledCache(max_bytes=0)  # native predictors hold no device tensors
    native.get(first, backend="native")
    native.get(second, backend="native")
    assert len(native) == 2

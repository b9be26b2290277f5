"""The gate verifies what runs: a version is verified on every strategy ``auto`` may
pick (``fused`` on CPU included, which the report found missing: versions were verified
on perfect_tree_traversal and every job ran tensor/fused), a run whose choice its record
does not cover verifies that choice first and records it, a choice that fails is
refused, and the report names the verified choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring import _model
from scoring._catalog import ensure_verified
from scoring._model import compile_model
from scoring.errors import VerificationError

FEATURES = [f"f{i}" for i in range(6)]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A registry holding a forest large enough for ``fused`` (``auto``'s CPU candidate)."""
    import xgboost

    root = tmp_path_factory.mktemp("verified")
    rng = np.random.default_rng(7)
    X = pd.DataFrame(rng.normal(size=(3000, 6)), columns=FEATURES)
    y = (np.sin(3 * X.f0) + X.f1 * X.f2 - X.f3**2 + rng.normal(scale=0.3, size=3000)) > 0
    model = xgboost.XGBClassifier(n_estimators=150, max_depth=7).fit(X, y)
    scoring.Registry(root / "reg").register("churn", model, sample=X.iloc[:400])
    X.assign(id=np.arange(len(X))).to_parquet(root / "in.parquet")
    return root, X


def test_registration_verifies_fused_where_auto_times_it(stored: tuple[Path, Any]) -> None:
    root, _ = stored
    mv = scoring.Registry(root / "reg").get("churn@1")
    assert "fused" in mv.verification["cpu"].strategies and mv.verification["cpu"].passed


def _without(reg: scoring.Registry, strategy: str) -> None:
    """The version's record as an earlier release left it: ``strategy`` never verified."""
    mv = reg.get("churn@1")
    cpu = mv.verification["cpu"]
    kept = [s for s in cpu.strategies if s != strategy] or ["tree_traversal"]
    fresh = {"strategies": kept, "passed": True, "detail": "", "max_error": 0.0}
    reg.record_verification(mv, {"cpu": cpu.model_copy(update=fresh)})


def test_a_run_verifies_an_unverified_choice_first_and_names_it(
    stored: tuple[Path, Any], tmp_path: Path
) -> None:
    root, _ = stored
    reg = scoring.Registry(root / "reg")
    runs = compile_model(reg.bundle("churn@1"), backend="tensor", device="cpu")
    _without(reg, str(runs.strategy))
    report = scoring.score_parquet(root / "in.parquet", tmp_path / "out", "churn@1",
                                   registry=root / "reg", backend="tensor", keep=["id"],
                                   progress=False)  # fmt: skip
    assert report.strategy == runs.strategy
    assert report.verified.startswith(f"tensor/{runs.strategy} on cpu: verified")
    assert runs.strategy in reg.get("churn@1").verification["cpu"].strategies


def test_ensure_verified_records_fused_beside_the_rest(stored: tuple[Path, Any]) -> None:
    root, _ = stored
    reg = scoring.Registry(root / "reg")
    _without(reg, "fused")
    bundle = reg.bundle("churn@1")
    before = reg.get("churn@1").verification["cpu"].strategies
    said = ensure_verified(reg, bundle, compile_model(bundle, backend="tensor", strategy="fused",
                                                      device="cpu"))  # fmt: skip
    assert said.startswith("tensor/fused on cpu: verified")
    after = reg.get("churn@1").verification["cpu"]
    assert set(after.strategies) == {*before, "fused"} and after.passed


def test_a_choice_that_fails_parity_is_refused_and_writes_nothing(
    stored: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scoring._parity import verify

    root, _ = stored
    reg = scoring.Registry(root / "reg")
    runs = compile_model(reg.bundle("churn@1"), backend="tensor", device="cpu")
    _without(reg, str(runs.strategy))

    def broken(*args: Any, **kwargs: Any) -> Any:  # the candidate disagrees with native
        found = verify(*args, **kwargs)
        return {d: v.model_copy(update={"passed": False, "max_error": 0.5})
                for d, v in found.items()}  # fmt: skip

    monkeypatch.setattr(_model, "verify", broken)
    with pytest.raises(VerificationError, match=r"churn@1 fails parity on cpu.*backend='native'"):
        scoring.score_parquet(root / "in.parquet", tmp_path / "out", "churn@1",
                              registry=root / "reg", backend="tensor", progress=False)  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_native_backend_is_its_own_reference(stored: tuple[Path, Any], tmp_path: Path) -> None:
    root, _ = stored
    report = scoring.score_parquet(root / "in.parquet", tmp_path / "out", "churn@1",
                                   registry=root / "reg", backend="native",
                                   progress=False)  # fmt: skip
    assert report.verified == "native on cpu: the framework's own predictor"


def test_a_worker_holds_a_choice_its_record_lacks_to_native_first(
    stored: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray actors and Spark workers compile through the process cache: a stored version's
    payload names what its record verified, and a worker's other choice is checked there
    (passing: remembered; failing: refused)."""
    from scoring._cache import CompiledCache
    from scoring._parity import verify

    root, _ = stored
    reg = scoring.Registry(root / "reg")
    runs = compile_model(reg.bundle("churn@1"), backend="tensor", device="cpu")
    _without(reg, str(runs.strategy))
    bundle = reg.bundle("churn@1")
    assert runs.strategy not in bundle.manifest["verified"]["cpu"]
    CompiledCache().get(bundle, device="cpu", backend="tensor")
    assert runs.strategy in bundle.manifest["verified"]["cpu"]

    def broken(*args: Any, **kwargs: Any) -> Any:
        found = verify(*args, **kwargs)
        return {d: v.model_copy(update={"passed": False, "max_error": 0.5})
                for d, v in found.items()}  # fmt: skip

    monkeypatch.setattr(_model, "verify", broken)
    with pytest.raises(VerificationError, match=r"this worker's cpu.*backend='native'"):
        CompiledCache().get(reg.bundle("churn@1"), device="cpu", backend="tensor")
    # A payload of a model that no registry stored carries no record: nothing to hold.
    CompiledCache().get(scoring._bundle.Bundle.of(reg.load("churn@1", backend="native")._source),
                        device="cpu", backend="tensor")  # fmt: skip

"""Every filesystem failure on the compile cache, the registry, the staging and the
outputs gives a typed one-line error naming the path and the fix (the report: an
unwritable compile cache gave a raw PermissionError, and ``auto`` fell back to native
without saying why).

The failures are made the way they happen to a user: a path that is a file where a
folder is needed (every user, root included, gets ENOTDIR), and a disk that fills up
(ENOSPC, raised by the writes of the folder in question).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring.errors import CompileError, OutputError, RegistryAccessError, ScoringError

KERNEL = """
import sys, numpy as np, xgboost, scoring
X = np.random.default_rng(0).normal(size=(300, 4))
m = xgboost.XGBRegressor(n_estimators=300, max_depth=6).fit(X, X[:, 0])
try:
    cm = scoring.compile(m, device="cpu", backend=sys.argv[1], strategy=sys.argv[2])
except scoring.errors.ScoringError as exc:
    print("error", type(exc).__name__, exc)
else:
    print("compiled", cm.backend, cm.strategy_reason)
"""


def _kernel(tmp: Path, backend: str, strategy: str) -> str:
    blocker = tmp / "a-file"
    blocker.write_text("")
    env = {**os.environ, "SCORING_COMPILE_CACHE": str(blocker / "cache")}
    done = subprocess.run([sys.executable, "-c", KERNEL, backend, strategy], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_an_unwritable_compile_cache_is_a_compile_error_naming_it(tmp_path: Path) -> None:
    said = _kernel(tmp_path, "tensor", "fused")
    assert said.startswith("error CompileError"), said
    assert str(tmp_path / "a-file" / "cache") in said and "SCORING_COMPILE_CACHE" in said


def test_auto_says_why_it_runs_native_when_the_kernel_cannot_be_built(tmp_path: Path) -> None:
    said = _kernel(tmp_path, "auto", "auto")
    assert said.startswith("compiled native"), said
    assert "SCORING_COMPILE_CACHE" in said and str(tmp_path / "a-file") in said


def _model() -> Any:
    import xgboost

    X = pd.DataFrame({"a": np.arange(40.0), "b": np.arange(40.0) % 3})
    return xgboost.XGBRegressor(n_estimators=3).fit(X, X.a), X


def test_a_registry_root_that_is_a_file(tmp_path: Path) -> None:
    model, X = _model()
    (tmp_path / "reg").write_text("")
    with pytest.raises(ScoringError) as caught:
        scoring.Registry(tmp_path / "reg").register("m", model, sample=X)
    assert str(tmp_path / "reg") in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("where", ["output is a file", "output's parent is a file"])
def test_an_output_that_cannot_be_a_folder(tmp_path: Path, where: str) -> None:
    model, X = _model()
    X.to_parquet(tmp_path / "in.parquet")
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    out = blocker if where == "output is a file" else blocker / "out"
    with pytest.raises(OutputError) as caught:
        scoring.score_parquet(tmp_path / "in.parquet", out, model, progress=False)
    assert str(blocker) in str(caught.value) and "\n" not in str(caught.value)
    assert blocker.read_text() == ""


#: The failures a folder gives that root (these tests' user) cannot be made to meet:
#: raised by the writes of the folder in question.
FAILURES = [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT]


@pytest.mark.parametrize("code", FAILURES, ids=errno.errorcode.get)
def test_a_failing_disk_while_staging_names_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    from scoring._journal.journal import Journal

    model, X = _model()
    X.to_parquet(tmp_path / "in.parquet")

    def failing(self: Journal, fragment: Any) -> Any:
        raise OSError(code, os.strerror(code), f"{self.staging}/x.parquet")

    monkeypatch.setattr(Journal, "open", failing)
    with pytest.raises(OutputError) as caught:
        scoring.score_parquet(tmp_path / "in.parquet", tmp_path / "out", model, progress=False)
    said = str(caught.value)
    assert os.strerror(code) in said and str(tmp_path / "out") in said, said
    assert "\n" not in said


@pytest.mark.parametrize("code", FAILURES, ids=errno.errorcode.get)
def test_a_failing_disk_in_the_registry_names_its_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    from fsspec.implementations.local import LocalFileSystem

    model, X = _model()

    def failing(self: Any, path: str, value: bytes, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(LocalFileSystem, "pipe_file", failing)
    with pytest.raises(RegistryAccessError) as caught:
        scoring.Registry(tmp_path / "reg").register("m", model, sample=X)
    assert str(tmp_path / "reg") in str(caught.value)


def test_compile_errors_stay_one_class() -> None:
    assert issubclass(CompileError, ScoringError)

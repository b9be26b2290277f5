"""One error class per cause, and every library's error shown by its first meaningful
line.

- The translation table maps no library exception to two of our classes.
- A package that is not installed is a :class:`DependencyError` wherever it is needed
  (the report: deltalake missing was an InputError for a Delta input and a
  DependencyError for a Delta output), and the job runner does not retry it.
- A library message with a backtrace appended (delta-rs under ``RUST_BACKTRACE``, a
  Python traceback in a server's reply, Java frames) is shown by its reason, never by
  a frame.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import scoring
from scoring import errors
from scoring.errors import TRANSLATIONS, DependencyError, cause_line


def test_no_library_exception_maps_to_two_classes() -> None:
    """... but reading an input and writing an output: the same failure of a store."""
    seen: dict[str, set[type]] = defaultdict(set)
    for table in TRANSLATIONS.values():
        for name, ours in table.items():
            seen[name].add(ours)
    io = {errors.InputFileError, errors.OutputError}
    assert {n: c for n, c in seen.items() if len(c) > 1 and c != io} == {}


def _delta_input(tmp: Path) -> Any:
    (tmp / "t" / "_delta_log").mkdir(parents=True)
    return scoring.score_parquet(str(tmp / "t"), str(tmp / "o"), str(_model(tmp)))


def _delta_output(tmp: Path) -> Any:
    pd.DataFrame({"a": [1.0]}).to_parquet(tmp / "in.parquet")
    return scoring.score_parquet(str(tmp / "in.parquet"), f"delta:{tmp / 'o'}", str(_model(tmp)))


def _model(tmp: Path) -> Path:
    import xgboost

    X = pd.DataFrame({"a": np.arange(20.0)})
    path = tmp / "m.json"
    xgboost.XGBRegressor(n_estimators=2).fit(X, X.a).save_model(path)
    return path


def _mlflow_in(tmp: Path) -> Any:
    return scoring.compile("models:/churn@champion")


def _mlflow_out(tmp: Path) -> Any:
    from scoring.mlflow import export_model

    reg = scoring.Registry(tmp / "reg")
    import xgboost

    X = pd.DataFrame({"a": np.arange(20.0)})
    reg.register("m", xgboost.XGBRegressor(n_estimators=2).fit(X, X.a), sample=X)
    return export_model("m@1", registry=reg)


def _hummingbird(tmp: Path) -> Any:
    import xgboost

    X = pd.DataFrame({"a": np.arange(20.0)})
    return scoring.compile(xgboost.XGBRegressor(n_estimators=2).fit(X, X.a), backend="hummingbird")


def _registry_scheme(tmp: Path) -> Any:
    return scoring.Registry("gcs://bucket/registry", db_url=f"sqlite:///{tmp}/r.db").list()


#: (the package made missing, what needs it)
MISSING = [
    ("deltalake", _delta_input),
    ("deltalake", _delta_output),
    ("mlflow", _mlflow_in),
    ("mlflow", _mlflow_out),
    ("hummingbird", _hummingbird),
    ("gcsfs", _registry_scheme),
]


@pytest.mark.parametrize(("package", "use"), MISSING, ids=lambda v: getattr(v, "__name__", v))
def test_a_missing_package_is_a_dependency_error_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, use: Any
) -> None:
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)  # its import raises ImportError
    with pytest.raises(DependencyError) as caught:
        use(tmp_path)
    assert "\n" not in str(caught.value)


def test_the_job_runner_does_not_retry_a_missing_package() -> None:
    from scoring.jobs._runner import _PERMANENT

    assert issubclass(DependencyError, _PERMANENT)


RUST = (
    "Kernel error: Json error: Truncated record whilst reading string\n   0: <unknown>\n"
    "   1: <unknown>\n  12: start_thread\n             at ./nptl/pthread_create.c:442:8\n"
    "  13: clone3\n             at ./misc/../sysdeps/unix/sysv/linux/x86_64/clone3.S:81:0\n"
)
PYTHON = (
    "INTERNAL_ERROR: model not found\nTraceback (most recent call last):\n"
    '  File "/srv/mlflow/server.py", line 3, in handler\n    raise X\nKeyError: 3\n'
)
JAVA = (
    "An error occurred while calling o42.load.\n: java.io.FileNotFoundException: no file\n"
    "\tat org.apache.hadoop.fs.Path.open(Path.java:12)\n\tat java.base/Thread.run\n"
)


@pytest.mark.parametrize(("message", "reason"), [
    (RUST, "Kernel error: Json error: Truncated record whilst reading string"),
    ("Generic error\nstack backtrace:\n   0: deltalake::open\n", "Generic error"),
    (PYTHON, "KeyError: 3"),  # the exception a traceback ends with
    ("[10:42:01] src/learner.cc:9: Check failed: n_features\nStack trace:\n"
     "  [bt] (0) /usr/lib/libxgboost.so(+0x1a2b) [0x7f]\n  [bt] (1) /usr/lib/libxgboost.so\n",
     "[10:42:01] src/learner.cc:9: Check failed: n_features"),
    (JAVA, ": java.io.FileNotFoundException: no file"),
])  # fmt: skip
def test_a_backtrace_is_never_the_line_shown(message: str, reason: str) -> None:
    assert cause_line(Exception(message)) == reason
    first = cause_line(Exception(message), first_line=True)
    assert first and first in message.splitlines()[0]  # XGBoost's log stamp dropped
    assert not any(frame in cause_line(Exception(message)) for frame in ("File ", "\tat "))


def test_a_damaged_delta_log_names_its_file_and_the_older_versions(tmp_path: Path) -> None:
    """The report: with RUST_BACKTRACE set the message was a backtrace frame."""
    deltalake = pytest.importorskip("deltalake")
    table = tmp_path / "t"
    deltalake.write_deltalake(str(table), pd.DataFrame({"a": [1.0, 2.0]}))
    deltalake.write_deltalake(str(table), pd.DataFrame({"a": [3.0]}), mode="append")
    commit = table / "_delta_log" / f"{1:020d}.json"
    commit.write_text(commit.read_text()[:40])
    model = _model(tmp_path)
    env = {"RUST_BACKTRACE": "1", "PYTHONFAULTHANDLER": "1"}
    import os

    done = subprocess.run(
        [str(Path(sys.executable).parent / "scoring"), "score", "--model", str(model), "--input",
         str(table), "--output", str(tmp_path / "o")],
        capture_output=True, text=True, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()
    assert len(said) == 1, done.stderr
    assert f"{1:020d}.json" in said[0] and "--input-version 0" in said[0], said[0]
    assert "clone3" not in said[0] and "<unknown>" not in said[0]


def test_error_classes_are_one_tree() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ScoringError)

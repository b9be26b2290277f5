"""The public surface and the error boundaries: exactly the intended names, and every
third-party exception in ``scoring.errors.TRANSLATIONS`` raised through its boundary."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scoring
from scoring import errors
from scoring._formats.dataset import open_input
from scoring._frameworks import restore_model
from scoring.errors import TRANSLATIONS, ScoringError, translated

from .conftest import built

PUBLIC = {
    "scoring": {"Bundle", "CompiledModel", "Input", "ModelVersion", "Output", "Registry",
                "RunOptions", "ScoreReport",
                "ScoringError", "__version__", "compile", "errors", "score_parquet"},
    "scoring.ray": {"WorkerPlan", "connect", "plan_workers", "score_dataset"},
    "scoring.mlflow": {"export_model", "is_mlflow_ref", "load_mlflow_model"},
    "scoring.spark": {"UDF_OUTPUTS", "local_session", "make_predict_fn", "register_udf",
                      "score_dataframe", "tune_session"},
    "scoring.jobs": {"EXIT_CHECKS", "EXIT_FAILED", "EXIT_INFEASIBLE", "EXIT_INPUT",
                     "EXIT_LATE", "EXIT_OK", "EXIT_USAGE", "REPORT_HTML", "REPORT_JSON",
                     "JobOutcome", "JobSpec", "Plan", "describe_trend", "load_job", "make_plan",
                     "run_job", "trend"},
}  # fmt: skip
#: What a user may import; every other module is ``_private`` (``scoring.cli`` is the
#: command's entry point, ``scoring.cli:app``; ``scoring.recipes`` the reference models
#: the demo, tests and benchmarks build).
PUBLIC_MODULES = {"errors", "jobs", "ray", "spark", "mlflow", "cli", "recipes"}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_exactly_the_intended_ones(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]
    public = {n for n in vars(module) if not n.startswith("_")}
    allowed = set(module.__all__) | {"annotations"}
    if package == "scoring":
        allowed |= PUBLIC_MODULES  # imported on first use
    leaked = public - allowed
    assert not leaked, f"{package} exposes {sorted(leaked)} beyond __all__"
    for name in module.__all__:
        assert hasattr(module, name)


def test_modules_that_are_not_public_are_private() -> None:
    exposed = []
    for info in pkgutil.walk_packages(scoring.__path__, "scoring."):
        parts = info.name.split(".")[1:]
        if parts[0] in PUBLIC_MODULES and len(parts) == 1:
            continue  # a public package or module itself
        if not any(p.startswith("_") for p in parts):
            exposed.append(info.name)
    assert not exposed, f"modules outside the public surface without a leading _: {exposed}"


def test_every_error_is_a_scoring_error() -> None:
    for name in errors.__all__:
        kind = getattr(errors, name)
        assert isinstance(kind, type) and issubclass(kind, ScoringError), name


# -- one trigger per table entry, through the boundary that translates it ---------------


def _model_file(suffix: str, data: bytes) -> Callable[[Path], object]:
    def trigger(tmp: Path) -> object:
        path = tmp / f"model{suffix}"
        path.write_bytes(data)
        return scoring.compile(path)

    return trigger


def _parquet_corrupt(tmp: Path) -> object:
    (tmp / "in").mkdir()
    (tmp / "in" / "part-0.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    return open_input(str(tmp / "in"))


def _parquet_gone(tmp: Path) -> object:
    (tmp / "in").mkdir()
    pq.write_table(pa.table({"x": np.arange(10.0)}), tmp / "in" / "part-0.parquet")
    data = open_input(str(tmp / "in"))
    (tmp / "in" / "part-0.parquet").unlink()  # removed after listing, before reading
    return list(data.batches(data.fragments[0], columns=["x"], batch_rows=5))


def _database(url: str) -> Callable[[Path], object]:
    return lambda tmp: scoring.Registry(tmp / "reg", db_url=url)


def _database_corrupt(tmp: Path) -> object:
    scoring.Registry(tmp / "reg")
    (tmp / "reg" / "registry.db").write_bytes(b"\x00garbage" * 400)  # not SQLite any more
    return scoring.Registry(tmp / "reg")


def _raised_in(boundary: str, error: Callable[[], BaseException]) -> Callable[[Path], object]:
    """For the cluster engines: the library's own exception, raised where the engine
    runs its job (a real failure needs a cluster that fails on demand)."""

    def trigger(tmp: Path) -> object:
        with translated(boundary, f"the {boundary} job failed"):
            raise error()

    return trigger


def _ray_error() -> BaseException:
    import ray.exceptions

    return ray.exceptions.RayError("actor died")


def _py4j_error() -> BaseException:
    from py4j.protocol import Py4JError

    return Py4JError("An error occurred while calling o42.parquet")


def _spark_error() -> BaseException:
    from pyspark.errors.exceptions.base import PySparkException

    return PySparkException(message="[PYTHON_EXCEPTION] a worker failed")


def _no_cxx_compiler(tmp: Path) -> object:
    """A machine without a C++ compiler, and nothing compiled before: inductor fails."""
    import torch._inductor.config as inductor

    missing = {"cpp.cxx": (str(tmp / "no-such-compiler"),)}
    with pytest.MonkeyPatch.context() as env, inductor.patch(missing):
        env.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
        cm = scoring.compile(built("xgb_clf")[0], backend="tensor", strategy="compiled")
        return cm.predict(np.zeros((2, 6)))


def _sqlalchemy_error() -> BaseException:
    from sqlalchemy.exc import OperationalError

    return OperationalError("SELECT 1", {}, Exception("database is locked"))


#: Raised inside a table's boundary (``test_error_sites.py`` raises them at every call
#: site of the product's into the libraries, through the command).
TABLE_ERRORS: dict[str, Callable[[], BaseException]] = {
    "deltalake.exceptions.DeltaError":
        lambda: __import__("deltalake.exceptions").exceptions.DeltaError("Generic error"),
    "pyiceberg.exceptions.*":
        lambda: __import__("pyiceberg.exceptions").exceptions.CommitFailedException("lost"),
    "sqlalchemy.exc.SQLAlchemyError": _sqlalchemy_error,
    "pyarrow.lib.ArrowException": lambda: pa.ArrowInvalid("Parquet magic bytes not found"),
    "builtins.OSError": lambda: PermissionError(13, "Permission denied", "/lake/t"),
}  # fmt: skip


TRIGGERS: dict[tuple[str, str], tuple[Callable[[Path], object], type[ScoringError]]] = {
    ("model file", "xgboost.core.XGBoostError"):
        (_model_file(".json", b"{not json"), errors.ModelFileError),
    ("model file", "lightgbm.basic.LightGBMError"):  # a file this short is refused sooner
        (lambda tmp: restore_model("lightgbm", b"not a model\n", kind="lightgbm.Booster",
                                   classes=None), errors.ModelFileError),
    ("model file", "zipfile.BadZipFile"):
        (_model_file(".skops", b"not a zip archive"), errors.ModelFileError),
    ("model file", "builtins.UnicodeDecodeError"):
        (lambda tmp: restore_model("lightgbm", b"\xff\xfe\x00", kind="lightgbm.Booster",
                                   classes=None), errors.ModelFileError),
    ("fitted model", "sklearn.exceptions.NotFittedError"):
        (lambda tmp: scoring.compile(__import__("sklearn.ensemble").ensemble
                                     .RandomForestClassifier()), errors.UnsupportedModelError),
    ("fitted model", "builtins.TypeError"):
        (lambda tmp: scoring.compile(__import__("sklearn.utils").utils.Bunch()),
         errors.UnsupportedModelError),
    ("torch.compile", "torch._dynamo.exc.TorchDynamoException"):
        (_no_cxx_compiler, errors.CompileError),
    ("hummingbird", "builtins.ValueError"):
        (lambda tmp: scoring.compile(built("xgb_reg")[0], backend="hummingbird"),
         errors.UnsupportedModelError),
    ("parquet", "pyarrow.lib.ArrowException"): (_parquet_corrupt, errors.InputFileError),
    ("parquet", "builtins.OSError"): (_parquet_gone, errors.InputFileError),
    ("registry database", "sqlalchemy.exc.ArgumentError"):
        (_database("not a database url"), errors.RegistryAccessError),
    ("registry database", "builtins.ImportError"):
        (_database("mysql://localhost/registry"), errors.DependencyError),
    ("registry database", "sqlalchemy.exc.DatabaseError"):
        (_database_corrupt, errors.RegistryAccessError),
    ("ray", "ray.exceptions.RayError"): (_raised_in("ray", _ray_error), errors.EngineError),
    ("spark", "py4j.protocol.Py4JError"): (_raised_in("spark", _py4j_error), errors.EngineError),
    ("spark", "pyspark.errors.exceptions.base.PySparkException"):
        (_raised_in("spark", _spark_error), errors.EngineError),
    **{(boundary, name): (_raised_in(boundary, error), ours)
       for boundary, ours in (("table read", errors.InputFileError),
                              ("table write", errors.OutputError))
       for name, error in TABLE_ERRORS.items()},
}  # fmt: skip


def test_every_table_entry_has_a_trigger() -> None:
    table = {(b, name) for b, names in TRANSLATIONS.items() for name in names}
    assert table == set(TRIGGERS)


@pytest.mark.parametrize("entry", sorted(TRIGGERS), ids=lambda e: f"{e[0]}:{e[1]}")
def test_boundary_translates(entry: tuple[str, str], tmp_path: Path) -> None:
    boundary, name = entry
    trigger, expected = TRIGGERS[entry]
    assert TRANSLATIONS[boundary][name] is expected
    with pytest.raises(expected) as caught:
        trigger(tmp_path)
    cause = caught.value.__cause__
    assert cause is not None, "translated errors keep the library's error as their cause"
    module, _, attr = name.rpartition(".")
    if attr == "*":  # every exception class the module defines
        assert type(cause).__module__ == module
    else:
        assert isinstance(cause, getattr(importlib.import_module(module), attr))


@pytest.mark.parametrize("order", ["general first", "specific first"])
def test_the_most_specific_entry_wins_whatever_the_order(
    order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = {"builtins.OSError": errors.InputFileError,
               "builtins.FileNotFoundError": errors.DependencyError}  # fmt: skip
    if order == "specific first":
        entries = dict(reversed(entries.items()))
    monkeypatch.setitem(TRANSLATIONS, "test boundary", entries)
    with (
        pytest.raises(errors.DependencyError, match=r"^reading x: gone$"),
        translated("test boundary", "reading x"),
    ):
        raise FileNotFoundError("gone")
    with (
        pytest.raises(errors.InputFileError, match=r"^reading x: denied$"),  # an OSError
        translated("test boundary", "reading x"),
    ):
        raise PermissionError("denied")

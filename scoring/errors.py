"""The product's one exception tree.

Every error the package raises on purpose derives from :class:`ScoringError`; errors
from the frameworks underneath are translated at the boundary into one of these, with
a message that names the culprit (column, file, value, model kind) and the fix.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = [
    "ScoringError",
    "ConfigError",
    "UnsupportedModelError",
    "ModelFileError",
    "UntrustedModelError",
    "InputError",
    "FeatureCountError",
    "MissingColumnError",
    "NonNumericColumnError",
    "InvalidValueError",
    "InputFileError",
    "FilterError",
    "OutputError",
    "CompileError",
    "ResourceLimitError",
    "ParityError",
    "DependencyError",
    "RegistryError",
    "ModelNotFoundError",
    "IntegrityError",
    "VerificationError",
    "RegistryAccessError",
    "JobFileError",
    "DeadlineError",
    "DriftError",
    "EngineError",
]


class ScoringError(Exception):
    """Base class of every error raised by the scoring package."""


class ConfigError(ScoringError, ValueError):
    """A wrong option, engine, backend, device or job setting: a rerun cannot fix it."""


class UnsupportedModelError(ScoringError, TypeError):
    """The model (or a part of it: objective, linear trees, ...) cannot be compiled."""


class ModelFileError(ScoringError, ValueError):
    """A model file is missing, unreadable or of an unknown format."""


class UntrustedModelError(ScoringError):
    """Loading the model would unpickle bytes the caller has not marked as trusted."""


class InputError(ScoringError, ValueError):
    """The rows given for scoring do not fit the model."""


class FeatureCountError(InputError):
    """An unnamed input has the wrong number of feature columns."""


class MissingColumnError(InputError):
    """Feature columns the model needs are absent from a named input."""


class NonNumericColumnError(InputError):
    """A feature column holds values that cannot be read as numbers or categories."""


class InvalidValueError(InputError):
    """Values the native predictor rejects (NaN, inf), which we refuse as it does."""


class InputFileError(InputError):
    """An input file or dataset is missing, unreadable or corrupt."""


class FilterError(InputError):
    """A row filter that cannot keep exactly the rows Spark SQL keeps on this input (a
    construct it does not take, or types it does not compare), refused before a row is
    read; or one whose evaluation fails as Spark's would (ANSI: an overflow, a division
    by zero)."""


class OutputError(ScoringError):
    """The output location cannot take this run (foreign files, another completed run)."""


class CompileError(ScoringError):
    """A model could not be compiled with the requested backend or strategy."""


class ResourceLimitError(CompileError):
    """A strategy would need more memory than its limit allows."""


class ParityError(CompileError):
    """A compiled model disagrees with the framework's own predictor."""


class DependencyError(ScoringError, ImportError):
    """An optional dependency needed for the requested feature is not installed."""


class RegistryError(ScoringError):
    """A registry operation was refused (bad name, alias in use, ...)."""


class ModelNotFoundError(RegistryError, LookupError):
    """No model, version or alias of that name exists in the registry."""


class IntegrityError(RegistryError):
    """Stored model bytes no longer match the sha256 recorded when they were registered."""


class VerificationError(RegistryError):
    """A version whose parity verification failed cannot be promoted without force=True."""


class RegistryAccessError(RegistryError, OSError):
    """The registry root or database cannot be reached or written."""


class JobFileError(ConfigError):
    """A job file is unreadable, not TOML, or has a wrong key or value (named)."""


class DeadlineError(ScoringError):
    """The plan says the job cannot finish before its deadline."""


class DriftError(ScoringError):
    """A job's checks failed (drift, null rate, row count) and it says to stop on that:
    nothing is published."""


class EngineError(ScoringError):
    """A Ray or Spark job failed for a reason of its own (a lost worker, a cluster error)."""


# -- third-party errors at each boundary ------------------------------------------------

#: What a table's translated failure says to do (a store or a catalog that did not answer).
READ_FIX = "check that it and its storage can be read from here, then rerun"
WRITE_FIX = "check that it and its storage can be written from here, then rerun"

#: Per boundary: the exceptions the libraries there raise, by their defining module and
#: name (the libraries are imported only where they are used), and the error of ours
#: each one becomes.  ``translated(boundary, ...)`` applies it; tests raise every entry.
TRANSLATIONS: dict[str, dict[str, type[ScoringError]]] = {
    "model file": {
        "xgboost.core.XGBoostError": ModelFileError,
        "lightgbm.basic.LightGBMError": ModelFileError,
        "zipfile.BadZipFile": ModelFileError,  # skops files are zip archives
        "builtins.UnicodeDecodeError": ModelFileError,  # LightGBM model text
    },
    "fitted model": {
        "sklearn.exceptions.NotFittedError": UnsupportedModelError,
        "builtins.TypeError": UnsupportedModelError,  # not an estimator at all
    },
    "torch.compile": {
        # BackendCompilerFailed, InductorError (no C++ compiler, ...) and Dynamo's own
        "torch._dynamo.exc.TorchDynamoException": CompileError,
    },
    "hummingbird": {
        "builtins.ValueError": UnsupportedModelError,  # e.g. XGBoost 3's base_score format
    },
    "parquet": {
        "pyarrow.lib.ArrowException": InputFileError,
        "builtins.OSError": InputFileError,  # fsspec reports I/O as OSError
    },
    "registry database": {
        "sqlalchemy.exc.ArgumentError": RegistryAccessError,
        "sqlalchemy.exc.DatabaseError": RegistryAccessError,  # unreachable, locked, corrupt
        "builtins.ImportError": DependencyError,  # its driver is not installed
    },
    "ray": {
        "ray.exceptions.RayError": EngineError,
    },
    "spark": {
        "py4j.protocol.Py4JError": EngineError,
        "pyspark.errors.exceptions.base.PySparkException": EngineError,
    },
    # A Delta or Iceberg table, its catalog and its files, as an input reads them ...
    "table read": {
        "deltalake.exceptions.DeltaError": InputFileError,
        "pyiceberg.exceptions.*": InputFileError,  # each exception class it defines
        "sqlalchemy.exc.SQLAlchemyError": InputFileError,  # an SQL catalog's database
        "pyarrow.lib.ArrowException": InputFileError,
        "builtins.OSError": InputFileError,
    },
    # ... and as an output writes them (a folder's Parquet files too).
    "table write": {
        "deltalake.exceptions.DeltaError": OutputError,
        "pyiceberg.exceptions.*": OutputError,
        "sqlalchemy.exc.SQLAlchemyError": OutputError,
        "pyarrow.lib.ArrowException": OutputError,
        "builtins.OSError": OutputError,
    },
}


def _resolved(boundary: str) -> dict[type[BaseException], type[ScoringError]]:
    """The boundary's exception classes whose libraries are loaded (one that is not
    cannot have raised anything)."""
    found = {}
    for name, ours in TRANSLATIONS[boundary].items():
        module, _, attr = name.rpartition(".")
        for kind in _classes(sys.modules.get(module), attr):
            found[kind] = ours
    return found


def _classes(module: object, attr: str) -> list[type[BaseException]]:
    """The exception class ``attr`` of ``module``, or with ``*`` every one it defines."""
    if module is None:
        return []
    named = vars(module).values() if attr == "*" else [getattr(module, attr, None)]
    return [
        kind for kind in named
        if isinstance(kind, type) and issubclass(kind, BaseException)
        and (attr != "*" or kind.__module__ == getattr(module, "__name__", None))
    ]  # fmt: skip


def file_key_problem(exc: Any, *, loc: list[Any] | None = None) -> tuple[str, str]:
    """The first problem pydantic found in a file's keys (``exc``, a ValidationError):
    the key, dotted (``loc`` in place of its own), and why ("unknown key" for a key the
    schema does not have)."""
    first = exc.errors()[0]
    key = ".".join(str(p) for p in (first["loc"] if loc is None else loc)) or "(top level)"
    return key, "unknown key" if first["type"] == "extra_forbidden" else first["msg"]


def debugging() -> bool:
    """``--debug`` or ``SCORING_DEBUG=1``: tracebacks and the libraries' own error output
    are shown rather than the product's one line."""
    return os.environ.get("SCORING_DEBUG", "") not in ("", "0")


def cause_line(exc: BaseException, *, first_line: bool = False) -> str:
    """The innermost cause's last (or first) meaningful line: wrappers end theirs with
    advice on debug variables (torch.compile keeps the cause in ``inner_exception``).  A
    backtrace a library appends (delta-rs with ``RUST_BACKTRACE``, a Python traceback
    in a server's reply) is never that line."""
    inner = exc.__cause__ or getattr(exc, "inner_exception", None)
    while isinstance(inner, BaseException):
        exc = inner
        inner = exc.__cause__ or getattr(exc, "inner_exception", None)
    if isinstance(exc, OSError) and exc.strerror:  # as the command says one: no errno
        return f"{exc.strerror} ({exc.filename})" if exc.filename else str(exc.strerror)
    detail = _meaningful(str(exc))
    if not detail:
        return type(exc).__name__
    # XGBoost's first line is its reason behind a log stamp: "[10:42:01] src/json.cc:9: ".
    return _LOG_STAMP.sub("", detail[0]) if first_line else detail[-1]


def _meaningful(message: str) -> list[str]:
    """The lines of ``message`` that say something: a native backtrace (Rust's, XGBoost's)
    ends them; a Python traceback's frames and Java's ``at`` lines are passed over (the
    exception line after a Python traceback is its reason)."""
    lines, in_frame = [], False
    for line in message.strip().splitlines():
        if _NATIVE_BACKTRACE.match(line):
            break
        if _PYTHON_FRAME.match(line):
            in_frame = True  # its source and caret lines follow, indented further
            continue
        if (in_frame and line.startswith("    ")) or _SKIPPED.match(line):
            continue
        in_frame = False
        if line.strip():
            lines.append(line.strip())
    return lines


_LOG_STAMP = re.compile(r"^\[[\d:]+\] \S+: ")
#: Where a native backtrace begins: Rust's (``RUST_BACKTRACE``: "stack backtrace:" or its
#: first numbered frame), XGBoost's ("Stack trace:").
_NATIVE_BACKTRACE = re.compile(
    r"^\s*(stack backtrace:|Stack backtrace:|Stack trace:|"
    r"\d+: (<unknown>|\S+::|0x[0-9a-f]+|start_thread|clone))"
)
_PYTHON_FRAME = re.compile(r'^\s+File ".*", line \d+')
#: Lines that never carry the reason: a traceback's heading, Java's frames, a Rust frame's
#: location.
_SKIPPED = re.compile(
    r"^(\s*Traceback \(most recent call last\):|\tat |\s+at \S+[(:]|\s*\.\.\. \d+ more)"
)


class translated:
    """``with translated("parquet", "cannot read 'x.parquet'", fix="..."):`` turns the
    boundary's third-party exceptions into ours: ``<what>: <their message>; <fix>``
    (their message's last line, or its first with ``first_line``)."""

    def __init__(self, boundary: str, what: str, *, fix: str = "", first_line: bool = False):
        self.boundary, self.what, self.fix = boundary, what, fix
        self.first_line = first_line

    def __enter__(self) -> translated:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if exc is None or isinstance(exc, ScoringError):
            return
        known = _resolved(self.boundary)
        # The most specific entry: the first of the exception's own classes, most derived
        # first, that the boundary names (pyarrow's ArrowIOError is an OSError too).
        ours = next((known[k] for k in type(exc).__mro__ if k in known), None)
        if ours is not None:
            message = f"{self.what}: {cause_line(exc, first_line=self.first_line)}"
            raise ours(message + (f"; {self.fix}" if self.fix else "")) from exc


def translating(
    boundary: str, what: Callable[[Any], str], *, fix: str = ""
) -> Callable[[type[T]], type[T]]:
    """A class decorator: each public method of the class runs inside
    ``translated(boundary, what(self), fix=fix)``, so that no call of the class's into a
    library escapes the translation, however deep it is made."""

    def decorate(cls: type[T]) -> type[T]:
        for name, method in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(method):
                setattr(cls, name, _inside(boundary, what, method, fix))
        return cls

    return decorate


def _inside(
    boundary: str, what: Callable[[Any], str], method: Callable[..., Any], fix: str
) -> Callable[..., Any]:
    @functools.wraps(method)
    def translated_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, ScoringError):
                raise
            with translated(boundary, what(self), fix=fix):  # what(self): only on a failure
                raise

    return translated_method

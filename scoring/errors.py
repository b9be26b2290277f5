"""The product's one exception tree.

Every error the package raises on purpose derives from :class:`ScoringError`; errors
from the frameworks underneath are translated at the boundary into one of these, with
a message that names the culprit (column, file, value, model kind) and the fix.
"""

from __future__ import annotations

__all__ = [
    "ScoringError",
    "UnsupportedModelError",
    "ModelFileError",
    "UntrustedModelError",
    "InputError",
    "FeatureCountError",
    "MissingColumnError",
    "NonNumericColumnError",
    "InvalidValueError",
    "InputFileError",
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
]


class ScoringError(Exception):
    """Base class of every error raised by the scoring package."""


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


class JobFileError(ScoringError, ValueError):
    """A job file is unreadable, not TOML, or has a wrong key or value (named)."""


class DeadlineError(ScoringError):
    """The plan says the job cannot finish before its deadline."""

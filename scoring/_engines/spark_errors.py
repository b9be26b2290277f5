"""Errors raised inside Spark's Python workers, as the product's one line on the driver.

A worker's error reaches the driver wrapped twice: Spark logs the failed task with its
Java stack (dozens of lines on stderr, once per attempt), then raises a
``PythonException`` (or a ``Py4JJavaError``) whose text holds the worker's traceback,
the product's error on its last line.  Sessions this package starts log failed tasks
only under ``--debug`` (``SCORING_DEBUG=1``; :mod:`scoring._spark_session`);
:func:`worker_errors` raises the error the worker raised, with its own message, so the
command prints its one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from .. import errors
from ..errors import debugging

__all__ = ["raised_in_worker", "worker_errors"]

_OURS = re.compile(r"^scoring\.errors\.([A-Za-z]+Error): (.+)$", flags=re.M)


def raised_in_worker(exc: BaseException) -> errors.ScoringError | None:
    """The product's error a worker raised, from the text Spark wraps it in (its last
    one: an error raised while handling another names both)."""
    found = _OURS.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, errors.ScoringError)):
        return None
    return kind(message.strip())


@contextmanager
def worker_errors() -> Iterator[None]:
    """Raise a worker's error as itself; Spark's wrapping (and its Java stack) stays its
    cause only under ``--debug``."""
    try:
        yield
    except errors.ScoringError:
        raise
    except Exception as exc:
        ours = raised_in_worker(exc)
        if ours is None:
            raise
        if debugging():
            raise ours from exc
        raise ours from None

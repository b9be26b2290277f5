"""The product's call sites into a library, found by running it, and an exception raised
at one of them.

:func:`watching` replaces every public function and method that a library's modules
define (its Python ones: a compiled type's methods cannot be replaced) by a wrapper that
notes where in ``scoring/`` it was called from: a *site* is the library's callable and
the product's file and line.  ``Watch.arm(site, error)`` makes that one site raise
``error`` instead of calling the library; calls from elsewhere, the library's own
calls to itself included, go through.  What a site calls is found, not listed: a call
the product adds tomorrow is a site of tomorrow's run.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

import scoring

PRODUCT = str(Path(scoring.__file__).parent)


@dataclass(frozen=True, order=True)
class Site:
    """``deltalake.table.DeltaTable.history`` called at ``_formats/delta.py:80``."""

    library: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.library} at {self.file}:{self.line}"


@dataclass
class Watch:
    seen: set[Site] = field(default_factory=set)
    armed: Site | None = None
    error: Callable[[Site], BaseException] | None = None
    raised: bool = False

    def arm(self, site: Site, error: Callable[[Site], BaseException]) -> None:
        self.armed, self.error, self.raised = site, error, False

    def _called(self, library: str) -> None:
        caller = sys._getframe(1).f_back  # the wrapper's caller (none: a thread's start)
        if caller is None or not caller.f_code.co_filename.startswith(PRODUCT):
            return
        site = Site(library, caller.f_code.co_filename[len(PRODUCT) + 1 :], caller.f_lineno)
        self.seen.add(site)
        if site == self.armed and self.error is not None:
            self.raised = True
            raise self.error(site)


def _wrapped(watch: Watch, library: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        watch._called(library)
        return fn(*args, **kwargs)

    return wrapper


def _defined_in(value: Any, packages: tuple[str, ...]) -> bool:
    module = getattr(value, "__module__", None) or ""
    return module.startswith(packages)


def _targets(packages: tuple[str, ...]) -> Iterator[tuple[Any, str, Any, str]]:
    """(owner, attribute, replacement kind, library name) for every public function of
    the packages' loaded modules and every method of their Python classes."""
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or not name.startswith(packages):
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("_") or not _defined_in(value, packages):
                continue
            if isinstance(value, FunctionType):
                yield module, attr, value, f"{value.__module__}.{value.__qualname__}"
            elif inspect.isclass(value) and id(value) not in seen:
                seen.add(id(value))
                yield from _methods(value)


def _methods(cls: type) -> Iterator[tuple[Any, str, Any, str]]:
    for attr, raw in list(vars(cls).items()):
        if attr.startswith("_") and attr != "__init__":
            continue
        fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        generated = getattr(getattr(fn, "__code__", None), "co_filename", "") == "<string>"
        if isinstance(fn, FunctionType) and not generated:  # (a dataclass's own __init__
            # holds values: it reads and writes nothing)
            yield cls, attr, raw, f"{cls.__module__}.{cls.__qualname__}.{attr}"


@contextmanager
def watching(monkeypatch: pytest.MonkeyPatch, *packages: str) -> Iterator[Watch]:
    """Every callable of ``packages`` watched, under the product's own names for them
    too (``from lib import f``)."""
    for package in packages:
        importlib.import_module(package)
    watch = Watch()
    replaced: dict[int, Any] = {}
    for owner, attr, raw, library in _targets(packages):
        if isinstance(raw, staticmethod):
            new: Any = staticmethod(_wrapped(watch, library, raw.__func__))
        elif isinstance(raw, classmethod):
            new = classmethod(_wrapped(watch, library, raw.__func__))
        else:
            new = replaced.setdefault(id(raw), _wrapped(watch, library, raw))
        try:
            monkeypatch.setattr(owner, attr, new)
        except (TypeError, AttributeError):  # a compiled type's: out of reach
            continue
    product = [m for n, m in list(sys.modules.items()) if n.startswith("scoring")]
    for module in product:
        for attr, value in list(vars(module).items()):
            if id(value) in replaced:
                monkeypatch.setattr(module, attr, replaced[id(value)])
    yield watch

"""The run plan: everything a run was decided to be, frozen, and whole in every engine.

:func:`~scoring._engines.base.plan_run` makes it once, on the driver, after every check;
the local engine scores with it, Ray actors receive it as it is, and Spark's executors
take its :class:`ScoreSpec`.  What changes while a run goes on (the files still to do,
those done, the model compiled in this process) is a :class:`~scoring._engines.base.Run`'s,
beside the plan, never in it.  It pickles: an actor gets the plan, its hooks included.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from .._drift import Profile
from .._formats.dataset import InputDataset
from .._journal.journal import Entry, Journal
from .._stores import StoreConfig

__all__ = ["HOOKS", "HoldAfterFirstFile", "Hooks", "RunPlan", "ScoreSpec"]


@dataclass(frozen=True)
class Hooks:
    """Named points of a run where a test (or a program embedding the product) observes
    or holds it.  Each runs where the point is reached: in a Ray actor, in that actor,
    so a hook must pickle (a module-level function, or an object of an importable
    class)."""

    #: In the file's writer, once its entry is journaled and before it is reported
    #: done: no other file of that writer is journaled meanwhile.
    on_file_journaled: Callable[[Entry], None] | None = None
    #: On the driver, after each step of the publication, with what it did ("placed a
    #: new file", "wrote the new manifest", ...; :mod:`scoring._formats.publication`).
    on_publish_step: Callable[[str], None] | None = None

    def file_journaled(self, entry: Entry) -> None:
        if self.on_file_journaled is not None:
            self.on_file_journaled(entry)


#: The hooks every plan gets; tests replace them (none run by default).
HOOKS = Hooks()


class HoldAfterFirstFile:
    """A hook that holds a worker after its first journaled file: it writes ``<pid>``
    into ``folder`` and waits for a ``release`` file there, so that a test kills
    workers mid-job on that event rather than after a guessed delay."""

    def __init__(self, folder: str):
        self.folder = folder
        self.held = False

    def __call__(self, entry: Entry) -> None:
        if self.held:
            return
        self.held = True
        with open(os.path.join(self.folder, str(os.getpid())), "w"):
            pass
        while not os.path.exists(os.path.join(self.folder, "release")):
            threading.Event().wait(0.05)


@dataclass(frozen=True)
class ScoreSpec:
    """How every worker scores a batch, whatever the engine: the columns kept, the
    outputs, where and how the model runs, and the reference profile its rows are
    counted into (drift), if monitored."""

    keep: tuple[str, ...] = ()
    outputs: str = "default"
    device: str = "auto"  # as asked for: engines with workers resolve it there
    backend: str = "auto"
    strategy: str = "auto"
    monitor: Profile | None = None


@dataclass(frozen=True)
class RunPlan:
    """One run, as planned: the input (its snapshot pinned), the output's journal (its
    format and mode among the settings it records), the model's sha256, what is read
    from each file and what each output file holds, how it is scored, the object
    stores' options and the hooks."""

    data: InputDataset
    journal: Journal
    sha256: str
    columns: tuple[str, ...]  # what to read from each file
    schema: pa.Schema  # what each output file holds
    score: ScoreSpec
    stores: StoreConfig = field(default_factory=dict)  # workers' fsspec options
    hooks: Hooks = field(default_factory=Hooks)

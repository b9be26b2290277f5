"""Several models in one pass over the data: read once, score every model, one kernel.

A job, ``score_parquet`` or the Ray/Spark helpers may name a list of models where they
name one.  The input is read once per batch; every model takes its own feature columns
by name (with its own categories and validation) and writes its outputs under its
prefix: ``<prefix>__<column>``, the prefix defaulting to the model's registered name.
A model may carry a row filter (``where``, :mod:`scoring._where`): it scores only the
rows inside it (the others are never validated by it) and writes nulls for the rest.

* :mod:`.payload` (:class:`BundleSet`): what identifies the set and travels to workers:
  each member's bundle and prefix, one payload (:func:`load_payload` reads either kind).
* :mod:`.grouping` (:class:`ModelSet`): the set compiled, combinable members sharing one
  forest.
* :mod:`.scorer` (:class:`SetScorer`): the :class:`~scoring._scorer.Scorer` of a set,
  which the engines use as they use a model's (:func:`scorer_for` picks).

The set's sha256 covers every member's sha256, prefix and filter, so a job key, a resume or a
kept output is never mistaken for another set's.
"""

from __future__ import annotations

from .grouping import ModelSet, Scoring, compile_payload, compile_set, is_compiled, shipped
from .payload import SEPARATOR, BundleSet, load_payload, prefixed, set_of
from .scorer import SetScorer, scorer_for

__all__ = [
    "SEPARATOR", "BundleSet", "ModelSet", "Scoring", "SetScorer", "compile_payload",
    "compile_set", "is_compiled", "load_payload", "prefixed", "scorer_for", "set_of", "shipped",
]  # fmt: skip

"""Explanations written beside the scores: contribution columns and reason codes.

``outputs`` names what a run writes: one of the score sets (``default``, ``raw``,
``all``) and, joined with ``+`` or given as a list, ``contributions`` and
``reasons=K`` (``reasons=K/signed``).  :func:`output_spec` turns any of those forms into
one canonical string, which is what travels to workers and into the job key.

* ``contributions``: ``contrib_<feature>`` per feature and ``contrib_bias`` (float64),
  each feature's path-dependent TreeSHAP contribution to the margin
  (:meth:`scoring.CompiledModel.predict_contributions`); with several outputs,
  ``contrib_<class>_<feature>`` per class (or ``contrib_<k>_...`` per output).
* ``reasons=K``: ``reason_1`` .. ``reason_K`` (the feature's name) and
  ``reason_1_value`` .. (its contribution), the K features that moved this row's
  margin most: by absolute value (default), or ``/signed``, the largest increases
  first (what an adverse-action notice lists when a high score is the bad outcome).
  A multiclass model's reasons are those of the class it predicts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ._ir import Forest
from .errors import ConfigError

__all__ = ["Explanations", "output_spec"]

SCORE_SETS = ("default", "raw", "all")
_REASONS = re.compile(r"^reasons=(\d+)(?:/(absolute|signed))?$")


@dataclass(frozen=True)
class Explanations:
    """What a layout explains: contribution columns, and how many reasons by what order."""

    contributions: bool = False
    reasons: int = 0
    by: Literal["absolute", "signed"] = "absolute"

    @property
    def any(self) -> bool:
        return self.contributions or self.reasons > 0

    def columns(self, forest: Forest, classes: Sequence[Any]) -> list[tuple[str, pa.DataType]]:
        names = _feature_names(forest)
        columns = []
        if self.contributions:
            for prefix in _output_prefixes(forest, classes):
                columns += [(f"{prefix}{n}", pa.float64()) for n in [*names, "bias"]]
        if self.reasons:
            _check_reasons(self.reasons, forest)
            for r in range(1, self.reasons + 1):
                columns += [(f"reason_{r}", pa.string()), (f"reason_{r}_value", pa.float64())]
        return columns

    def arrays(self, forest: Forest, contributions: np.ndarray) -> list[np.ndarray]:
        """Columns from ``contributions [rows, outputs, features + 1]``."""
        rows = contributions.shape[0]
        cols: list[np.ndarray] = []
        if self.contributions:
            cols += list(contributions.reshape(rows, -1).T)
        if self.reasons:
            cols += self._reasons(forest, contributions)
        return cols

    def _reasons(self, forest: Forest, contributions: np.ndarray) -> list[np.ndarray]:
        rows = contributions.shape[0]
        # The explained output: the only one, or the class with the largest margin.
        output = contributions.sum(axis=2).argmax(axis=1) if contributions.shape[1] > 1 else 0
        phi = contributions[np.arange(rows), output, :-1]  # [rows, features], bias left out
        key = np.abs(phi) if self.by == "absolute" else phi
        order = np.argsort(-key, axis=1, kind="stable")[:, : self.reasons]
        names = np.asarray(_feature_names(forest), dtype=object)
        cols: list[np.ndarray] = []
        for r in range(self.reasons):
            cols += [names[order[:, r]], phi[np.arange(rows), order[:, r]]]
        return cols


def output_spec(outputs: str | Sequence[str]) -> str:
    """The canonical form of ``outputs`` (see the module docstring); ConfigError names
    what is not understood."""
    return canonical(*parse(outputs))


def parse(outputs: str | Sequence[str]) -> tuple[str, Explanations]:
    items = outputs.split("+") if isinstance(outputs, str) else list(outputs)
    scores, contributions, reasons, by = "default", False, 0, "absolute"
    for item in (str(i).strip() for i in items):
        found = _REASONS.match(item)
        if item in SCORE_SETS:
            scores = item if scores == "default" else _twice(scores, item)
        elif item == "contributions":
            contributions = True
        elif found:
            reasons, by = int(found.group(1)), found.group(2) or "absolute"
        else:
            raise ConfigError(
                f"outputs: {item!r} is not an output; expected one of {', '.join(SCORE_SETS)}, "
                "'contributions' or 'reasons=K' (e.g. 'default+contributions+reasons=3')"
            )
    return scores, Explanations(contributions, reasons, by)  # type: ignore[arg-type]


def canonical(scores: str, explain: Explanations) -> str:
    parts = [scores] + ["contributions"] * explain.contributions
    if explain.reasons:
        parts.append(f"reasons={explain.reasons}" + ("/signed" if explain.by == "signed" else ""))
    return "+".join(parts)


def _twice(first: str, second: str) -> str:
    if first == second:
        return first
    raise ConfigError(f"outputs: name one of {', '.join(SCORE_SETS)}, not {first} and {second}")


def _check_reasons(reasons: int, forest: Forest) -> None:
    if reasons > forest.n_features:
        raise ConfigError(
            f"reasons={reasons}: {forest.model_kind} reads {forest.n_features} features; "
            f"ask for at most {forest.n_features}"
        )
    if forest.n_outputs > 1 and forest.task != "multiclass":
        raise ConfigError(
            f"reasons explain one output or a predicted class; {forest.model_kind} has "
            f"{forest.n_outputs} outputs of a {forest.task} model: write 'contributions' instead"
        )


def _feature_names(forest: Forest) -> list[str]:
    return list(forest.feature_names or [f"f{j}" for j in range(forest.n_features)])


def _output_prefixes(forest: Forest, classes: Sequence[Any]) -> list[str]:
    if forest.n_outputs == 1:
        return ["contrib_"]
    labels = list(classes) if len(classes) == forest.n_outputs else range(forest.n_outputs)
    return [f"contrib_{label}_" for label in labels]

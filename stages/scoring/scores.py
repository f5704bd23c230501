"""Scores (issue 36): the per-clip values people filter, rank and balance a dataset by (camera
motion, clarity, aesthetics, caption match), declared once where they are computed.

A stage declares a score beside its columns (`register_clip_stage(..., scores=...)`, or
`register_scores` for a pass that is no clip stage), and the rest follows from the declaration:
- the report shows it per film and across films (a histogram, or a bar per label);
- the review page and the notebook API (`Dataset.where`) filter by it, with one rule
  (`score_filter`): a label score by its value (`camera_motion=pan_left`), a number score by a
  range (`clarity_min=0.5`, `clarity_max=0.9`);
- the folder's reject thresholds may reject by it (`reject.scores`, `score_reasons`): a number
  below (or above) a limit, a label among those listed. Off unless the score declares a default
  limit, so a dataset cut with the defaults keeps its decisions.

A score's reject reason is its `reason` (its column unless given); docs/scores.md holds each
score's definition, figures and limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.settings import ConfigError

MIN_SUFFIX, MAX_SUFFIX = "_min", "_max"  # a number score's range filters: clarity_min=0.5
NONE = "none"  # a label filter's value for clips the score did not measure


@dataclass(frozen=True)
class Score:
    """A per-clip score: its shard column and how people read, filter and threshold it."""

    column: str
    label: str  # how people read its name: "camera motion"
    labels: tuple[str, ...] = ()  # a label score's values; empty: a number score
    low_is_bad: bool = True  # a number score's threshold rejects clips below it (else above)
    unit: str = ""  # what a number score counts, for people
    reason: str = ""  # the reject reason its threshold gives; empty: the column's name
    meaning: str = ""  # what that reason means, for people
    default_limit: Any = None  # a limit that rejects by default (None: off)

    @property
    def is_number(self) -> bool:
        return not self.labels

    @property
    def reject_reason(self) -> str:
        return self.reason or self.column

    def check_limit(self, limit: Any, source: str = "reject.scores") -> Any:
        """A limit as the rule reads it: a number for a number score, a list of its labels for a
        label score (None: no threshold). A ConfigError names the setting otherwise."""
        if limit is None:
            return None
        if self.is_number:
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise ConfigError(f"{source}: {self.column}={limit!r}: give a number")
            return float(limit)
        chosen = [limit] if isinstance(limit, str) else limit
        if not isinstance(chosen, (list, tuple)) or set(chosen) - set(self.labels):
            raise ConfigError(
                f"{source}: {self.column}={limit!r}: give a list of labels among "
                f"{list(self.labels)}"
            )
        return list(chosen)

    def describe_limit(self, limit: Any) -> str:
        """The limit as people read it: 'below 0.4', 'one of complex, zoom_in'."""
        if self.is_number:
            return f"{'below' if self.low_is_bad else 'above'} {limit:g}"
        return "one of " + ", ".join(limit)

    def shown(self, value: Any) -> str:
        """One clip's value as people read it."""
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "not measured"
        return f"{value:.3g}" if self.is_number else str(value)


def score_limits(
    scores: list[Score], given: Mapping[str, Any], source: str = "reject.scores"
) -> dict[str, tuple[Score, Any]]:
    """The thresholds in force: each score's default limit, replaced by the one `given` for its
    column (None switches a default off). An unknown column is a ConfigError naming the known
    ones."""
    known = {score.column: score for score in scores}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(
            f"{source}: no score named {', '.join(unknown)} (scores: {', '.join(sorted(known))})"
        )
    limits = {}
    for column, score in known.items():
        limit = score.check_limit(given.get(column, score.default_limit), source)
        if limit is not None:
            limits[column] = (score, limit)
    return limits


def rejected(score: Score, limit: Any, values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per clip: the score's limit rejects it. A clip without the value is never rejected."""
    if pa.types.is_null(values.type):
        return np.zeros(len(values), bool)
    if score.is_number:
        numbers = pc.cast(values, pa.float64())
        beyond = pc.less(numbers, limit) if score.low_is_bad else pc.greater(numbers, limit)
    else:
        beyond = pc.is_in(values, value_set=pa.array(limit, pa.string()))
    return beyond.fill_null(False).to_numpy(zero_copy_only=False)


def score_filter(scores: list[Score], query: Mapping[str, str]) -> list[tuple[Score, str, Any]]:
    """The score conditions among `query` (a page's or a notebook's filters), checked:
    (score, 'is' | 'min' | 'max', value). Names that are no score's filter are left to the
    caller; a bad value is a ValueError saying what is wrong."""
    conditions: list[tuple[Score, str, Any]] = []
    for score in scores:
        if score.is_number:
            for suffix, kind in ((MIN_SUFFIX, "min"), (MAX_SUFFIX, "max")):
                if (name := score.column + suffix) in query:
                    conditions.append((score, kind, _number(query[name], name)))
        elif score.column in query:
            value = str(query[score.column])
            if value != NONE and value not in score.labels:
                raise ValueError(
                    f"{score.column} must be one of {', '.join(score.labels)} or {NONE}, "
                    f"got {value!r}"
                )
            conditions.append((score, "is", value))
    return conditions


def filter_names(scores: list[Score]) -> list[str]:
    """Every filter name the scores give (`score_filter` reads them)."""
    names = []
    for score in scores:
        names += (
            [score.column + MIN_SUFFIX, score.column + MAX_SUFFIX]
            if score.is_number
            else [score.column]
        )
    return names


def matches(kind: str, value: Any, values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per clip: its score passes one condition of `score_filter`. A clip without the score
    passes only `is none`."""
    if pa.types.is_null(values.type):
        return np.full(len(values), kind == "is" and value == NONE)
    if kind == "is":
        found = pc.is_null(values) if value == NONE else pc.equal(values, value)
    else:
        numbers = pc.cast(values, pa.float64())
        found = pc.greater_equal(numbers, value) if kind == "min" else pc.less_equal(numbers, value)
    return found.fill_null(False).to_numpy(zero_copy_only=False)


def passes(kind: str, value: Any, clip_value: Any) -> bool:
    """One clip's value passes one condition (the review page's reviewed rows)."""
    return bool(matches(kind, value, pa.array([clip_value]))[0])


def _number(text: str, name: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {text!r}") from None

"""PromQL result values: plain, immutable data handed from the evaluator to rules, CLI and tests."""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.model import Labels


@dataclass(frozen=True)
class VectorSample:
    """One element of an instant vector. ``labels`` may lack ``__name__`` (computed series)."""

    labels: Labels
    value: float
    t_ms: int


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range vector (matrix): parallel timestamp/value lists, oldest first."""

    labels: Labels
    timestamps: list[int]
    values: list[float]


@dataclass(frozen=True)
class Scalar:
    """A scalar result at evaluation time ``t_ms``."""

    value: float
    t_ms: int


@dataclass(frozen=True)
class String:
    """A string result (string literal at top level)."""

    value: str
    t_ms: int


Vector = list[VectorSample]
Matrix = list[RangeSeries]
Value = Vector | Matrix | Scalar | String


class MatrixList(list[RangeSeries]):
    """A :data:`Matrix` that stays recognisable as a range vector when empty (``evaluate`` returns it)."""

"""From request results to per-step figures, the knee and the zones (goodput against offered load).

Pure functions. A request meets the SLO when it completed without error, its TTFT is within the TTFT
objective and its TPOT (when it has one) within the TPOT objective. Per step:

- attainment: the share of the step's requests that met the SLO (errors count against it; requests
  the step's time bound left unsent are not counted at all);
- throughput: output tokens of completed requests per second of the step; goodput: output tokens of
  requests that met the SLO per second (what users got in time: the figure capacity is planned on);
- zone: ``safe`` when attainment reaches the objective, ``collapsed`` below ``collapse_below`` (default
  0.5: most requests fail), ``degrading`` in between.

The knee is the highest load of the leading run of safe steps (loads in increasing order): the last
load before the first step that misses the objective. A later step that passes again by luck does not
move it. When no step misses the objective the knee is "not reached": it lies above the highest load
tried, and that load is no knee (:func:`knee_status`).

Shortfall (open loop): a step's offered rate is what its send schedule asked for, its achieved rate what
the client really sent (first to last send, without the requests its in-flight limit refused). A step
whose achieved rate is more than :data:`SHORTFALL_TOLERANCE` below the offered one did not test its
load: the client could not keep up (CPU, threads, its in-flight limit), and its figures belong to a lower
rate than its label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from watchdog.loadtest.client import RequestResult, percentile

PERCENTILES = (50.0, 90.0, 99.0)
SHORTFALL_TOLERANCE = 0.05
"""A step whose achieved send rate is more than this share below its offered rate is flagged."""
NOT_SENT = "(not sent)"
"""The end of the error of a request the client's in-flight limit refused (runner.py)."""


class Zone(str, Enum):
    """Where a load sits on the goodput curve."""

    SAFE = "safe"
    DEGRADING = "degrading"
    COLLAPSED = "collapsed"


@dataclass(frozen=True)
class Objectives:
    """Per-request latency objectives and the share of requests that must meet them."""

    ttft_seconds: float
    tpot_seconds: float
    attainment: float = 0.9
    collapse_below: float = 0.5

    def met(self, result: RequestResult) -> bool:
        """Whether one request met every objective."""
        if not result.ok or result.ttft is None or result.ttft > self.ttft_seconds:
            return False
        tpot = result.tpot
        return tpot is None or tpot <= self.tpot_seconds

    def zone(self, attainment: float) -> Zone:
        """The zone a step's attainment puts it in."""
        if attainment >= self.attainment:
            return Zone.SAFE
        if attainment < self.collapse_below:
            return Zone.COLLAPSED
        return Zone.DEGRADING


@dataclass(frozen=True)
class StepSummary:
    """One step's figures. ``load`` is a rate (requests/s) or a concurrency, per the run's mode."""

    load: float
    requests: int
    completed: int
    errors: int
    met_slo: int
    duration_seconds: float
    attainment: float
    request_rate: float
    throughput_tps: float
    goodput_tps: float
    ttft: dict[str, float | None]
    tpot: dict[str, float | None]
    itl: dict[str, float | None]
    e2e: dict[str, float | None]
    zone: Zone
    error_examples: tuple[str, ...] = ()
    offered_rate: float | None = None
    """Requests/s the step's send schedule asked for (open loop); None for a closed loop."""
    achieved_rate: float | None = None
    """Requests/s the client really sent, first to last send (open loop)."""

    @property
    def shortfall(self) -> bool:
        """Whether the client sent clearly fewer requests per second than the step offered."""
        return (self.offered_rate is not None and self.achieved_rate is not None
                and self.achieved_rate < self.offered_rate * (1 - SHORTFALL_TOLERANCE))


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, p50, p90 and p99 (``vllm bench serve`` reports the same); None without values."""
    return {"mean": sum(values) / len(values) if values else None,
            **{f"p{q:g}": percentile(values, q) for q in PERCENTILES}}


def _rate(times: Sequence[float]) -> float | None:
    """Events per second from first to last of ``times``; None for fewer than two or no time between."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def summarize(load: float, results: Sequence[RequestResult], duration_seconds: float,
              objectives: Objectives, scheduled: Sequence[float] | None = None) -> StepSummary:
    """The figures of one step from its request results; ``scheduled`` (open loop) are the send offsets
    the step's schedule asked for within its time, for the offered and achieved rates."""
    completed = [r for r in results if r.ok]
    good = [r for r in completed if objectives.met(r)]
    total = len(results)
    attainment = len(good) / total if total else 0.0
    errors = sorted({r.error for r in results if r.error})
    return StepSummary(
        load=load, requests=total, completed=len(completed), errors=len(results) - len(completed),
        met_slo=len(good), duration_seconds=duration_seconds, attainment=attainment,
        request_rate=len(completed) / duration_seconds,
        throughput_tps=sum(r.output_tokens for r in completed) / duration_seconds,
        goodput_tps=sum(r.output_tokens for r in good) / duration_seconds,
        ttft=_percentiles([r.ttft for r in completed if r.ttft is not None]),
        tpot=_percentiles([t for t in (r.tpot for r in completed) if t is not None]),
        itl=_percentiles([gap for r in completed for gap in r.itl]),
        e2e=_percentiles([r.e2e for r in completed]),
        zone=objectives.zone(attainment),
        error_examples=tuple(errors[:3]),
        offered_rate=None if scheduled is None else _rate(scheduled),
        achieved_rate=None if scheduled is None else _rate(
            [r.sent_at for r in results if not (r.error or "").endswith(NOT_SENT)]),
    )


def find_knee(steps: Sequence[StepSummary]) -> StepSummary | None:
    """The last safe step before the first unsafe one (by increasing load); None if the first is unsafe,
    and None when no step is unsafe (the knee was not reached: see :func:`knee_status`)."""
    knee = None
    for step in sorted(steps, key=lambda s: s.load):
        if step.zone is not Zone.SAFE:
            return knee
        knee = step
    return None


def knee_status(steps: Sequence[StepSummary]) -> str:
    """``reached`` (a safe step, then one that missed the objective), ``not reached`` (every step met it:
    the knee lies above the highest load tried) or ``none`` (the lowest load missed it, or no steps)."""
    if steps and all(step.zone is Zone.SAFE for step in steps):
        return "not reached"
    return "none" if find_knee(steps) is None else "reached"

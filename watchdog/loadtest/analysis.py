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
move it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from watchdog.loadtest.client import RequestResult, percentile

PERCENTILES = (50.0, 90.0, 99.0)


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


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, p50, p90 and p99 (``vllm bench serve`` reports the same); None without values."""
    return {"mean": sum(values) / len(values) if values else None,
            **{f"p{q:g}": percentile(values, q) for q in PERCENTILES}}


def summarize(load: float, results: Sequence[RequestResult], duration_seconds: float,
              objectives: Objectives) -> StepSummary:
    """The figures of one step from its request results."""
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
    )


def find_knee(steps: Sequence[StepSummary]) -> StepSummary | None:
    """The last safe step before the first unsafe one (by increasing load); None if the first is unsafe."""
    knee = None
    for step in sorted(steps, key=lambda s: s.load):
        if step.zone is not Zone.SAFE:
            break
        knee = step
    return knee

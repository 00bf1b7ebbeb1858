"""The serving-verdict data model: plain, immutable values shared by the verdict engine, the interfaces a
load balancer reads (HAProxy agent-check, HTTP health, JSON list), the command line and runbook steps.

Contract:
- :class:`Verdict` is a closed vocabulary, ordered from best to worst by :data:`SEVERITY`.
- An :class:`EngineVerdict` is what the agent decided for one engine at one tick: the verdict, the weight a
  balancer should give it (0-100 %), machine-readable :class:`Reason` values, the routing scores, and the
  operator's manual state when one applies. It never changes once built.
- ``unknown`` means the agent has no fresh data for the engine (or is itself unhealthy): a balancer keeps
  its own view (the agent fails open). It is never treated as saturation.
- A :class:`VerdictSource` is what every interface reads: the newest verdicts, and whether the agent is
  healthy enough for them to be trusted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol


class Verdict(str, enum.Enum):
    """What a load balancer should do with new requests for an engine."""

    ADMIT = "admit"
    """Send it anything."""
    SHORT_ONLY = "short-only"
    """Send it only short prompts (under the configured prompt-length cut); long contexts elsewhere."""
    SHED = "shed"
    """Send it nothing new for now (answer 429 at once); it keeps what it runs and recovers by itself."""
    DRAIN = "drain"
    """Take it out of rotation: unsafe to serve (a GPU fault, wedged, failing canary) or an operator said so."""
    DOWN = "down"
    """It does not answer."""
    UNKNOWN = "unknown"
    """The agent has no fresh data about it: the balancer keeps its own view (fail open)."""


SEVERITY: dict[Verdict, int] = {Verdict.UNKNOWN: 0, Verdict.ADMIT: 1, Verdict.SHORT_ONLY: 2, Verdict.SHED: 3,
                                Verdict.DRAIN: 4, Verdict.DOWN: 5}
"""Worse is larger; ``unknown`` is below ``admit`` because it must never take capacity away."""

VERDICT_VALUE: dict[Verdict, int] = {Verdict.UNKNOWN: -1, Verdict.ADMIT: 0, Verdict.SHORT_ONLY: 1,
                                     Verdict.SHED: 2, Verdict.DRAIN: 3, Verdict.DOWN: 4}
"""Numeric code of each verdict where one number is needed (documented in ``docs/routing.md``)."""


@dataclass(frozen=True)
class Reason:
    """One machine-readable cause of a verdict: ``code`` from a closed set (``kv_free_low``,
    ``predicted_wait_over_ttft``, ``gpu_lost``, ``xid_fatal``, ``gpu_needs_reset``, ``engine_wedged``,
    ``canary_failing``, ``collective_hang``, ``not_answering``, ``stale_data``, ``agent_unhealthy``,
    ``manual``, ``degraded_link``, ``thermal_slowdown``, ``drain_guard``...), ``detail`` a short human text
    with the figures (``"free KV 12 % < 15 %"``)."""

    code: str
    detail: str


@dataclass(frozen=True)
class Scores:
    """What a gateway routes on; ``None`` where the engine does not expose the signal or it is stale."""

    kv_free_ratio: float | None = None
    kv_free_tokens: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    predicted_wait_seconds: float | None = None
    prefix_cache_hit_ratio: float | None = None
    ttft_attainment_ratio: float | None = None
    itl_attainment_ratio: float | None = None


@dataclass(frozen=True)
class ManualState:
    """An operator's override for one engine (``engine drain`` / ``engine admit``), persisted in the state
    database. ``verdict`` is ``drain`` or ``admit``; ``until_seconds`` None means until revoked."""

    job: str
    verdict: Verdict
    reason: str
    set_by: str
    set_at_seconds: float
    until_seconds: float | None = None

    def active(self, now_seconds: float) -> bool:
        """True until it expires."""
        return self.until_seconds is None or now_seconds < self.until_seconds


@dataclass(frozen=True)
class EngineVerdict:
    """The agent's decision for one engine at one tick."""

    job: str
    instance: str
    verdict: Verdict
    weight_percent: int
    reasons: tuple[Reason, ...]
    since_seconds: float
    """When the engine entered this verdict."""
    updated_seconds: float
    """The tick this verdict was computed at."""
    scores: Scores = field(default_factory=Scores)
    manual: ManualState | None = None
    proposed: Verdict | None = None
    """The raw verdict of this tick's readings when hysteresis or the drain guard held it back."""


class VerdictSource(Protocol):
    """What the interfaces read; implemented by the verdict engine the agent runs."""

    def verdicts(self) -> list[EngineVerdict]:
        """The newest verdict of every configured engine, ordered by job."""

    def verdict(self, job: str) -> EngineVerdict | None:
        """The newest verdict of ``job``; None for an engine the agent does not know."""

    def trusted(self) -> bool:
        """False while the agent itself is unhealthy (ticks stalled, collectors failing): interfaces then
        fail open (HAProxy ``up`` with no weight change, HTTP 200 with ``"verdict": "unknown"``)."""

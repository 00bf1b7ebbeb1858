"""Stability of one engine's verdict: the fold from raw proposals to the verdict the balancer sees. Pure.

Contract (:func:`step`):
- A fatal proposal (``Proposal.fatal``) drains at once; only readings after it count towards leaving.
- ``unknown`` applies at once (no data: fail open, never hold a claim the agent can no longer back), and
  from ``unknown`` (or the first proposal) the proposal applies at once: there is no state to protect.
- Any other change needs both a minimum time in the current verdict (``min_seconds_in_state``) and N of
  the last M readings (``readings_to_change`` of ``readings_window``) to support it: to worsen, N readings
  at least that bad; to improve, N readings at least that good. The target is the N-th worst (or best)
  reading, so noise between two bands never skips to the extreme one.
- Only a new engine scrape (a new ``Proposal.reading_ms``) is a new reading: a tick that re-reads the same
  scrape adds nothing to the window, so N-of-M counts scrapes, not ticks.
The band thresholds apart (enter below, leave above) live in :mod:`watchdog.serving.policy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.config.settings import ServingSettings
from watchdog.serving.model import SEVERITY, Verdict
from watchdog.serving.policy import Proposal


@dataclass(frozen=True)
class EngineState:
    """The engine's verdict, since when, and its recent readings' proposals (newest last)."""

    verdict: Verdict
    since_ms: int
    window: tuple[Verdict, ...] = ()
    last_reading_ms: int | None = None


def _nth(window: tuple[Verdict, ...], n: int, worst_first: bool) -> Verdict | None:
    known = sorted((v for v in window if v is not Verdict.UNKNOWN), key=SEVERITY.__getitem__, reverse=worst_first)
    return known[n - 1] if len(known) >= n else None


def step(state: EngineState | None, proposal: Proposal, now_ms: int, s: ServingSettings) -> EngineState:
    """The engine's state after this tick's ``proposal`` (see the module docstring)."""
    wanted = proposal.verdict
    if state is None or state.verdict is Verdict.UNKNOWN or wanted is Verdict.UNKNOWN:
        if state is not None and state.verdict is wanted:
            return state
        fresh: tuple[Verdict, ...] = () if wanted is Verdict.UNKNOWN else (wanted,)
        return EngineState(wanted, now_ms, fresh, proposal.reading_ms)
    window: tuple[Verdict, ...] = state.window
    if proposal.reading_ms is not None and proposal.reading_ms != state.last_reading_ms:
        window = (*window, wanted)[-s.readings_window:]
    kept = EngineState(state.verdict, state.since_ms, window, proposal.reading_ms or state.last_reading_ms)
    if proposal.fatal:
        # Readings from before the fault never count towards readmission.
        return kept if state.verdict is Verdict.DRAIN else EngineState(Verdict.DRAIN, now_ms, (Verdict.DRAIN,),
                                                                       kept.last_reading_ms)
    if wanted is state.verdict or now_ms - state.since_ms < s.min_seconds_in_state * 1000:
        return kept
    current = SEVERITY[state.verdict]
    if SEVERITY[wanted] > current:
        target = _nth(window, s.readings_to_change, worst_first=True)
        if target is not None and SEVERITY[target] > current:
            return EngineState(target, now_ms, window, kept.last_reading_ms)
    else:
        target = _nth(window, s.readings_to_change, worst_first=False)
        if target is not None and SEVERITY[target] < current:
            return EngineState(target, now_ms, window, kept.last_reading_ms)
    return kept

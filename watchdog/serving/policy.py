"""Readings → the raw verdict of one engine at one tick: pure, tested as a table.

Precedence (first match wins):

1. A fatal fault (a lost GPU, a fatal Xid, a GPU needing reset, a wedged or crash-looping engine, a hung
   collective, corrupt output) → ``drain``, marked ``fatal``: the hysteresis and the drain guard let it
   through at once, because the engine cannot serve correctly.
2. No engine scrape newer than the staleness bound → ``unknown`` (``stale_data``): the agent has no data,
   and no data is never read as saturation.
3. ``up`` 0 → ``down`` (``not_answering``).
4. A guarded fault (output changed without an Xid, uncorrectable ECC, a failed row remap) → ``drain``,
   subject to hysteresis and the drain guard.
5. Capacity, the worse of two signals, each with enter and leave thresholds apart (``previous`` is the
   engine's current verdict, which decides the band):
   free KV share below ``shed_enter`` → ``shed``, below ``short_only_enter`` → ``short-only``; a shed
   engine leaves above ``shed_leave``, a short-only one above ``short_only_leave``; and a predicted
   queue wait above ``predicted_wait_enter_ratio`` × the TTFT objective → ``shed`` (left below
   ``predicted_wait_leave_ratio``). Neither signal fresh → ``unknown`` (``stale_data``).
6. Otherwise ``admit``.

Weights: ``admit``/``unknown`` 100 %, ``short-only`` ``short_only_weight_percent``, the rest 0; a degraded
fault (degraded link, thermal or hardware slowdown, straggling rank) while the TTFT/TPOT error budget
burns faster than ``degraded_min_burn_rate`` scales the weight by ``degraded_weight_percent`` (a degraded
engine still serves, more slowly: less traffic, not a drain).
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.config.settings import ServingSettings
from watchdog.serving.faults import FaultClass
from watchdog.serving.model import SEVERITY, Reason, Scores, Verdict
from watchdog.serving.readings import EngineReadings

BASE_WEIGHT = {Verdict.ADMIT: 100, Verdict.UNKNOWN: 100, Verdict.SHED: 0, Verdict.DRAIN: 0, Verdict.DOWN: 0}


@dataclass(frozen=True)
class Proposal:
    """What one tick's readings say about one engine, before hysteresis, the drain guard and manual states."""

    verdict: Verdict
    reasons: tuple[Reason, ...]
    weight_percent: int
    fatal: bool = False
    """A fatal fault: applied at once, never held by hysteresis or the drain guard."""
    reading_ms: int | None = None
    """The engine scrape this proposal reads (a new value is a new reading for N-of-M)."""


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.0f} %"


def is_fresh(at_ms: int | None, now_ms: int, stale_after_ms: float) -> bool:
    """True when a reading taken at ``at_ms`` is no older than the staleness bound."""
    return at_ms is not None and now_ms - at_ms <= stale_after_ms


def _kv_verdict(free: float, previous: Verdict, s: ServingSettings) -> tuple[Verdict, Reason | None]:
    if previous is Verdict.SHED and free < s.shed_leave_free_ratio:
        return Verdict.SHED, Reason("kv_free_low", f"free KV {_pct(free)}, shed until above "
                                                   f"{_pct(s.shed_leave_free_ratio)}")
    if free < s.shed_enter_free_ratio:
        return Verdict.SHED, Reason("kv_free_low", f"free KV {_pct(free)} < {_pct(s.shed_enter_free_ratio)}")
    if previous in (Verdict.SHED, Verdict.SHORT_ONLY) and free <= s.short_only_leave_free_ratio:
        return Verdict.SHORT_ONLY, Reason("kv_free_low", f"free KV {_pct(free)}, short-only until above "
                                                         f"{_pct(s.short_only_leave_free_ratio)}")
    if free < s.short_only_enter_free_ratio:
        return Verdict.SHORT_ONLY, Reason("kv_free_low", f"free KV {_pct(free)} < "
                                                         f"{_pct(s.short_only_enter_free_ratio)}")
    return Verdict.ADMIT, None


def _wait_verdict(r: EngineReadings, previous: Verdict, s: ServingSettings) -> tuple[Verdict, Reason | None]:
    ratio = r.predicted_wait_ratio
    if ratio is None:
        return Verdict.ADMIT, None
    threshold = s.predicted_wait_leave_ratio if previous is Verdict.SHED else s.predicted_wait_enter_ratio
    if ratio > threshold:
        wait = f"{r.predicted_wait_seconds:.1f} s " if r.predicted_wait_seconds is not None else ""
        return Verdict.SHED, Reason("predicted_wait_over_ttft", f"predicted wait {wait}= {ratio:.2f}× the TTFT "
                                                                f"objective (shed above {threshold:g}×)")
    return Verdict.ADMIT, None


def _weight(verdict: Verdict, r: EngineReadings, s: ServingSettings) -> tuple[int, tuple[Reason, ...]]:
    base = s.short_only_weight_percent if verdict is Verdict.SHORT_ONLY else BASE_WEIGHT[verdict]
    degraded = [f for f in r.faults if f.fault_class is FaultClass.DEGRADED]
    if not base or not degraded or verdict is Verdict.UNKNOWN:
        return base, ()
    burning = r.burn_rate is not None and r.burn_rate > s.degraded_min_burn_rate
    if not burning:
        return base, ()
    reasons = tuple(Reason(f.code, f"{f.detail} while the latency objectives burn at {r.burn_rate:.1f}×")
                    for f in degraded)
    return max(1, base * s.degraded_weight_percent // 100), reasons


def propose(r: EngineReadings, previous: Verdict, s: ServingSettings, now_ms: int,
            scrape_interval_seconds: float) -> Proposal:
    """The raw verdict of ``r`` (see the module docstring for the precedence)."""
    stale_after_ms = s.stale_after_intervals * scrape_interval_seconds * 1000
    fatal = [f for f in r.faults if f.fault_class is FaultClass.FATAL]
    if fatal:
        return Proposal(Verdict.DRAIN, tuple(Reason(f.code, f.detail) for f in fatal), 0, fatal=True,
                        reading_ms=r.reading_ms)
    if not is_fresh(r.reading_ms, now_ms, stale_after_ms):
        age = "never scraped" if r.reading_ms is None else f"last scrape {(now_ms - r.reading_ms) / 1000:.0f} s ago"
        return Proposal(Verdict.UNKNOWN, (Reason("stale_data", f"{age} (bound {stale_after_ms / 1000:g} s)"),),
                        100, reading_ms=r.reading_ms)
    if r.up == 0:
        return Proposal(Verdict.DOWN, (Reason("not_answering", f"{r.instance} does not answer scrapes"),), 0,
                        reading_ms=r.reading_ms)
    guarded = [f for f in r.faults if f.fault_class is FaultClass.GUARDED]
    if guarded:
        return Proposal(Verdict.DRAIN, tuple(Reason(f.code, f.detail) for f in guarded), 0,
                        reading_ms=r.reading_ms)
    kv_fresh = r.kv_usage_ratio is not None and is_fresh(r.kv_reading_ms, now_ms, stale_after_ms)
    if not kv_fresh and r.predicted_wait_ratio is None:
        return Proposal(Verdict.UNKNOWN, (Reason("stale_data", "no fresh KV cache or queue-wait reading"),), 100,
                        reading_ms=r.reading_ms)
    kv_verdict, kv_reason = (_kv_verdict(1.0 - r.kv_usage_ratio, previous, s) if kv_fresh and
                             r.kv_usage_ratio is not None else (Verdict.ADMIT, None))
    wait_verdict, wait_reason = _wait_verdict(r, previous, s)
    verdict = max(kv_verdict, wait_verdict, key=SEVERITY.__getitem__)
    reasons = tuple(reason for reason in (kv_reason, wait_reason) if reason is not None)
    weight, degraded = _weight(verdict, r, s)
    return Proposal(verdict, reasons + degraded, weight, reading_ms=r.reading_ms)


def scores(r: EngineReadings) -> Scores:
    """What a gateway routes on, from the readings (None where the engine does not say)."""
    free = 1.0 - r.kv_usage_ratio if r.kv_usage_ratio is not None else None
    return Scores(kv_free_ratio=free, kv_free_tokens=r.kv_free_tokens, requests_running=r.requests_running,
                  requests_waiting=r.requests_waiting, predicted_wait_seconds=r.predicted_wait_seconds,
                  prefix_cache_hit_ratio=r.prefix_cache_hit_ratio, ttft_attainment_ratio=r.ttft_attainment_ratio,
                  itl_attainment_ratio=r.itl_attainment_ratio)

"""The drain guard: a non-fatal drain never takes out more than a share of the node's engines, nor one whose
load the others cannot absorb. Pure.

Contract (:func:`guard`):
- Engines already out of rotation (their published verdict ``drain`` or ``down``, manual drains included)
  and this tick's fatal drains and ``down`` verdicts count against the limit but are never held: a fatal
  fault drains whatever the guard says.
- At most ``floor(max_drained_share × engines)`` engines may be out, and never all of them (at least one
  stays), so a node with one engine is never drained for a non-fatal reason.
- With ``check_capacity``, a new non-fatal drain also needs the engines left in rotation (``admit`` or
  ``short-only``, serving one of its models when both sides name their models) to absorb its load: their
  spare concurrency (``engine:kv_cache_max_concurrency - engine:requests_in_flight``) at least its
  requests in flight, or, where concurrency is unknown, their free KV tokens at least the tokens it holds.
  An idle engine needs no room. When that cannot be told, the drain is held: taking capacity away on a
  guess is what the guard exists to prevent.
- New drains are considered in job order; the result names each held engine with the reason it was held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from watchdog.config.settings import DrainGuardSettings
from watchdog.serving.model import Verdict
from watchdog.serving.readings import EngineReadings

OUT = (Verdict.DRAIN, Verdict.DOWN)
ABSORBING = (Verdict.ADMIT, Verdict.SHORT_ONLY)


@dataclass(frozen=True)
class GuardCase:
    """One engine at this tick: its verdict after hysteresis, whether that is a fatal drain, and the verdict
    the balancer sees now (the previous tick's published one)."""

    job: str
    verdict: Verdict
    fatal: bool
    published: Verdict | None


def _spare(peer: EngineReadings) -> tuple[float | None, float | None]:
    requests = (peer.max_concurrency - peer.requests_in_flight
                if peer.max_concurrency is not None and peer.requests_in_flight is not None else None)
    return (max(0.0, requests) if requests is not None else None), peer.kv_free_tokens


def absorbable(engine: EngineReadings, peers: Sequence[EngineReadings]) -> tuple[bool, str]:
    """Whether ``peers`` can take ``engine``'s load, and the figures that say so."""
    if not peers:
        return False, "no other engine in rotation to take its load"
    in_flight = engine.requests_in_flight
    if in_flight is None and engine.requests_running is not None:
        in_flight = engine.requests_running + (engine.requests_waiting or 0.0)
    if in_flight == 0:
        return True, "idle"
    spares = [_spare(p) for p in peers]
    if in_flight is not None and all(req is not None for req, _ in spares):
        room = sum(req or 0.0 for req, _ in spares)
        return room >= in_flight, f"{in_flight:.0f} requests in flight, room for {room:.0f} on the others"
    used = (engine.kv_capacity_tokens * engine.kv_usage_ratio
            if engine.kv_capacity_tokens is not None and engine.kv_usage_ratio is not None else None)
    if used is not None and all(tokens is not None for _, tokens in spares):
        free = sum(tokens or 0.0 for _, tokens in spares)
        return free >= used, f"{used:.0f} KV tokens in use, {free:.0f} free on the others"
    return False, "the other engines' spare capacity is unknown"


def _serves_same(a: EngineReadings, b: EngineReadings) -> bool:
    return not a.models or not b.models or bool(set(a.models) & set(b.models))


def guard(cases: Sequence[GuardCase], readings: Mapping[str, EngineReadings],
          s: DrainGuardSettings) -> dict[str, str]:
    """Held drains: ``job -> why`` for each new non-fatal drain the guard keeps in rotation."""
    total = len(cases)
    limit = min(math.floor(s.max_drained_share * total + 1e-9), total - 1)
    out = {c.job for c in cases if c.published in OUT or c.verdict is Verdict.DOWN
           or (c.verdict is Verdict.DRAIN and c.fatal)}
    held: dict[str, str] = {}
    for case in sorted(cases, key=lambda c: c.job):
        if case.verdict is not Verdict.DRAIN or case.job in out:
            continue
        if len(out) + 1 > limit:
            held[case.job] = (f"{len(out)} of {total} engines already out; at most {max(limit, 0)} may be "
                              "drained for a non-fatal reason")
            continue
        if s.check_capacity and case.job in readings:
            engine = readings[case.job]
            peers = [readings[c.job] for c in cases if c.job != case.job and c.job not in out
                     and c.job not in held and c.job in readings and c.verdict in ABSORBING
                     and _serves_same(engine, readings[c.job])]
            ok, figures = absorbable(engine, peers)
            if not ok:
                held[case.job] = f"the other engines cannot absorb its load ({figures})"
                continue
        out.add(case.job)
    return held

"""The verdict engine the agent runs every tick; the :class:`~watchdog.serving.model.VerdictSource` every
interface reads.

Contract:
- :meth:`VerdictEngine.update` folds one tick: readings → :func:`~watchdog.serving.policy.propose` →
  :func:`~watchdog.serving.hysteresis.step` → :func:`~watchdog.serving.guard.guard` → manual states
  (:func:`apply_manual`), and publishes the result atomically. Interfaces on other threads read the last
  published list; they never see half a tick.
- While the agent is unhealthy (``healthy`` False: NVML, rules or collectors missing) every engine without a
  manual state is ``unknown`` with ``agent_unhealthy``, and :meth:`trusted` is False. :meth:`trusted` is
  also False once no tick has published for ``stale_after_intervals`` tick intervals (the loop stalled).
- The state (hysteresis, since) lives as long as the engine object; :meth:`reconfigure` (a reload) swaps
  thresholds and the engine list and keeps it.
- :meth:`samples` returns the verdict series (``watchdog_engine_verdict`` as a state set, its weight and
  reasons, the manual states, the short-prompt cut and whether the verdicts are trusted).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from watchdog.config.settings import ServingSettings
from watchdog.model import Sample, metric
from watchdog.serving.guard import GuardCase, guard
from watchdog.serving.hysteresis import EngineState, step
from watchdog.serving.manual import SETTABLE
from watchdog.serving.model import EngineVerdict, ManualState, Reason, Verdict
from watchdog.serving.policy import BASE_WEIGHT, Proposal, propose, scores
from watchdog.serving.readings import EngineReadings


@dataclass(frozen=True)
class Decision:
    """An engine's verdict before manual states: what the agent itself decided."""

    verdict: Verdict
    weight_percent: int
    reasons: tuple[Reason, ...]
    proposed: Verdict | None


def apply_manual(decision: Decision, manual: ManualState | None) -> Decision:
    """An operator's state over the agent's decision: a manual drain wins over everything; a manual admit
    overrides the agent's drain, shed, short-only and unknown, but not ``down`` (the engine does not
    answer: admitting it would only fail requests)."""
    if manual is None:
        return decision
    why = Reason("manual", f"{manual.verdict.value} by {manual.set_by}: {manual.reason}")
    if manual.verdict is Verdict.DRAIN:
        return Decision(Verdict.DRAIN, 0, (why, *decision.reasons),
                        decision.verdict if decision.verdict is not Verdict.DRAIN else decision.proposed)
    if decision.verdict is Verdict.DOWN:
        return Decision(decision.verdict, decision.weight_percent, (*decision.reasons, why), decision.proposed)
    return Decision(Verdict.ADMIT, 100, (why, *decision.reasons),
                    decision.verdict if decision.verdict is not Verdict.ADMIT else decision.proposed)


class VerdictEngine:
    """Every engine's verdict, folded tick by tick (see the module docstring)."""

    def __init__(self, settings: ServingSettings, *, scrape_interval_seconds: float, tick_interval_seconds: float,
                 clock: Callable[[], float]) -> None:
        self.settings = settings
        self.scrape_interval_seconds = scrape_interval_seconds
        self.tick_interval_seconds = tick_interval_seconds
        self.clock = clock
        self._states: dict[str, EngineState] = {}
        self._published: dict[str, EngineVerdict] = {}
        self._healthy = False
        self._updated_seconds: float | None = None
        self._lock = threading.Lock()

    def reconfigure(self, settings: ServingSettings, *, scrape_interval_seconds: float,
                    tick_interval_seconds: float) -> None:
        """New thresholds (a reload); the engines' states are kept."""
        with self._lock:
            self.settings = settings
            self.scrape_interval_seconds = scrape_interval_seconds
            self.tick_interval_seconds = tick_interval_seconds

    def update(self, now_ms: int, readings: Mapping[str, EngineReadings], manual: Mapping[str, ManualState],
               healthy: bool, unhealthy_detail: str = "") -> list[EngineVerdict]:
        """Fold one tick for every engine in ``readings`` and publish; returns the new verdicts."""
        s = self.settings
        previous = self._published
        states: dict[str, EngineState] = {}
        proposals: dict[str, Proposal] = {}
        for job, r in readings.items():
            old = self._states.get(job)
            proposal = propose(r, old.verdict if old is not None else Verdict.ADMIT, s, now_ms,
                               self.scrape_interval_seconds)
            proposals[job] = proposal
            states[job] = step(old, proposal, now_ms, s)
        cases = [GuardCase(job, states[job].verdict, proposals[job].fatal and states[job].verdict is Verdict.DRAIN,
                           previous[job].verdict if job in previous else None) for job in readings]
        held = guard(cases, readings, s.drain_guard)
        out: list[EngineVerdict] = []
        for job in sorted(readings):
            r, state, proposal = readings[job], states[job], proposals[job]
            decision = self._decide(state, proposal, held.get(job), previous.get(job))
            if not healthy:
                decision = Decision(Verdict.UNKNOWN, 100, (Reason("agent_unhealthy", unhealthy_detail or
                                                                  "the agent cannot vouch for its data"),),
                                    decision.verdict)
            decision = apply_manual(decision, manual.get(job))
            before = previous.get(job)
            since = before.since_seconds if before is not None and before.verdict is decision.verdict else now_ms / 1000
            out.append(EngineVerdict(job=job, instance=r.instance, verdict=decision.verdict,
                                     weight_percent=decision.weight_percent, reasons=decision.reasons,
                                     since_seconds=since, updated_seconds=now_ms / 1000, scores=scores(r),
                                     manual=manual.get(job), proposed=decision.proposed))
        with self._lock:
            self._states = states
            self._published = {v.job: v for v in out}
            self._healthy = healthy
            self._updated_seconds = now_ms / 1000
        return out

    def _decide(self, state: EngineState, proposal: Proposal, held_why: str | None,
                before: EngineVerdict | None) -> Decision:
        """The agent's decision for one engine: the hysteresis' verdict, or the published one where the
        drain guard held a drain; reasons say which."""
        s = self.settings
        if held_why is not None:
            keep = before.verdict if before is not None and before.verdict in (
                Verdict.ADMIT, Verdict.SHORT_ONLY, Verdict.SHED) and before.manual is None else Verdict.ADMIT
            weight = s.short_only_weight_percent if keep is Verdict.SHORT_ONLY else BASE_WEIGHT[keep]
            return Decision(keep, weight, (*proposal.reasons, Reason("drain_guard", f"drain held: {held_why}")),
                            Verdict.DRAIN)
        if state.verdict is proposal.verdict:
            return Decision(state.verdict, proposal.weight_percent, proposal.reasons, None)
        weight = s.short_only_weight_percent if state.verdict is Verdict.SHORT_ONLY else BASE_WEIGHT[state.verdict]
        reasons = (*(before.reasons if before is not None and before.verdict is state.verdict else ()),)
        reasons = tuple(r for r in reasons if r.code not in ("hysteresis", "manual", "drain_guard"))
        held = Reason("hysteresis", f"readings propose {proposal.verdict.value}; kept {state.verdict.value} until "
                                    f"{s.readings_to_change} of {s.readings_window} readings agree and "
                                    f"{s.min_seconds_in_state:g} s have passed")
        return Decision(state.verdict, weight, (*reasons, held), proposal.verdict)

    # -- VerdictSource ------------------------------------------------------------------------------------

    def verdicts(self) -> list[EngineVerdict]:
        """The newest verdict of every configured engine, ordered by job."""
        with self._lock:
            return [self._published[job] for job in sorted(self._published)]

    def verdict(self, job: str) -> EngineVerdict | None:
        """The newest verdict of ``job``; None for an engine the agent does not know."""
        with self._lock:
            return self._published.get(job)

    def trusted(self) -> bool:
        """False while the agent is unhealthy or its ticks stalled (interfaces fail open)."""
        with self._lock:
            updated, healthy = self._updated_seconds, self._healthy
            bound = self.settings.stale_after_intervals * self.tick_interval_seconds
        return healthy and updated is not None and self.clock() - updated <= bound

    # -- series -------------------------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """The verdict series of the last published tick (see the module docstring)."""
        out = [Sample(metric("watchdog_engine_short_prompt_max_tokens"), float(self.settings.short_prompt_max_tokens)),
               Sample(metric("watchdog_engine_verdicts_trusted"), 1.0 if self.trusted() else 0.0)]
        for v in self.verdicts():
            for verdict in Verdict:
                out.append(Sample(metric("watchdog_engine_verdict", job=v.job, instance=v.instance,
                                         verdict=verdict.value), 1.0 if verdict is v.verdict else 0.0))
            out.append(Sample(metric("watchdog_engine_verdict_weight_ratio", job=v.job, instance=v.instance),
                              v.weight_percent / 100))
            for code in dict.fromkeys(r.code for r in v.reasons):
                out.append(Sample(metric("watchdog_engine_verdict_reason", job=v.job, instance=v.instance,
                                         reason=code), 1.0))
            for verdict in SETTABLE:
                active = v.manual is not None and v.manual.verdict is verdict
                out.append(Sample(metric("watchdog_engine_manual_state", job=v.job, verdict=verdict.value),
                                  1.0 if active else 0.0))
        return out

"""The serving steps of runbooks: take an engine out of rotation, wait for it, test it, put it back.

- ``drain`` and ``readmit`` are executors (:class:`DrainExecutor`, :class:`ReadmitExecutor`), run in the
  manager's worker pool like every other action: they set and clear the engine's manual serving state
  (:class:`watchdog.serving.manual.ManualStates`, in the state database), which the agent applies to the
  engine's verdict at its next tick (a load balancer then stops or resumes sending it requests).
- ``wait_idle`` and ``canary`` are waits: the manager polls them once per tick (:func:`poll_idle`,
  :meth:`CanaryProgress.poll`) until they hold or their limit passes, never blocking the tick.

Ownership (the contract with operators): a runbook's drain is recorded with ``set_by = "runbook:<id>"``.
A ``readmit`` clears only a drain its own runbook set. An operator's manual state (``engine drain`` /
``engine admit``) is never overwritten or cleared by a runbook: a ``drain`` leaves an operator's drain (or
another runbook's) in place and says so, and *fails* over an operator's forced ``admit`` (the runbook
escalates instead of taking capacity the operator asked to keep); a ``readmit`` leaves any drain it does
not own in place.

Freshness: every reading must be at most :data:`FRESH_MS` old. No fresh reading is "unknown": never idle,
never a passing probe (stale data is never a reason to act or to readmit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from watchdog.runbooks.executors import ExecResult, Executor
from watchdog.runbooks.steps import RenderedAction, format_duration
from watchdog.serving.manual import ManualStates
from watchdog.serving.model import ManualState, Verdict

if TYPE_CHECKING:
    from watchdog.promql import Selectable

FRESH_MS = 60_000
"""A reading older than this is stale. The agent scrapes engines every 5 s and runs the probe every 15 s by
default; a minute is several misses in a row, long enough that the value no longer describes the engine."""

RUNBOOK_OWNER_PREFIX = "runbook:"


# -- drain and readmit ------------------------------------------------------------------------------


class DrainExecutor:
    """Sets a ``drain`` manual state on each engine of the action (see the module docstring for ownership)."""

    def __init__(self, states: ManualStates, clock: Callable[[], float]) -> None:
        self.states = states
        self.clock = clock

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Drain every job; fails (exit None) when one has an operator's forced admit or no job is known."""
        now = self.clock()
        if not action.jobs:
            return ExecResult(None, b"", 0.0, f"refused: no engine resolved for GPU {action.gpu}")
        active = self.states.active(now)
        lines: list[str] = []
        errors: list[str] = []
        for job in action.jobs:
            current = active.get(job)
            if current is not None and current.set_by != action.set_by:
                owner = f"{current.set_by} at {_when(current.set_at_seconds)}"
                if current.verdict is Verdict.DRAIN:
                    lines.append(f"{job}: already drained by {owner} ({current.reason}); left as it is")
                    continue
                errors.append(f"{job}: {current.set_by} set {current.verdict.value} by hand; a runbook does not "
                              "override an operator")
                continue
            until = now + action.until_s if action.until_s else None
            self.states.set(ManualState(job=job, verdict=Verdict.DRAIN, reason=action.text, set_by=action.set_by,
                                        set_at_seconds=now, until_seconds=until))
            shown = f" for {format_duration(action.until_s)}" if action.until_s else " until readmitted"
            lines.append(f"{job}: drained{shown} ({action.text})")
        output = "\n".join(lines + errors).encode()[:max_output_bytes]
        if errors:
            return ExecResult(None, output, 0.0, "refused: " + "; ".join(errors))
        return ExecResult(0, output, 0.0)


class ReadmitExecutor:
    """Clears the drain this runbook set on each engine of the action; leaves anyone else's in place."""

    def __init__(self, states: ManualStates, clock: Callable[[], float]) -> None:
        self.states = states
        self.clock = clock

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Readmit every job; never fails for a state it does not own (it reports it)."""
        if not action.jobs:
            return ExecResult(None, b"", 0.0, f"refused: no engine resolved for GPU {action.gpu}")
        active = self.states.active(self.clock())
        lines = []
        for job in action.jobs:
            current = active.get(job)
            if current is None:
                lines.append(f"{job}: no manual state; nothing to readmit")
            elif current.set_by != action.set_by:
                lines.append(f"{job}: {current.verdict.value} set by {current.set_by} ({current.reason}); "
                             "left in place: a runbook only clears its own drain")
            else:
                self.states.clear(job)
                lines.append(f"{job}: readmitted (cleared the drain of {current.set_by})")
        return ExecResult(0, "\n".join(lines).encode()[:max_output_bytes], 0.0)


def _when(seconds: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- readings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeReading:
    """One engine's canary probe series, summed over its instances and models: the completed-probe counters
    (``ok`` and ``failed`` = error + timeout), and the last successful probe's latencies against the tightest
    objective (``None`` when the engine has none of them)."""

    ok_total: float
    failed_total: float
    success: bool
    ttft_s: float | None
    tpot_s: float | None
    ttft_slo_s: float | None
    tpot_slo_s: float | None

    def within_objectives(self) -> tuple[bool, str]:
        """Whether the last probe succeeded within both objectives, and the figures."""
        if not self.success:
            return False, "the last probe failed"
        if self.ttft_s is None or self.tpot_s is None:
            return False, "no latency of the last probe"
        detail = f"TTFT {self.ttft_s:.3g}s, TPOT {self.tpot_s:.3g}s"
        if self.ttft_slo_s is not None and self.ttft_s > self.ttft_slo_s:
            return False, f"{detail}: TTFT over its {self.ttft_slo_s:g}s objective"
        if self.tpot_slo_s is not None and self.tpot_s > self.tpot_slo_s:
            return False, f"{detail}: TPOT over its {self.tpot_slo_s:g}s objective"
        return True, detail


class ServingReadings(Protocol):
    """What the waits read about engines; ``None`` means no fresh reading (unknown)."""

    def requests_running(self, job: str, now_ms: int) -> float | None:
        """Requests the engine runs now (``engine:requests_running``) while its scrape is up, or None."""

    def probe(self, job: str, now_ms: int) -> ProbeReading | None:
        """The engine's canary probe series, or None when there are none fresh."""

    def engines_on_gpu(self, gpu: str, now_ms: int) -> tuple[str, ...]:
        """Jobs of the engines with a rank on GPU ``gpu`` (seen in the last 15 minutes)."""


class StoreReadings:
    """:class:`ServingReadings` from the agent's series store, through PromQL with a :data:`FRESH_MS`
    lookback (an instant selector then sees only fresh samples)."""

    def __init__(self, store: Selectable, fresh_ms: int = FRESH_MS) -> None:
        self.store = store
        self.fresh_ms = fresh_ms

    def _values(self, expr: str, now_ms: int) -> list[tuple[dict[str, str], float]]:
        from watchdog.promql import EvalOptions, PromQLError, VectorSample, evaluate

        try:
            result = evaluate(expr, self.store, now_ms, EvalOptions(lookback_ms=self.fresh_ms))
        except PromQLError:
            return []
        samples = result if isinstance(result, list) else []
        return [(dict(s.labels), s.value) for s in samples if isinstance(s, VectorSample)
                and not math.isnan(s.value)]

    def requests_running(self, job: str, now_ms: int) -> float | None:
        """``sum(engine:requests_running{job})`` when ``up{job}`` is fresh and 1; else None."""
        up = self._values(f'min(up{{job="{job}"}})', now_ms)
        if not up or up[0][1] != 1:
            return None
        running = self._values(f'sum(engine:requests_running{{job="{job}"}})', now_ms)
        return running[0][1] if running else None

    def probe(self, job: str, now_ms: int) -> ProbeReading | None:
        """The job's probe counters and last latencies; None when the counters are not fresh."""
        sel = f'job="{job}"'
        counts = dict((labels.get("result", ""), value) for labels, value in self._values(
            f"sum by (result) (watchdog_engine_probe_requests_total{{{sel}}})", now_ms))
        success = self._values(f"min(watchdog_engine_probe_success{{{sel}}})", now_ms)
        if not counts or not success:
            return None

        def one(expr: str) -> float | None:
            values = self._values(expr, now_ms)
            return values[0][1] if values else None

        return ProbeReading(
            ok_total=counts.get("ok", 0.0),
            failed_total=counts.get("error", 0.0) + counts.get("timeout", 0.0),
            success=success[0][1] == 1,
            ttft_s=one(f"max(watchdog_engine_probe_ttft_seconds{{{sel}}})"),
            tpot_s=one(f"max(watchdog_engine_probe_tpot_seconds{{{sel}}})"),
            ttft_slo_s=one(f'min(watchdog_engine_probe_slo_seconds{{{sel}, signal="ttft"}})'),
            tpot_slo_s=one(f'min(watchdog_engine_probe_slo_seconds{{{sel}, signal="tpot"}})'),
        )

    def engines_on_gpu(self, gpu: str, now_ms: int) -> tuple[str, ...]:
        """From ``watchdog_engine_gpu_info`` over the last 15 minutes (a GPU that fell off the bus still counts)."""
        from watchdog.rules.queries import engine_gpus_in

        return tuple(sorted({job for (job, _), gpus in engine_gpus_in(self.store, now_ms).items() if gpu in gpus}))


# -- the waits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitStatus:
    """One poll of a wait: ``done`` when it holds; ``detail`` says what was read."""

    done: bool
    detail: str


def poll_idle(action: RenderedAction, readings: ServingReadings, now_ms: int) -> WaitStatus:
    """Idle when every engine of the action reads 0 running requests, freshly."""
    parts = []
    done = bool(action.jobs)
    for job in action.jobs:
        running = readings.requests_running(job, now_ms)
        if running is None:
            done = False
            parts.append(f"{job}: no fresh reading of engine:requests_running (or its scrape is down)")
        else:
            done = done and running == 0
            parts.append(f"{job}: {running:g} running")
    return WaitStatus(done, "; ".join(parts) or "no engine")


@dataclass
class _Streak:
    ok_total: float
    failed_total: float
    passes: int = 0
    last: str = "no probe completed since the canary started"


@dataclass
class CanaryProgress:
    """Consecutive passing probes per engine since the canary step started (kept in memory: after a restart
    of the agent the count starts over, which only delays a readmit).

    A probe counts once it has completed *after* the canary started: the probe's ``ok`` counter must move
    (a repeated old outcome is not a new probe). A failed probe (error or timeout counter moved), or an ``ok``
    one over its TTFT or TPOT objective, resets the count. When both counters moved between two polls the
    order is unknown and the count resets (never a pass by guess). No fresh series: no progress."""

    streaks: dict[str, _Streak] = field(default_factory=dict)

    def poll(self, action: RenderedAction, readings: ServingReadings, now_ms: int) -> WaitStatus:
        """Update every engine's streak; done when each has ``action.passes`` in a row."""
        parts = []
        done = bool(action.jobs)
        for job in action.jobs:
            reading = readings.probe(job, now_ms)
            streak = self._update(job, reading)
            done = done and reading is not None and streak is not None and streak.passes >= action.passes
            if reading is None:
                so_far = f"; {streak.passes}/{action.passes} in a row before" if streak is not None else ""
                parts.append(f"{job}: no fresh canary probe series (is engines[].probe configured?){so_far}")
            else:
                assert streak is not None
                parts.append(f"{job}: {streak.passes}/{action.passes} in a row ({streak.last})")
        return WaitStatus(done, "; ".join(parts) or "no engine")

    def _update(self, job: str, reading: ProbeReading | None) -> _Streak | None:
        streak = self.streaks.get(job)
        if reading is None:
            return streak
        if streak is None or reading.ok_total < streak.ok_total or reading.failed_total < streak.failed_total:
            self.streaks[job] = _Streak(reading.ok_total, reading.failed_total)  # start (or a counter reset)
            return self.streaks[job]
        new_ok = reading.ok_total > streak.ok_total
        new_failed = reading.failed_total > streak.failed_total
        streak.ok_total, streak.failed_total = reading.ok_total, reading.failed_total
        if new_failed:
            streak.passes = 0
            streak.last = "a probe failed" + (" (with a success, order unknown)" if new_ok else "")
        elif new_ok:
            passed, detail = reading.within_objectives()
            streak.passes = streak.passes + 1 if passed else 0
            streak.last = detail
        return streak


def serving_executors(states: ManualStates, clock: Callable[[], float]) -> dict[str, Executor]:
    """The executors of ``drain`` and ``readmit`` over one manual-state table."""
    return {"drain": DrainExecutor(states, clock), "readmit": ReadmitExecutor(states, clock)}

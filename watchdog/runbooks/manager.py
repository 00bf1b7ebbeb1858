"""The runbook manager: from the rule engine's alerts to diagnostics, suggestions and guarded remediation.

The agent calls :meth:`RunbookManager.on_alerts` once per tick with every alert the rule engine reports.
For each *firing* alert that a runbook serves, one **episode** (alert fingerprint + ``fired_at``) is
handled:

1. On the first tick: the read-only diagnose steps are started in the worker pool (their output arrives
   as ``diagnostics`` events on a later tick), and one ``suggestion`` event lists every remediation step
   with its rendered action and what the node's policy decides for it. If the alert has already been
   remediated ``max_attempts_before_escalation`` times in the escalation window, it escalates instead.
2. In ``auto`` mode, steps are walked in order: a step that may run is executed in the pool (never on
   the tick), then its ``verify`` condition is polled until it holds (``verified``: done) or its timeout
   passes (``escalated``). A step whose ``requires`` does not hold is skipped and the walk moves on; any
   other skip, a step that needs approval, or a failed run stops the walk (a failure escalates).
   Serving sequences (:mod:`watchdog.runbooks.serving_steps`): ``drain``/``readmit`` execute in the pool like
   any action; ``wait_idle``/``canary`` are polled on each tick in phase ``verifying`` until they hold or their
   limit passes; a verified step with a ``canary`` or ``readmit`` after it moves the walk on; and an episode
   whose alert resolved stays open while its runbook holds a drain it owns with a ``readmit`` ahead, so the
   engine is readmitted after its canary passes, never before and never left drained by a fixed fault.
3. :meth:`approve` (an allowlisted approver, mode ``approve`` or ``auto``) queues one step to run on the
   next tick under the same guards; :meth:`skip` moves an ``auto`` walk past a step;
   :meth:`acknowledge` clears an escalation.

Escalation stops automatic action for that alert (persisted, across episodes and restarts) until a
human acknowledges it. Every decision is appended to the audit table; cooldowns and daily caps are
computed from it, so they survive restarts. Secrets never leave through events or the audit: all text
goes through :func:`watchdog.logs.redact`, and outputs are stored only as SHA-256 digests.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from watchdog.config.settings import RemediationMode, RemediationSettings, SecretSource
from watchdog.infra.logs import redact
from watchdog.infra.secrets import SecretError, read_secret
from watchdog.infra.state import StateDB
from watchdog.infra.workers import DaemonPool
from watchdog.model import Alert, AlertState, Sample, metric
from watchdog.runbooks.audit import AuditRecord, Decision, Episode, EpisodePhase, RunbookState, digest
from watchdog.runbooks.catalogue import Catalogue, Runbook
from watchdog.runbooks.conditions import ConditionCheck, StoreConditions
from watchdog.runbooks.events import RunbookEvent
from watchdog.runbooks.executors import ExecResult, Executor, Runner, describe, executors_from, run_argv
from watchdog.runbooks.planner import (
    Policy,
    RenderedStep,
    StepDecision,
    Verdict,
    diagnostic_problem,
    format_plan,
    history_from,
    plan_step,
    render_step,
    should_escalate_recurrence,
)
from watchdog.runbooks.serving_steps import (
    CanaryProgress,
    ServingReadings,
    StoreReadings,
    WaitStatus,
    poll_idle,
    serving_executors,
)
from watchdog.runbooks.steps import WAIT_KINDS, RenderedAction, Step, format_duration
from watchdog.runbooks.templating import TemplateContext
from watchdog.serving.manual import ManualStates

if TYPE_CHECKING:
    from watchdog.promql import Selectable

log = logging.getLogger(__name__)

RUNS_STEPS = (RemediationMode.APPROVE, RemediationMode.AUTO)  # modes in which the agent runs steps
MAX_EVENT_TEXT = 24_000
PRUNE_EVERY_MS = 3_600_000
MIN_EPISODE_RETENTION_MS = 7 * 86_400_000


@dataclass(frozen=True)
class ApprovalResult:
    """The answer to :meth:`RunbookManager.approve` / ``skip`` / ``acknowledge``."""

    accepted: bool
    reason: str


@dataclass
class _Job:
    """One step running in the worker pool."""

    future: Future[ExecResult]
    episode: Episode
    runbook: Runbook
    step: Step
    phase: str  # "diagnose" | "remediate"
    action: RenderedAction
    started_ms: int
    actor: str = "agent"
    verify_expr: str = ""
    walk_index: int | None = None  # the auto walk's position when this step is part of it


@dataclass
class _Approval:
    fingerprint: str
    step: str
    user: str


@dataclass
class _EpisodeMemory:
    """In-memory extras of an open episode (not needed across restarts)."""

    audited_waiting: set[str] = field(default_factory=set)
    alert: Alert | None = None
    canary: CanaryProgress = field(default_factory=CanaryProgress)


def _load_secret_vars(sources: Mapping[str, SecretSource]) -> dict[str, str]:
    """``secret_vars`` values (``{env: VAR}`` or ``{file: PATH}``), registered for redaction; a file that
    cannot be read is logged and its variable left out."""
    out: dict[str, str] = {}
    for name, source in sources.items():
        try:
            value = read_secret(source.env or "", source.file or "")
        except SecretError as exc:
            log.warning("cannot read secret var file", extra={"var": name, "error": str(exc)})
            continue
        if value:
            out[name] = value
    return out


def _text(output: bytes, limit: int = MAX_EVENT_TEXT) -> str:
    text = output.decode("utf-8", "replace")
    if len(text) > limit:
        text = text[:limit] + "\n… (truncated)"
    return redact(text)


class RunbookManager:
    """Turns alerts into runbook events and guarded actions; see the module docstring for the flow."""

    def __init__(
        self,
        settings: RemediationSettings,
        state_db: StateDB,
        store: Selectable,
        clock: Callable[[], float] = time.time,
        executors: Mapping[str, Executor] | None = None,
        *,
        catalogue: Catalogue,
        template_config: Mapping[str, Any] | None = None,
        conditions: ConditionCheck | None = None,
        runner: Runner = run_argv,
        node: str | None = None,
        readings: ServingReadings | None = None,
    ) -> None:
        """``settings`` is the ``remediation`` section; ``template_config`` is what runbook templates'
        ``{{ config.PATH }}`` read (the whole config document, see :func:`settings_document`);
        ``readings`` is what the serving waits read (default: the store, fresh samples only)."""
        self.settings = settings
        self.template_config: Mapping[str, Any] = template_config or {}
        self.policy = Policy.from_settings(settings)
        diag = settings.diagnostics
        self.diagnostics_enabled = diag.enabled
        self.diagnostics_simulated = diag.simulated
        self.diagnostics_timeout_s = diag.timeout_seconds
        self.diagnostics_max_bytes = diag.max_output_bytes
        self.max_output_bytes = settings.max_output_bytes
        self.vars = {**settings.vars, **_load_secret_vars(settings.secret_vars)}
        self.state = RunbookState(state_db)
        self.catalogue = catalogue
        self.manual = ManualStates(state_db)
        self.executors = executors_from({**serving_executors(self.manual, clock), **(executors or {})}, runner)
        self.conditions: ConditionCheck = conditions or StoreConditions(store)
        self.readings: ServingReadings = readings or StoreReadings(store)
        self.clock = clock
        self.node = node or socket.gethostname()
        # Diagnostics and remediation have their own workers: hung diagnostics cannot starve remediation.
        self._pool = DaemonPool(settings.workers, "runbook")
        self._diagnostics_pool = DaemonPool(settings.workers, "diagnose")
        self._lock = threading.RLock()
        self._jobs: list[_Job] = []
        self._approvals: list[_Approval] = []
        self._pending_events: list[RunbookEvent] = []
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._episodes: dict[str, Episode] = {}
        self._memory: dict[str, _EpisodeMemory] = {}
        self._last_prune_ms = 0
        self._recover(self._now_ms())

    # -- public API ---------------------------------------------------------------------------------

    def on_alerts(self, alerts: Sequence[Alert], now_ms: int) -> list[RunbookEvent]:
        """Handle one tick's alerts; returns the events to post into the alerts' threads."""
        with self._lock:
            events = self._pending_events
            self._pending_events = []
            self._collect_finished(now_ms, events)
            if now_ms - self._last_prune_ms >= PRUNE_EVERY_MS:
                self._last_prune_ms = now_ms
                keep = max(self.policy.escalation_window_ms, MIN_EPISODE_RETENTION_MS)
                self.state.prune_episodes(now_ms - keep)
            firing = {a.fingerprint: a for a in alerts if a.state is AlertState.FIRING}
            for fingerprint, episode in list(self._episodes.items()):
                alert = firing.get(fingerprint)
                if alert is None and self._finish_serving_tail(episode, now_ms, events):
                    continue
                if alert is None or self._fired_at(alert) != episode.fired_at_ms:
                    self._end_episode(episode, now_ms)
            for alert in firing.values():
                runbook = self.catalogue.for_alert(alert.name, alert.annotations.get("runbook", ""))
                if runbook is None:
                    continue
                known = self._episodes.get(alert.fingerprint)
                episode = known if known is not None else self._start_episode(alert, runbook, now_ms, events)
                self._memory.setdefault(alert.fingerprint, _EpisodeMemory()).alert = alert
                if episode.runbook != runbook.id:
                    continue
                self._advance(episode, alert, runbook, now_ms, events)
            return events

    def approve(self, fingerprint: str, step: str, user: str) -> ApprovalResult:
        """Queue ``step`` of the firing alert ``fingerprint`` to run on the next tick, on ``user``'s
        authority. Accepted only from an allowlisted approver in mode approve or auto; the step's
        other guards (allowlists, cooldown, max_per_day, requires, dry_run) still apply."""
        with self._lock:
            now_ms = self._now_ms()
            checked = self._check_human(fingerprint, step, user, "approve", now_ms)
            if not checked.accepted:
                return checked
            episode = self._episodes[fingerprint]
            self._audit(episode, step, Decision.APPROVED, f"approved by {user}", now_ms, actor=user)
            self._approvals.append(_Approval(fingerprint, step, user))
            self._pending_events.append(self._event(episode, "decision", f"{step}: approved by {user}",
                                                    "It runs on the next evaluation if its guards allow.",
                                                    now_ms))
            return ApprovalResult(True, "queued for the next evaluation")

    def skip(self, fingerprint: str, step: str, user: str, reason: str = "") -> ApprovalResult:
        """Record that ``user`` skips ``step``; an automatic walk waiting at it moves on."""
        with self._lock:
            now_ms = self._now_ms()
            checked = self._check_human(fingerprint, step, user, "skip", now_ms)
            if not checked.accepted:
                return checked
            episode = self._episodes[fingerprint]
            why = f"skipped by {user}" + (f": {reason}" if reason else "")
            self._audit(episode, step, Decision.SKIPPED, why, now_ms, actor=user)
            runbook = self.catalogue.get(episode.runbook)
            if (runbook is not None and episode.phase is EpisodePhase.WAITING
                    and episode.step_index < len(runbook.remediate)
                    and runbook.remediate[episode.step_index].name == step):
                episode.step_index += 1
                episode.phase = EpisodePhase.ACTIVE
                self.state.save_episode(episode)
            self._pending_events.append(self._event(episode, "decision", f"{step}: {why}", "", now_ms))
            return ApprovalResult(True, why)

    def acknowledge(self, fingerprint: str, user: str) -> ApprovalResult:
        """Clear an escalation: automatic action may resume on this alert's next episode."""
        with self._lock:
            now_ms = self._now_ms()
            if user not in self.policy.approvers:
                return ApprovalResult(False, f"{user!r} is not in remediation.approvers")
            escalation = self.state.escalation(fingerprint)
            if escalation is None:
                return ApprovalResult(False, "this alert is not escalated")
            self.state.clear_escalation(fingerprint)
            self.state.record(AuditRecord(now_ms, fingerprint, escalation["alertname"], escalation["runbook"],
                                          "*", Decision.ACKNOWLEDGED, f"escalation cleared by {user}", actor=user))
            self._counts[(escalation["runbook"], "*", Decision.ACKNOWLEDGED.value)] += 1
            return ApprovalResult(True, "escalation cleared")

    def self_samples(self) -> list[Sample]:
        """``watchdog_remediation_runs_total{runbook,step,outcome}``: every audited decision, counted."""
        with self._lock:
            return [
                Sample(metric("watchdog_remediation_runs_total", runbook=rb, step=st, outcome=out), float(n))
                for (rb, st, out), n in sorted(self._counts.items())
            ]

    def plan(self, alert: Alert, now_ms: int, *, evaluate: bool = True) -> list[StepDecision]:
        """What the policy decides for each remediation step of the alert's runbook right now."""
        runbook = self.catalogue.for_alert(alert.name, alert.annotations.get("runbook", ""))
        if runbook is None:
            return []
        escalated = self.state.escalation(alert.fingerprint) is not None
        return [self._decide(step, alert, now_ms, escalated=escalated, evaluate=evaluate)
                for step in runbook.remediate]

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Block until every step in the worker pool has finished (results are still collected by the
        next :meth:`on_alerts`); True when idle. For shutdown, the CLI and tests."""
        with self._lock:
            futures = [job.future for job in self._jobs]
        _done, pending = wait_futures(futures, timeout=timeout_s)
        return not pending

    def close(self, wait: bool = False) -> None:
        """Stop the worker pool (running subprocesses finish or hit their own timeouts)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
        self._diagnostics_pool.shutdown(wait=wait, cancel_futures=True)

    # -- episodes -----------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @staticmethod
    def _fired_at(alert: Alert) -> int:
        return alert.fired_at_ms or alert.active_at_ms

    def _recover(self, now_ms: int) -> None:
        """Reload open episodes after a restart; a step that was running has an unknown outcome."""
        for episode in self.state.open_episodes():
            self._episodes[episode.fingerprint] = episode
            if episode.phase is EpisodePhase.RUNNING:
                runbook = self.catalogue.get(episode.runbook)
                step = (runbook.remediate[episode.step_index].name
                        if runbook and episode.step_index < len(runbook.remediate) else "*")
                self._escalate(episode, step, "the agent restarted while the step was running; "
                               "its outcome is unknown", now_ms, events=self._pending_events)

    def _start_episode(self, alert: Alert, runbook: Runbook, now_ms: int,
                       events: list[RunbookEvent]) -> Episode:
        fired_at = self._fired_at(alert)
        known = self.state.find_episode(alert.fingerprint, fired_at)
        if known is not None and known.open:
            self._episodes[alert.fingerprint] = known
            return known
        episode = Episode(alert.fingerprint, fired_at, alert.name, runbook.id, now_ms)
        self._episodes[alert.fingerprint] = episode
        memory = self._memory.setdefault(alert.fingerprint, _EpisodeMemory())
        memory.audited_waiting.clear()
        if self.diagnostics_enabled and runbook.diagnose:
            self._start_diagnostics(episode, alert, runbook, now_ms, events)
        episode.diagnosed = True
        escalation = self.state.escalation(alert.fingerprint)
        if escalation is None and self.policy.mode in RUNS_STEPS and runbook.remediate:
            since = max(now_ms - self.policy.escalation_window_ms, self._last_ack_ms(alert.fingerprint))
            previous = self.state.remediated_episodes(alert.fingerprint, since, fired_at)
            if should_escalate_recurrence(previous, self.policy):
                self._escalate(episode, "*", f"alert returned after {previous} remediated episodes "
                               f"(max_attempts_before_escalation={self.policy.max_attempts_before_escalation})",
                               now_ms, events)
                escalation = self.state.escalation(alert.fingerprint)
        decisions = self.plan(alert, now_ms, evaluate=False)
        header = f"{runbook.title}\n"
        if escalation is not None:
            header += f"ESCALATED: {escalation['reason']}; automatic action stopped until acknowledged.\n"
            episode.phase = EpisodePhase.ESCALATED
        if decisions:
            events.append(self._event(episode, "suggestion", f"runbook {runbook.id}: {runbook.title}",
                                      header + format_plan(decisions, self.policy), now_ms))
        for decision in decisions:
            if decision.verdict not in (Verdict.RUN, Verdict.DRY_RUN):
                self._audit_decision(episode, decision, now_ms)
                memory.audited_waiting.add(decision.step.name)
        self.state.save_episode(episode)
        return episode

    def _end_episode(self, episode: Episode, now_ms: int) -> None:
        if episode.phase is EpisodePhase.VERIFYING:
            runbook = self.catalogue.get(episode.runbook)
            step = runbook.step(episode.verify_step) if runbook else None
            if step is not None and step.kind in WAIT_KINDS:
                self._audit(episode, episode.verify_step, Decision.SKIPPED, "the alert resolved during the wait",
                            now_ms)
            else:
                self._audit(episode, episode.verify_step, Decision.VERIFIED, "the alert resolved", now_ms)
        if episode.phase is not EpisodePhase.ESCALATED:
            episode.phase = EpisodePhase.RESOLVED
        episode.ended_ms = now_ms
        self.state.save_episode(episode)
        self._episodes.pop(episode.fingerprint, None)
        self._memory.pop(episode.fingerprint, None)
        dropped = [a for a in self._approvals if a.fingerprint == episode.fingerprint]
        for approval in dropped:
            self._audit(episode, approval.step, Decision.SKIPPED, "approval dropped: the alert resolved", now_ms,
                        actor=approval.user)
        self._approvals = [a for a in self._approvals if a.fingerprint != episode.fingerprint]

    def _last_ack_ms(self, fingerprint: str) -> int:
        rows = self.state.db.query(
            "SELECT MAX(ts_ms) AS t FROM runbook_audit WHERE fingerprint = ? AND decision = 'acknowledged'",
            (fingerprint,))
        return int(rows[0]["t"] or 0) if rows else 0

    # -- the walk -----------------------------------------------------------------------------------

    def _advance(self, episode: Episode, alert: Alert, runbook: Runbook, now_ms: int,
                 events: list[RunbookEvent]) -> None:
        if episode.phase is EpisodePhase.RUNNING:
            return
        if self._run_approved(episode, alert, runbook, now_ms, events):
            return
        if episode.phase is EpisodePhase.VERIFYING:
            self._poll_verify(episode, now_ms, events)
            if episode.phase is not EpisodePhase.ACTIVE:
                return
        if self.policy.mode is not RemediationMode.AUTO or episode.phase is not EpisodePhase.ACTIVE:
            return
        if self.state.escalation(episode.fingerprint) is not None:
            episode.phase = EpisodePhase.ESCALATED
            self.state.save_episode(episode)
            return
        memory = self._memory.setdefault(episode.fingerprint, _EpisodeMemory())
        while episode.step_index < len(runbook.remediate):
            index = episode.step_index
            step = runbook.remediate[index]
            decision = self._decide(step, alert, now_ms, escalated=False, evaluate=True)
            verdict = decision.verdict
            if verdict is Verdict.RUN and step.kind in WAIT_KINDS:
                self._start_wait(episode, step, decision, now_ms, events, walk_index=index)
                if episode.phase is EpisodePhase.ACTIVE:
                    continue
                return
            if verdict is Verdict.RUN:
                self._submit(episode, runbook, step, decision, alert, now_ms, walk_index=index)
                return
            if verdict is Verdict.DRY_RUN:
                self._audit_decision(episode, decision, now_ms)
                events.append(self._event(episode, "decision", f"{step.name}: dry run",
                                          f"would run: {decision.action.display if decision.action else ''}",
                                          now_ms))
                episode.step_index += 1
                continue
            if verdict is Verdict.SKIP and decision.requires_not_met:
                self._audit_decision(episode, decision, now_ms)
                episode.step_index += 1
                continue
            if step.name not in memory.audited_waiting:
                self._audit_decision(episode, decision, now_ms)
                memory.audited_waiting.add(step.name)
                if verdict in (Verdict.SKIP, Verdict.REFUSE):
                    events.append(self._event(episode, "decision", f"{step.name}: {verdict.value}",
                                              decision.reason, now_ms))
            episode.phase = EpisodePhase.WAITING
            self.state.save_episode(episode)
            return
        episode.phase = EpisodePhase.DONE
        self.state.save_episode(episode)

    def _run_approved(self, episode: Episode, alert: Alert, runbook: Runbook, now_ms: int,
                      events: list[RunbookEvent]) -> bool:
        """Run the first queued approval of this alert; True when a step was submitted."""
        for approval in list(self._approvals):
            if approval.fingerprint != episode.fingerprint:
                continue
            self._approvals.remove(approval)
            step = runbook.step(approval.step)
            if step is None:
                continue
            decision = self._decide(step, alert, now_ms, escalated=False, evaluate=True, approved=True)
            if decision.verdict is Verdict.RUN:
                walk = episode.step_index if (episode.phase is EpisodePhase.WAITING and episode.step_index
                                              < len(runbook.remediate) and runbook.remediate[
                                                  episode.step_index].name == step.name) else None
                if step.kind in WAIT_KINDS:
                    self._start_wait(episode, step, decision, now_ms, events, walk_index=walk,
                                     actor=approval.user)
                    return episode.phase is not EpisodePhase.ACTIVE
                self._submit(episode, runbook, step, decision, alert, now_ms, actor=approval.user,
                             walk_index=walk)
                return True
            self._audit_decision(episode, decision, now_ms, actor=approval.user)
            events.append(self._event(episode, "decision", f"{step.name}: {decision.verdict.value}",
                                      decision.reason, now_ms))
        return False

    def _poll_verify(self, episode: Episode, now_ms: int, events: list[RunbookEvent]) -> None:
        alert = self._memory.get(episode.fingerprint, _EpisodeMemory()).alert
        runbook = self.catalogue.get(episode.runbook)
        step = runbook.step(episode.verify_step) if runbook else None
        if step is not None and step.kind in WAIT_KINDS and alert is not None and runbook is not None:
            self._poll_wait(episode, runbook, step, alert, now_ms, events)
            return
        if step is None or step.guards.verify is None or alert is None:
            episode.phase = EpisodePhase.WAITING
            self.state.save_episode(episode)
            return
        rendered = self._render(step, alert)
        condition = self.conditions(rendered.verify_expr, now_ms) if rendered.verify_expr else None
        if condition is not None and condition.holds:
            self._audit(episode, step.name, Decision.VERIFIED, f"{rendered.verify_expr} holds ({condition.detail})",
                        now_ms)
            events.append(self._event(episode, "decision", f"{step.name}: verified",
                                      f"{rendered.verify_expr} holds", now_ms))
            if runbook is not None and self._serving_steps_after(runbook, step.name):
                # A sequence that drained an engine goes on to its canary and readmit.
                self._step_done(episode, runbook, step.name)
            else:
                episode.phase = EpisodePhase.DONE
                self.state.save_episode(episode)
            return
        if now_ms >= episode.verify_deadline_ms:
            detail = condition.detail if condition is not None else rendered.error
            self._escalate(episode, step.name, f"verify did not hold within "
                           f"{step.guards.verify.timeout_s:g}s: {rendered.verify_expr} ({detail})",
                           now_ms, events)

    # -- serving sequences: waits, and the tail after the alert resolved -------------------------------

    def _start_wait(self, episode: Episode, step: Step, decision: StepDecision, now_ms: int,
                    events: list[RunbookEvent], *, walk_index: int | None, actor: str = "agent") -> None:
        """Begin a ``wait_idle`` or ``canary`` step: audited ``started``, then polled on each tick (this one
        included) in phase ``verifying`` until it holds or its limit passes."""
        action = decision.action
        assert action is not None
        self._audit_decision(episode, decision, now_ms, actor=actor, decision_name=Decision.STARTED)
        events.append(self._event(episode, "decision", f"{step.name}: waiting", action.display, now_ms))
        memory = self._memory.setdefault(episode.fingerprint, _EpisodeMemory())
        if step.kind == "canary":
            memory.canary = CanaryProgress()
        if walk_index is not None:
            episode.step_index = walk_index
        episode.phase = EpisodePhase.VERIFYING
        episode.verify_step = step.name
        episode.verify_deadline_ms = now_ms + int(action.wait_s * 1000)
        self.state.save_episode(episode)
        runbook = self.catalogue.get(episode.runbook)
        if runbook is not None and memory.alert is not None:
            self._poll_wait(episode, runbook, step, memory.alert, now_ms, events)

    def _poll_wait(self, episode: Episode, runbook: Runbook, step: Step, alert: Alert, now_ms: int,
                   events: list[RunbookEvent]) -> None:
        rendered = self._render(step, alert)
        action = rendered.action
        if action is None:
            self._escalate(episode, step.name, f"{step.name} can no longer be rendered: {rendered.error}", now_ms,
                           events)
            return
        if step.kind == "wait_idle":
            status: WaitStatus = poll_idle(action, self.readings, now_ms)
        else:
            memory = self._memory.setdefault(episode.fingerprint, _EpisodeMemory())
            status = memory.canary.poll(action, self.readings, now_ms)
        if status.done:
            self._audit(episode, step.name, Decision.RAN, status.detail, now_ms, action=action)
            events.append(self._event(episode, "result", f"{step.name}: done", status.detail, now_ms))
            self._step_done(episode, runbook, step.name)
            return
        if now_ms < episode.verify_deadline_ms:
            return
        limit = format_duration(action.wait_s)
        if step.kind == "wait_idle" and action.on_timeout == "continue":
            reason = f"not idle within {limit} ({status.detail}); on_timeout: continue"
            self._audit(episode, step.name, Decision.RAN, reason, now_ms, action=action)
            events.append(self._event(episode, "result", f"{step.name}: timed out, going on", reason, now_ms))
            self._step_done(episode, runbook, step.name)
            return
        what = "no idle reading" if step.kind == "wait_idle" else f"fewer than {action.passes} passing probes in a row"
        reason = f"{what} within {limit}: {status.detail}"
        self._audit(episode, step.name, Decision.FAILED, reason, now_ms, action=action)
        drained = "; the engines stay drained until a human readmits them" if step.kind == "canary" else ""
        self._escalate(episode, step.name, f"{step.name}: {reason}{drained}", now_ms, events)

    def _step_done(self, episode: Episode, runbook: Runbook, step_name: str) -> None:
        """A wait (or a verified step) finished: the walk moves past it when it is the walk's current step."""
        index = episode.step_index
        if index < len(runbook.remediate) and runbook.remediate[index].name == step_name:
            episode.step_index = index + 1
            episode.phase = EpisodePhase.ACTIVE
        else:
            episode.phase = EpisodePhase.WAITING
        self.state.save_episode(episode)

    @staticmethod
    def _serving_steps_after(runbook: Runbook, step_name: str) -> bool:
        names = [s.name for s in runbook.remediate]
        if step_name not in names:
            return False
        return any(s.kind in ("canary", "readmit") for s in runbook.remediate[names.index(step_name) + 1:])

    def _finish_serving_tail(self, episode: Episode, now_ms: int, events: list[RunbookEvent]) -> bool:
        """True when ``episode``, whose alert no longer fires, stays open: its runbook still holds a drain
        it owns and has a ``readmit`` ahead. Fixing the fault usually resolves the alert (a restarted engine
        answers its probe) before the canary has passed; ending the episode there would leave the engine
        drained for good. The walk goes on (canary, then readmit) with the alert's last labels."""
        memory = self._memory.get(episode.fingerprint)
        runbook = self.catalogue.get(episode.runbook)
        if (self.policy.mode not in RUNS_STEPS or runbook is None or memory is None or memory.alert is None
                or episode.phase in (EpisodePhase.ESCALATED, EpisodePhase.DONE, EpisodePhase.RESOLVED)):
            return False
        owner = f"runbook:{runbook.id}"
        active = self.manual.active(now_ms / 1000)
        held = False
        for step in runbook.remediate[episode.step_index:]:
            if step.kind != "readmit":
                continue
            action = self._render(step, memory.alert).action
            if action is not None and any(active[j].set_by == owner for j in action.jobs if j in active):
                held = True
        if not held:
            return False
        self._advance(episode, memory.alert, runbook, now_ms, events)
        if episode.phase in (EpisodePhase.DONE, EpisodePhase.ESCALATED):
            self._end_episode(episode, now_ms)
        return True

    def _escalate(self, episode: Episode, step: str, reason: str, now_ms: int,
                  events: list[RunbookEvent]) -> None:
        self.state.escalate(episode.fingerprint, episode.alertname, episode.runbook, now_ms, reason)
        self._audit(episode, step, Decision.ESCALATED, reason, now_ms)
        episode.phase = EpisodePhase.ESCALATED
        self.state.save_episode(episode)
        events.append(self._event(episode, "decision", "escalated to a human",
                                  f"{reason}\nAutomatic action for this alert is stopped until acknowledged.",
                                  now_ms))
        log.warning("runbook escalated", extra={"alertname": episode.alertname, "runbook": episode.runbook,
                                                "step": step, "reason": redact(reason)})

    # -- decisions ----------------------------------------------------------------------------------

    def _context(self, alert: Alert) -> TemplateContext:
        return TemplateContext(labels=alert.labels, config=self.template_config, vars=self.vars, node=self.node)

    def _render(self, step: Step, alert: Alert) -> RenderedStep:
        """``step`` rendered for ``alert``, with ``gpu:`` serving targets resolved from the store."""
        runbook = self.catalogue.for_alert(alert.name, alert.annotations.get("runbook", ""))
        now_ms = self._now_ms()
        return render_step(step, self._context(alert), runbook=runbook.id if runbook else "",
                           engines_on_gpu=lambda gpu: self.readings.engines_on_gpu(gpu, now_ms))

    def _decide(self, step: Step, alert: Alert, now_ms: int, *, escalated: bool, evaluate: bool,
                approved: bool = False) -> StepDecision:
        rendered = self._render(step, alert)
        check = (lambda expr: self.conditions(expr, now_ms)) if evaluate else None
        return plan_step(step, rendered, self.policy, history_from(self.state.target_runs, now_ms), now_ms,
                         approved=approved, escalated=escalated, check=check)

    def _check_human(self, fingerprint: str, step: str, user: str, verb: str, now_ms: int) -> ApprovalResult:
        episode = self._episodes.get(fingerprint)
        problem = ""
        if user not in self.policy.approvers:
            problem = f"{user!r} is not in remediation.approvers"
        elif self.policy.mode not in RUNS_STEPS:
            problem = f"remediation.mode is {self.policy.mode.value}: the agent does not run remediation"
        elif episode is None:
            problem = "no firing alert with this fingerprint"
        else:
            runbook = self.catalogue.get(episode.runbook)
            if runbook is None or runbook.step(step) is None:
                problem = f"runbook {episode.runbook!r} has no remediation step {step!r}"
        if problem:
            self.state.record(AuditRecord(
                now_ms, fingerprint, episode.alertname if episode else "", episode.runbook if episode else "",
                step, Decision(f"{verb}_refused"), problem, actor=user))
            self._counts[(episode.runbook if episode else "", step, f"{verb}_refused")] += 1
            return ApprovalResult(False, problem)
        return ApprovalResult(True, "")

    # -- execution ----------------------------------------------------------------------------------

    def _start_diagnostics(self, episode: Episode, alert: Alert, runbook: Runbook, now_ms: int,
                           events: list[RunbookEvent]) -> None:
        ctx = self._context(alert)
        for step in runbook.diagnose:
            rendered: RenderedStep = render_step(step, ctx)
            action = rendered.action
            problem = rendered.error or (diagnostic_problem(action, self.policy) if action else "")
            if problem or action is None:
                decision = Decision.REFUSED if rendered.refused else Decision.SKIPPED
                self._audit(episode, step.name, decision, problem, now_ms)
                events.append(self._event(episode, "diagnostics", f"{step.name}: {decision.value}", problem,
                                          now_ms))
                continue
            if self.diagnostics_simulated:  # the node is simulated: say what would run, run nothing
                self._audit(episode, step.name, Decision.SKIPPED, "simulated node: not run", now_ms)
                events.append(self._event(episode, "diagnostics", f"{step.name}: would run (simulated node)",
                                          f"$ {action.display}", now_ms))
                continue
            timeout = min(step.timeout_s, self.diagnostics_timeout_s)
            future = self._diagnostics_pool.submit(self.executors[action.kind].execute, action, timeout,
                                       self.diagnostics_max_bytes)
            self._jobs.append(_Job(future, episode, runbook, step, "diagnose", action, now_ms))

    def _submit(self, episode: Episode, runbook: Runbook, step: Step, decision: StepDecision, alert: Alert,
                now_ms: int, *, actor: str = "agent", walk_index: int | None = None) -> None:
        action = decision.action
        assert action is not None
        self._audit_decision(episode, decision, now_ms, actor=actor, decision_name=Decision.STARTED)
        rendered = self._render(step, alert)
        future = self._pool.submit(self.executors[action.kind].execute, action, step.timeout_s,
                                   self.max_output_bytes)
        self._jobs.append(_Job(future, episode, runbook, step, "remediate", action, now_ms, actor,
                               rendered.verify_expr, walk_index))
        if action.kind != "notify":
            episode.remediated = True
        episode.phase = EpisodePhase.RUNNING
        if walk_index is not None:
            episode.step_index = walk_index
        self.state.save_episode(episode)

    def _collect_finished(self, now_ms: int, events: list[RunbookEvent]) -> None:
        still: list[_Job] = []
        for job in self._jobs:
            if not job.future.done():
                still.append(job)
                continue
            try:
                result = job.future.result()
            except Exception as exc:  # an executor bug: the boundary that owns the step reports it
                log.exception("runbook executor raised", extra={"step": job.step.name})
                result = ExecResult(None, b"", 0.0, f"executor error: {type(exc).__name__}: {exc}")
            if job.phase == "diagnose":
                self._finish_diagnostic(job, result, now_ms, events)
            else:
                self._finish_remediation(job, result, now_ms, events)
        self._jobs = still

    def _finish_diagnostic(self, job: _Job, result: ExecResult, now_ms: int,
                           events: list[RunbookEvent]) -> None:
        decision = Decision.DIAGNOSED if result.exit_code is not None else Decision.DIAGNOSE_FAILED
        self._audit(job.episode, job.step.name, decision, describe(result), now_ms, action=job.action,
                    result=result)
        body = f"$ {job.action.display}\n({describe(result)})\n"
        body += _text(result.output) + ("\n… (output capped)" if result.truncated else "")
        events.append(self._event(job.episode, "diagnostics", job.step.name, body, now_ms))

    def _finish_remediation(self, job: _Job, result: ExecResult, now_ms: int,
                            events: list[RunbookEvent]) -> None:
        episode, step = job.episode, job.step
        decision = Decision.RAN if result.ok else Decision.FAILED
        self._audit(episode, step.name, decision, describe(result), now_ms, action=job.action, result=result,
                    actor=job.actor)
        if step.kind == "notify":
            events.append(self._event(episode, "decision", step.name, _text(result.output), now_ms))
        else:
            body = f"$ {job.action.display}\n({describe(result)})\n{_text(result.output)}"
            events.append(self._event(episode, "result", f"{step.name}: {decision.value}", body, now_ms))
        if not episode.open or episode.phase is not EpisodePhase.RUNNING:
            self.state.save_episode(episode)
            return
        if not result.ok:
            self._escalate(episode, step.name, f"step {step.name} failed: {describe(result)}", now_ms, events)
            return
        if step.guards.verify is not None and job.verify_expr:
            episode.phase = EpisodePhase.VERIFYING
            episode.verify_step = step.name
            episode.verify_deadline_ms = now_ms + int(step.guards.verify.timeout_s * 1000)
        elif job.walk_index is not None:
            episode.phase = EpisodePhase.ACTIVE
            episode.step_index = job.walk_index + 1
        else:
            episode.phase = EpisodePhase.WAITING
        self.state.save_episode(episode)

    # -- audit and events ---------------------------------------------------------------------------

    def _audit_decision(self, episode: Episode, decision: StepDecision, now_ms: int, *, actor: str = "agent",
                        decision_name: Decision | None = None) -> None:
        self._audit(episode, decision.step.name, decision_name or Decision(decision.verdict.value), decision.reason,
                    now_ms, action=decision.action, actor=actor)

    def _audit(self, episode: Episode, step: str, decision: Decision, reason: str, now_ms: int, *,
               action: RenderedAction | None = None, result: ExecResult | None = None,
               actor: str = "agent") -> None:
        self.state.record(AuditRecord(
            ts_ms=now_ms,
            fingerprint=episode.fingerprint,
            alertname=episode.alertname,
            runbook=episode.runbook,
            step=step,
            decision=decision,
            reason=reason,
            actor=actor,
            action=action.display if action else "",
            action_key=action.key if action else "",
            exit_code=result.exit_code if result else None,
            duration_ms=int(result.duration_s * 1000) if result else None,
            output_sha256=digest(result.output) if result else "",
            dry_run=self.policy.dry_run,
        ))
        self._counts[(episode.runbook, step, decision.value)] += 1

    def _event(self, episode: Episode, kind: str, title: str, text: str, now_ms: int) -> RunbookEvent:
        return RunbookEvent(
            fingerprint=episode.fingerprint,
            alertname=episode.alertname,
            runbook=episode.runbook,
            kind=kind,
            title=redact(title),
            text=redact(text)[:MAX_EVENT_TEXT],
            at_ms=now_ms,
        )

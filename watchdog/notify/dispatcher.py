"""The notification dispatcher: turns each tick's alerts and runbook events into durable outbox rows,
and runs one delivery thread per notifier.

Contract with the agent loop:

- ``handle(alerts, events, now_ms)`` every tick, with ALL alerts the rule engine returns (pending, firing,
  resolved). It derives transitions against the persisted state (newly firing → notified once, resolved
  → notified once, pending → nothing), writes the outbox rows and state changes in ONE transaction, wakes
  the delivery threads and returns; it never touches the network.
- ``reconcile_on_start(alerts)`` once after a restart, with the first alerts of a rule engine rebuilt
  from :class:`watchdog.rules.state_store.RuleStateStore`: alerts still firing are not announced again, alerts that
  resolved while the agent was down are resolved (Slack message updated, thread reply).
- ``self_samples()``: ``watchdog_notifications_total{notifier,outcome}``, ``watchdog_outbox_pending``,
  ``watchdog_notifier_up``, ``watchdog_notification_attempt_failures_total``.
- A notifier failing for ``outbox.failing_alert_after_seconds`` raises ``WatchdogNotifierFailing``
  (labels ``notifier``, ``node``), delivered through the other notifiers only.
- ``close(timeout_seconds)``: deliver what can be delivered in time, stop the threads.
- Storage faults: when the tick's transaction cannot be written (disk full, I/O error), delivery degrades
  to the log: every transition and event is printed at once (to the log notifier's stream, else stderr),
  each once; the persisted state is not advanced, so the same transitions are stored and delivered by
  every notifier once the database is writable again (the log notifier skips what it already printed).
  Each failed write counts in ``watchdog_state_errors_total{kind="write"}``.
"""

from __future__ import annotations

import hashlib
import logging
import random
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from watchdog.config.settings import NotifiersSettings, RemediationMode, Settings, SlackMode
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState, Sample, metric
from watchdog.notify.channels.log import LogNotifier
from watchdog.notify.decisions.grouping import group_transitions
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.decisions.muting import Muting
from watchdog.notify.decisions.silences import AlertmanagerSilences, InhibitRule, SilenceStore
from watchdog.notify.decisions.transitions import Derivation, as_notified, derive_transitions
from watchdog.notify.delivery.base import Notifier, PlanContext
from watchdog.notify.delivery.outbox import PENDING, Outbox, OutboxRow
from watchdog.notify.delivery.state_store import AlertStateStore
from watchdog.notify.delivery.worker import Backoff, DeliveryWorker
from watchdog.notify.registry import NotifierContext, app_token, build_notifiers, prepare_channel_stores
from watchdog.runbooks.events import RunbookEvent

if TYPE_CHECKING:
    from watchdog.notify.channels.slack.approvals import ApprovalListener, RunbookDecisions

log = logging.getLogger("watchdog.notify")

NOTIFIER_FAILING = "WatchdogNotifierFailing"
GC_EVERY_MS = 3_600_000
MAX_UNSTORED_EVENTS = 1000


def notifier_failing_alert(
    notifier: str, node: str, since_ms: int, fired_at_ms: int, failures: int, error: str
) -> Alert:
    """The internal alert about a notifier that keeps failing (pure)."""
    labels = {"alertname": NOTIFIER_FAILING, "severity": "warning", "notifier": notifier, "node": node}
    since = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(since_ms / 1000))
    fingerprint = hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    return Alert(
        name=NOTIFIER_FAILING,
        labels=labels,
        state=AlertState.FIRING,
        value=float(failures),
        fingerprint=fingerprint,
        active_at_ms=since_ms,
        fired_at_ms=fired_at_ms,
        annotations={
            "summary": f"Notifier {notifier} on {node} keeps failing; its notifications are queued",
            "description": f"{failures} failed attempts since {since}. Last error: {error}",
            "runbook": "notifier-failing",
        },
    )


class NotificationDispatcher:
    """See the module docstring. ``notifiers`` overrides the ones built from the settings (tests)."""

    def __init__(
        self,
        settings: NotifiersSettings,
        db: StateDB,
        node: str,
        clock: Callable[[], float] = time.time,
        *,
        remediation_mode: RemediationMode,
        tick_seconds: float,
        listen: str,
        notifiers: Sequence[Notifier] | None = None,
        stream: TextIO | None = None,
        runbook_title: Callable[[str], str] | None = None,
        start_threads: bool = True,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """``settings`` is the ``notifiers`` section; ``remediation_mode``, ``tick_seconds`` and
        ``listen`` are the other settings notifiers depend on (see :func:`dispatcher_for`)."""
        self.settings = settings
        self.remediation_mode = remediation_mode
        self.node = node or socket.gethostname()
        self.clock = clock
        self.db = db
        outbox = settings.outbox
        self.group_enabled = settings.grouping.enabled
        self.member_labels = settings.grouping.member_labels
        self.failing_after_ms = int(outbox.failing_alert_after_seconds * 1000)
        self.keep_ms = int(outbox.keep_delivered_days * 86_400_000)
        self.state_store = AlertStateStore(db)
        prepare_channel_stores(db)
        self.outbox = Outbox(db)
        self._lock = threading.Lock()
        self._known: dict[str, Alert] = self.state_store.load_alerts()
        self._firing: dict[str, Alert] = {
            fp: k for fp, k in self._known.items() if k.state is AlertState.FIRING
        }
        self._sticky_failing = {
            k.labels.get("notifier", "")
            for k in self._known.values()
            if k.state is AlertState.FIRING and k.name == NOTIFIER_FAILING
        }
        self._last_gc_ms = 0
        self._printed_while_degraded: set[str] = set()
        self._unstored_events: list[RunbookEvent] = []
        self._stream, self._runbook_title = stream, runbook_title
        self._tick_seconds, self._listen = tick_seconds, listen
        built = (list(notifiers) if notifiers is not None
                 else build_notifiers(settings, self._context(remediation_mode, tick_seconds, listen)))
        self.notifiers: dict[str, Notifier] = {n.name: n for n in built}
        backoff = Backoff(outbox.initial_backoff_seconds, outbox.max_backoff_seconds)
        poll = outbox.poll_interval_seconds
        self.workers = {
            name: DeliveryWorker(n, self.outbox, backoff, clock=clock, poll_seconds=poll, rand=rand)
            for name, n in self.notifiers.items()
        }
        self._approvals: ApprovalListener | None = None
        self.muting = self._build_muting(settings)
        self._start_threads = start_threads
        self._rand = rand
        if start_threads:
            for worker in self.workers.values():
                worker.start()
            if self.muting.alertmanager is not None:
                self.muting.alertmanager.start()

    def _context(self, remediation_mode: RemediationMode, tick_seconds: float, listen: str) -> NotifierContext:
        return NotifierContext(
            node=self.node, clock=self.clock, db=self.db, firing_source=self.firing_alerts,
            remediation_mode=remediation_mode, tick_seconds=tick_seconds, listen=listen, stream=self._stream,
            runbook_title=self._runbook_title,
        )

    def reconfigure(self, settings: NotifiersSettings, *, remediation_mode: RemediationMode, tick_seconds: float,
                    listen: str) -> Callable[[], None]:
        """Reload: build the notifiers of new settings now (secrets re-read) and return the step that
        swaps them in. Unchanged settings change nothing. A kept notifier keeps its delivery thread, its
        queue and its failure history (the thread picks the new notifier up between attempts); a disabled
        one stops (its queued rows wait, as after a restart with it disabled); a new one starts."""
        if (settings, remediation_mode, tick_seconds, listen) == (self.settings, self.remediation_mode,
                                                                 self._tick_seconds, self._listen):
            return lambda: None
        built = {n.name: n for n in build_notifiers(settings, self._context(remediation_mode, tick_seconds, listen))}

        def apply() -> None:
            old_slack, old_mode = self.settings.slack, self.remediation_mode
            with self._lock:
                self.settings, self.remediation_mode = settings, remediation_mode
                self._tick_seconds, self._listen = tick_seconds, listen
                self.group_enabled = settings.grouping.enabled
                self.member_labels = settings.grouping.member_labels
                self.failing_after_ms = int(settings.outbox.failing_alert_after_seconds * 1000)
                self.keep_ms = int(settings.outbox.keep_delivered_days * 86_400_000)
                backoff = Backoff(settings.outbox.initial_backoff_seconds, settings.outbox.max_backoff_seconds)
                for name in [n for n in self.workers if n not in built]:
                    self.workers.pop(name).request_stop(0.0)
                    self.notifiers.pop(name).close()
                for name, notifier in built.items():
                    worker = self.workers.get(name)
                    if worker is None:
                        worker = DeliveryWorker(notifier, self.outbox, backoff, clock=self.clock,
                                                poll_seconds=settings.outbox.poll_interval_seconds, rand=self._rand)
                        self.workers[name] = worker
                        if self._start_threads:
                            worker.start()
                    else:
                        worker.reconfigure(notifier, backoff, settings.outbox.poll_interval_seconds)
                    self.notifiers[name] = notifier
            old_muting, self.muting = self.muting, self._build_muting(settings)
            if old_muting.alertmanager is not None:
                old_muting.alertmanager.close()
            if self._start_threads and self.muting.alertmanager is not None:
                self.muting.alertmanager.start()
            if self._approvals is not None and (settings.slack != old_slack or remediation_mode != old_mode):
                self._approvals.close()  # attach_runbooks starts it again when approve mode still wants it
                self._approvals = None

        return apply

    # -- construction ------------------------------------------------------------------------------
    def _build_muting(self, settings: NotifiersSettings) -> Muting:
        """Our silences, ``inhibit_rules``, and Alertmanager's silences for Slack when one is configured."""
        rules = [InhibitRule.from_settings(rule) for rule in settings.inhibit_rules]
        am, slack = settings.alertmanager, settings.slack
        silences = None
        if slack.enabled and slack.honor_alertmanager_silences and am.enabled and am.urls:
            silences = AlertmanagerSilences(list(am.urls), refresh_seconds=am.silences_refresh_seconds,
                                            timeout_seconds=am.timeout_seconds)
        return Muting(SilenceStore(self.db), rules, silences)

    def attach_runbooks(self, manager: RunbookDecisions) -> bool:
        """Wire Slack's buttons (Approve / Skip in approve mode; Acknowledge and Silence always) to
        ``manager`` and the silences when a Slack app token is configured; True if wired.

        Called again (config reload with a new manager), it re-points the running listener."""
        if self._approvals is not None:
            self._approvals.manager = manager
            return True
        slack = self.settings.slack
        if not slack.enabled or slack.mode is not SlackMode.BOT:
            return False
        token = app_token(slack)
        if not token:
            if self.remediation_mode is RemediationMode.APPROVE:
                log.warning("approve mode without a Slack app token: buttons are shown but cannot be received")
            return False
        from watchdog.notify.channels.slack.approvals import AlertButtons, ApprovalListener

        self._approvals = ApprovalListener(token, list(slack.approvers), manager, base_url=slack.base_url,
                                           buttons=AlertButtons(self.state_store, self.muting.store,
                                                                clock=self.clock))
        self._approvals.start()
        return True

    # -- the tick ----------------------------------------------------------------------------------
    def firing_alerts(self) -> list[Alert]:
        """The alerts firing now (latest values), for Alertmanager's periodic re-send."""
        with self._lock:
            muted = self.muting.muted("alertmanager")
            return [alert for fp, alert in self._firing.items() if fp not in muted]

    def _internal_alerts(self, now_ms: int) -> list[Alert]:
        out = []
        for name, worker in self.workers.items():
            _, failures, since_ms = worker.stats.snapshot()
            sticky = name in self._sticky_failing and worker.stats.successes == 0
            if sticky and not since_ms:
                since_ms = now_ms - self.failing_after_ms
            if since_ms and (now_ms - since_ms >= self.failing_after_ms or sticky):
                out.append(
                    notifier_failing_alert(
                        name,
                        self.node,
                        since_ms,
                        since_ms + self.failing_after_ms,
                        failures,
                        worker.stats.last_error,
                    )
                )
        return out

    @staticmethod
    def _excluded(group: GroupNotification) -> str:
        lead = group.lead
        return lead.labels.get("notifier", "") if lead.name == NOTIFIER_FAILING else ""

    def handle(self, alerts: list[Alert], events: list[RunbookEvent], now_ms: int,
               causes: Mapping[str, str] | None = None) -> None:
        """Record this tick's transitions and events in the outbox (one transaction); never blocks on I/O.

        ``causes`` maps a symptom alert's fingerprint to its incident's cause (watchdog.notify.decisions.incidents):
        notifiers that thread (Slack) fold the symptom under the cause's message.
        """
        with self._lock:
            events, self._unstored_events = [*self._unstored_events, *events], []
            derivation = derive_transitions(self._known, [*alerts, *self._internal_alerts(now_ms)], now_ms)
            groups = group_transitions(derivation.transitions, now_ms, self.member_labels, self.group_enabled)
            new_known = dict(self._known)
            changed: dict[str, Alert] = {}
            for row in derivation.upserts:
                new_known[row.fingerprint] = changed[row.fingerprint] = row
            for fp in derivation.deletes:
                new_known.pop(fp, None)
            notes = [EventNotification(ev, new_known.get(ev.fingerprint)) for ev in events]
            enqueued = 0
            current = self._current_firing(alerts, new_known)
            firing = [a.labels for a in alerts if a.state is AlertState.FIRING]
            if groups or notes or changed or derivation.deletes or self.muting.changes_due(current, firing, now_ms):
                try:
                    enqueued = self._store_tick(groups, notes, changed, derivation, new_known, now_ms, firing,
                                                dict(causes or {}), current)
                except sqlite3.Error as exc:  # the storage boundary: degrade to the log, retry next tick
                    self.db.note_error("write")
                    log.error("state database not writable: printing notifications to the log until it "
                              "recovers", extra={"error": str(exc)})
                    self._print_degraded(groups, notes, now_ms)
                    self._unstored_events = events[-MAX_UNSTORED_EVENTS:]
                    self._firing = current
                    return
                self._printed_while_degraded.clear()
            self._known = new_known
            self._firing = current
        self._after_store(derivation, enqueued, now_ms)

    def _store_tick(self, groups: list[GroupNotification], notes: list[EventNotification],
                    changed: dict[str, Alert], derivation: Derivation, new_known: dict[str, Alert],
                    now_ms: int, firing: list[dict[str, str]], causes: dict[str, str],
                    still_firing: dict[str, Alert]) -> int:
        """The tick's outbox rows and state changes in one transaction (muted members left out, and muted
        alerts that fire on unmuted announced, see :mod:`watchdog.notify.decisions.muting`; ``firing``: label sets
        of the alerts firing now, for inhibition; ``causes``: symptom fingerprint -> its incident's cause,
        see :mod:`watchdog.notify.decisions.incidents`; ``still_firing``: the alerts firing now, latest values);
        returns how many rows are new."""
        enqueued = 0
        printed = self._degraded_printer()
        self.muting.begin()
        with self.db.transaction() as cur:
            resolved = frozenset(t.alert.fingerprint for t in derivation.transitions if t.kind is AlertState.RESOLVED)
            ctx = PlanContext(cur, now_ms, self.node, new_known, causes=causes, resolved=resolved)
            for name, notifier in self.notifiers.items():
                mine, my_notes = self.muting.apply(
                    name, [g for g in groups if self._excluded(g) != name], notes, firing, now_ms, still_firing)
                for item in notifier.plan(mine, my_notes, ctx):
                    if notifier is printed and item.idem_key in self._printed_while_degraded:
                        continue  # printed while the database was not writable
                    enqueued += Outbox.enqueue(cur, name, item, now_ms)
            for row in changed.values():
                AlertStateStore.upsert_alert(cur, row, now_ms)
            for fp in derivation.deletes:
                AlertStateStore.delete_alert(cur, fp)
            AlertStateStore.mark_sent(
                cur, [t.alert.fingerprint for t in derivation.transitions], now_ms
            )
            self.muting.save(cur)
        self.muting.commit()
        return enqueued

    def _degraded_printer(self) -> LogNotifier | None:
        """The log channel, when enabled: what it prints while the database is not writable is not
        queued for it again once the database recovers."""
        return next((n for n in self.notifiers.values() if isinstance(n, LogNotifier)), None)

    def _print_degraded(self, groups: list[GroupNotification], notes: list[EventNotification], now_ms: int) -> None:
        """Log-only delivery while the database is not writable: each line once (see module docstring)."""
        printer = self._degraded_printer() or LogNotifier(sys.stderr, "json")
        items = [i for i in printer.lines(groups, notes, self.node) if i.idem_key not in self._printed_while_degraded]
        printer.deliver([OutboxRow(0, printer.name, i.idem_key, i.kind, i.payload, PENDING, 0, now_ms, "")
                         for i in items])
        self._printed_while_degraded.update(i.idem_key for i in items)

    def _after_store(self, derivation: Derivation, enqueued: int, now_ms: int) -> None:
        for transition in derivation.transitions:
            log.debug(
                "alert transition",
                extra={
                    "alertname": transition.alert.name,
                    "transition": transition.kind.value,
                    "fingerprint": transition.alert.fingerprint,
                },
            )
        if enqueued:
            for worker in self.workers.values():
                worker.wake()
        if now_ms - self._last_gc_ms >= GC_EVERY_MS:
            self._last_gc_ms = now_ms
            self.outbox.gc(now_ms - self.keep_ms)
            self.state_store.gc(now_ms - self.keep_ms)

    @staticmethod
    def _current_firing(alerts: list[Alert], known: dict[str, Alert]) -> dict[str, Alert]:
        out = {fp: k for fp, k in known.items() if k.state is AlertState.FIRING}
        for alert in alerts:
            k = known.get(alert.fingerprint)
            if alert.state is AlertState.FIRING and k is not None and k.state is AlertState.FIRING:
                out[alert.fingerprint] = as_notified(alert, AlertState.FIRING, k.fired_at_ms)
        return out

    def reconcile_on_start(self, alerts_after_restore: list[Alert]) -> dict[str, int]:
        """After a restart: keep alerts still firing quiet, resolve those gone; returns counts for the log."""
        before = {fp for fp, k in self._known.items() if k.state is AlertState.FIRING}
        now_ms = int(self.clock() * 1000)
        self.handle(alerts_after_restore, [], now_ms)
        after = {fp for fp, k in self._known.items() if k.state is AlertState.FIRING}
        counts = {
            "still_firing": len(before & after),
            "resolved_while_down": len(before - after),
            "newly_firing": len(after - before),
            "queued": sum(self.outbox.pending_counts().values()),
        }
        log.info("notification state reconciled after start", extra=counts)
        return counts

    # -- self-metrics and shutdown -----------------------------------------------------------------
    def self_samples(self) -> list[Sample]:
        """Self-metrics of every notifier (see module docstring)."""
        pending = self.outbox.pending_counts()
        out: list[Sample] = []
        for name, worker in self.workers.items():
            outcomes, failures, _ = worker.stats.snapshot()
            for outcome, count in sorted(outcomes.items()):
                out.append(
                    Sample(metric("watchdog_notifications_total", notifier=name, outcome=outcome), count)
                )
            out.append(Sample(metric("watchdog_outbox_pending", notifier=name), pending.get(name, 0)))
            out.append(Sample(metric("watchdog_notifier_up", notifier=name), 0.0 if failures else 1.0))
            out.append(
                Sample(
                    metric("watchdog_notification_attempt_failures_total", notifier=name),
                    worker.stats.attempt_failures,
                )
            )
        return out

    def close(self, timeout_seconds: float = 5.0) -> None:
        """Deliver what can be delivered within ``timeout_seconds``, then stop threads and notifiers."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        for worker in self.workers.values():
            worker.request_stop(timeout_seconds)
        for name, worker in self.workers.items():
            if not worker.join(max(0.0, deadline - time.monotonic()) + 0.5):
                log.warning(
                    "notifier thread still busy at shutdown; its rows stay queued", extra={"notifier": name}
                )
        for notifier in self.notifiers.values():
            notifier.close()
        if self.muting.alertmanager is not None:
            self.muting.alertmanager.close()
        if self._approvals is not None:
            self._approvals.close()


def dispatcher_for(settings: Settings, db: StateDB, node: str, clock: Callable[[], float] = time.time, *,
                   notifiers: Sequence[Notifier] | None = None, stream: TextIO | None = None,
                   runbook_title: Callable[[str], str] | None = None, start_threads: bool = True,
                   rand: Callable[[], float] = random.random) -> NotificationDispatcher:
    """The dispatcher of a node's settings: its ``notifiers`` section plus what notifiers depend on."""
    return NotificationDispatcher(settings.notifiers, db, node, clock, remediation_mode=settings.remediation.mode,
                                  tick_seconds=settings.tick_interval_seconds, listen=settings.listen,
                                  notifiers=notifiers, stream=stream, runbook_title=runbook_title,
                                  start_threads=start_threads, rand=rand)

"""Node signals the scheduler obeys: the agent's own Node's condition and taint, suggested or set.

The agent calls :meth:`NodeSignaller.on_alerts` once per tick with every alert. The policy is
:func:`watchdog.kube.signals.decide`; this module acts on its changes only:

- ``suggest`` (the default): one ``suggestion`` event per change, in the lead alert's notification
  thread, carrying the exact ``kubectl`` argv lists; an audit row ``suggested``. The cluster is untouched.
- ``execute``: read the Node, write only what differs (the taint list through ``nodes``, then the
  condition through ``nodes/status``), audited ``started`` before and ``ran``/``failed`` after, in the runbook audit
  table (step :data:`STEP`, action key ``kubernetes:node:NAME``). At most
  ``kubernetes.max_writes_per_hour`` changes per rolling hour, counted from that table (so a restart does
  not reset the budget); a change over it is audited ``refused`` once and retried when the budget allows.
  A failed change is retried every :data:`RETRY_MS` at most, inside the same budget.
- Only changes act: after an operator removes the taint by hand, the agent does not put it back for the
  same fault; a new reason, or the fault clearing and returning, does.
- Never another node: the node name comes from the config or the downward API, and the API client
  refuses any other (:class:`watchdog.kube.api.ForeignNodeRefused`).
- Without a Kubernetes node name (a plain systemd host) nothing is built and nothing is suggested; nor
  when ``kubernetes.node_name`` names another node than the downward API's variable says the pod is on.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from watchdog.config.settings import KubernetesSettings, NodeActionsMode, Settings
from watchdog.infra.state import StateDB
from watchdog.kube.api import KubeApiError, NodeApi, NotInCluster, in_cluster_endpoint, valid_node_name
from watchdog.kube.signals import (
    UNFIT_ALERTS,
    NodeSignal,
    condition,
    decide,
    kubectl_argv,
    taint,
)
from watchdog.model import Alert, AlertState
from watchdog.runbooks.audit import AuditRecord, Decision, RunbookState
from watchdog.runbooks.events import RunbookEvent

log = logging.getLogger(__name__)

STEP = "kubernetes-node-signal"
RUNBOOK = "kubernetes-node"  # the audit's runbook column when no alert leads (a stale signal cleared)
RETRY_MS = 60_000
HOUR_MS = 3_600_000

Write = tuple[str, Callable[[], object]]  # what a request does (audited), and the request


def kube_node_name(settings: KubernetesSettings, environ: Mapping[str, str] = os.environ) -> str:
    """This agent's Kubernetes node: ``kubernetes.node_name``, else the variable it names (empty: none)."""
    return settings.node_name or environ.get(settings.node_name_env, "")


class NodeSignaller:
    """Keeps one Node's ``GpuUnhealthy`` condition and taint in line with the node-unfit GPU alerts."""

    def __init__(self, settings: KubernetesSettings, node: str, state: RunbookState, *, started_ms: int,
                 api: NodeApi | None = None, api_error: str = "") -> None:
        if not valid_node_name(node):
            raise ValueError(f"kubernetes: not a Kubernetes node name: {node[:80]!r}")
        self.settings = settings
        self.node = node
        self.state = state
        self.api = api
        self.api_error = api_error
        self.action_key = f"kubernetes:node:{node}"
        self._applied: tuple[bool, str] | None = None  # the key last suggested or written (None: unknown)
        self._quiet_since_ms: int | None = started_ms
        self._lead: NodeSignal | None = None  # the last unhealthy signal: its thread gets the clear too
        self._refused: tuple[bool, str] | None = None
        self._failed: tuple[bool, str] | None = None
        self._last_try_ms = -RETRY_MS

    @property
    def taint_key(self) -> str | None:
        """The taint's key, or None when ``kubernetes.taint`` is off."""
        return self.settings.taint_key if self.settings.taint else None

    def on_alerts(self, alerts: Sequence[Alert], now_ms: int) -> list[RunbookEvent]:
        """Act on a change of the node's signal; returns the events for the notification threads."""
        active = any(a.name in UNFIT_ALERTS and a.state in (AlertState.PENDING, AlertState.FIRING) for a in alerts)
        if active:
            self._quiet_since_ms = None
        elif self._quiet_since_ms is None:
            self._quiet_since_ms = now_ms
        quiet_ms = 0 if self._quiet_since_ms is None else now_ms - self._quiet_since_ms
        signal = decide(alerts, quiet_ms=quiet_ms, clear_after_ms=int(self.settings.clear_after_seconds * 1000))
        if signal is None or signal.key == self._applied:
            return []
        if self.settings.node_actions is NodeActionsMode.SUGGEST:
            return self._suggest(signal, now_ms)
        return self._execute(signal, now_ms)

    # -- suggest ------------------------------------------------------------------------------------

    def _suggest(self, signal: NodeSignal, now_ms: int) -> list[RunbookEvent]:
        self._applied = signal.key
        if signal.unhealthy:
            self._lead = signal
        lead = self._thread_of(signal)
        if lead is None:
            return []  # healthy, and nothing was suggested since this start: nothing to take back
        commands = kubectl_argv(self.node, signal, condition_type=self.settings.condition_type,
                                taint_key=self.taint_key, now_ms=now_ms)
        lines = "\n".join(shlex.join(argv) for argv in commands)
        self._audit(signal, lead, Decision.SUGGESTED, now_ms, reason="kubernetes.node_actions is suggest",
                    action=lines)
        what = (f"is unfit for new GPU work ({signal.reason}): keep the scheduler off it" if signal.unhealthy
                else "has no node-unfit GPU fault left: let the scheduler use it again")
        text = (f"Kubernetes node {self.node} {what} with:\n{lines}\n"
                "(kubernetes.node_actions: suggest; `execute` lets the agent do this itself.)")
        return [self._event(lead, "suggestion", f"Kubernetes: {self._headline(signal)}", text, now_ms)]

    # -- execute ------------------------------------------------------------------------------------

    def _execute(self, signal: NodeSignal, now_ms: int) -> list[RunbookEvent]:
        lead = self._thread_of(signal)
        if signal.key in (self._failed, self._refused) and now_ms - self._last_try_ms < RETRY_MS:
            return []
        if self.api is None:
            return self._fail(signal, lead, now_ms, f"no API server: {self.api_error}")
        self._last_try_ms = now_ms
        try:
            node = self.api.get_node(self.node)
            writes = self._writes(signal, node, now_ms)
        except KubeApiError as exc:
            return self._fail(signal, lead, now_ms, str(exc))
        if not writes:
            self._done(signal)
            return []
        used = len(self.state.target_runs(self.action_key, now_ms - HOUR_MS))
        if used >= self.settings.max_writes_per_hour:
            if self._refused != signal.key:
                self._refused = signal.key
                self._audit(signal, lead, Decision.REFUSED, now_ms, action="; ".join(w for w, _ in writes),
                            reason=f"rate limit: {used} node changes in the last hour "
                                   f"(kubernetes.max_writes_per_hour {self.settings.max_writes_per_hour})")
            return []
        done: list[str] = []
        self._audit(signal, lead, Decision.STARTED, now_ms, action="; ".join(w for w, _ in writes))
        for what, write in writes:
            try:
                write()
            except KubeApiError as exc:
                return self._fail(signal, lead, now_ms, f"{what}: {exc}", started=True)
            done.append(what)
        self._audit(signal, lead, Decision.RAN, now_ms, action="; ".join(done))
        self._done(signal)
        if lead is None:
            return []
        return [self._event(lead, "decision", f"Kubernetes: {self._headline(signal)}",
                            f"Node {self.node} updated through the API server:\n" + "\n".join(done), now_ms)]

    def _writes(self, signal: NodeSignal, node: Mapping[str, object], now_ms: int) -> list[Write]:
        """What must be written to bring ``node`` (as read) to ``signal``: (description, call) pairs."""
        api = self.api
        assert api is not None
        status = node.get("status") if isinstance(node.get("status"), dict) else {}
        spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
        metadata = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
        assert isinstance(status, dict) and isinstance(spec, dict) and isinstance(metadata, dict)
        writes: list[Write] = []
        ctype = self.settings.condition_type
        current = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == ctype),
                       None)
        wanted_status = "True" if signal.unhealthy else "False"
        wanted_pair = (wanted_status, signal.reason)
        differs = current is not None and (current.get("status"), current.get("reason")) != wanted_pair
        if (current is None and signal.unhealthy) or differs:
            since = None
            if current is not None and current.get("status") == wanted_status:
                since = _parse_ms(str(current.get("lastTransitionTime", "")))
            cond = condition(signal, ctype, now_ms, since)
            writes.append((f"PATCH /api/v1/nodes/{self.node}/status condition {ctype}={wanted_status} "
                           f"reason {signal.reason}", lambda: api.set_condition(self.node, cond)))
        taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
        key = self.taint_key
        if key is None:
            key = self.settings.taint_key  # taint off: still remove one this agent set before
        others = [t for t in taints if t.get("key") != key]
        wanted = [*others, taint(signal, key)] if signal.unhealthy and self.taint_key else others
        if wanted != taints:
            version = str(metadata.get("resourceVersion", ""))
            change = (f"add taint {key}={signal.reason}:NoSchedule" if signal.unhealthy and self.taint_key
                      else f"remove taint {key}")
            # First: the taint is what the scheduler obeys, and its test needs the version just read
            # (the status patch would move it on).
            writes.insert(0, (f"PATCH /api/v1/nodes/{self.node} {change}",
                              lambda: api.replace_taints(self.node, version, wanted)))
        return writes

    def _fail(self, signal: NodeSignal, lead: NodeSignal | None, now_ms: int, why: str,
              started: bool = False) -> list[RunbookEvent]:
        self._last_try_ms = now_ms
        first = self._failed != signal.key
        self._failed = signal.key
        if started or first:
            self._audit(signal, lead, Decision.FAILED, now_ms, reason=why)
        if not first or lead is None:
            return []
        log.error("kubernetes node update failed", extra={"node": self.node, "reason": why})
        return [self._event(lead, "decision", f"Kubernetes: could not update node {self.node}",
                            f"{self._headline(signal)} failed: {why}\nRetried at most every "
                            f"{RETRY_MS // 1000} s within kubernetes.max_writes_per_hour.", now_ms)]

    def _done(self, signal: NodeSignal) -> None:
        self._applied = signal.key
        self._refused = self._failed = None
        if signal.unhealthy:
            self._lead = signal

    # -- shared -------------------------------------------------------------------------------------

    def _thread_of(self, signal: NodeSignal) -> NodeSignal | None:
        """The unhealthy signal whose alert thread a change belongs to (None: no alert to attach to)."""
        return signal if signal.unhealthy else self._lead

    def _headline(self, signal: NodeSignal) -> str:
        if signal.unhealthy:
            taint_text = f" and taint {self.taint_key}={signal.reason}:NoSchedule" if self.taint_key else ""
            return f"node {self.node} condition {self.settings.condition_type}=True ({signal.reason}){taint_text}"
        taint_text = f", taint {self.settings.taint_key} removed" if self.taint_key else ""
        return f"node {self.node} condition {self.settings.condition_type}=False{taint_text}"

    def _event(self, lead: NodeSignal, kind: str, title: str, text: str, now_ms: int) -> RunbookEvent:
        return RunbookEvent(lead.fingerprint, lead.alertname, lead.runbook or RUNBOOK, kind, title, text, now_ms)

    def _audit(self, signal: NodeSignal, lead: NodeSignal | None, decision: Decision, now_ms: int, *,
               reason: str = "", action: str = "") -> None:
        self.state.record(AuditRecord(
            ts_ms=now_ms, fingerprint=lead.fingerprint if lead else "",
            alertname=lead.alertname if lead else self.settings.condition_type,
            runbook=(lead.runbook if lead else "") or RUNBOOK, step=STEP, decision=decision,
            reason=reason or f"{self.settings.condition_type}: {signal.reason}", action=action,
            action_key=self.action_key))


def _parse_ms(text: str) -> int | None:
    """Milliseconds of an RFC 3339 time as the API server writes it (None if unreadable)."""
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def build_node_signaller(settings: Settings, db: StateDB, now_ms: int,
                         environ: Mapping[str, str] = os.environ) -> NodeSignaller | None:
    """The signaller the config asks for; None when node actions are off or no Kubernetes node is known."""
    kube = settings.kubernetes
    if kube.node_actions is NodeActionsMode.OFF:
        return None
    node = kube_node_name(kube, environ)
    if not node:
        return None  # not on Kubernetes: no node to signal
    downward = environ.get(kube.node_name_env, "")
    if downward and downward != node:
        # The pod runs on `downward`: signalling the configured name would touch another node.
        log.error("kubernetes.node_name is not the node this pod runs on; node actions disabled",
                  extra={"node_name": node, kube.node_name_env: downward})
        return None
    api, api_error = None, ""
    if kube.node_actions is NodeActionsMode.EXECUTE:
        try:
            api = NodeApi(in_cluster_endpoint(environ), node, timeout=kube.api_timeout_seconds)
        except NotInCluster as exc:
            api_error = str(exc)
            log.error("kubernetes.node_actions is execute but there is no API server", extra={"reason": api_error})
    return NodeSignaller(kube, node, RunbookState(db), started_ms=now_ms, api=api, api_error=api_error)


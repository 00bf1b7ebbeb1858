"""Slack buttons received over Socket Mode: Approve / Skip (``remediation.mode: approve``), Acknowledge and
Silence.

Approve, Skip and Silence are honoured only for Slack user ids in ``notifiers.slack.approvers``; a click by
anyone else is refused and logged. Acknowledge is honoured for anyone in the channel. Approve / Skip call
the runbook manager (``approve(fingerprint, step, user)`` / ``skip(...)``), which audits the decision and
posts it to the thread. Acknowledge and Silence go to :class:`AlertButtons`: Silence stores a silence of
the alert's exact labels (less ``severity``) for :data:`SILENCE_BUTTON_HOURS` (see
:mod:`watchdog.notify.decisions.silences`); both answer in the alert's thread with who did what.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from watchdog.notify.channels.slack.blocks import (
    ACK_ACTION,
    APPROVE_ACTION,
    SILENCE_ACTION,
    SILENCE_BUTTON_HOURS,
    SKIP_ACTION,
)
from watchdog.notify.decisions.silences import Matcher, SilenceStore
from watchdog.notify.delivery.state_store import AlertStateStore
from watchdog.runbooks.events import RunbookEvent

if TYPE_CHECKING:
    from slack_sdk.socket_mode.client import BaseSocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest

    from watchdog.runbooks.manager import ApprovalResult

log = logging.getLogger("watchdog.notify.approvals")


class RunbookDecisions(Protocol):
    """The slice of ``RunbookManager`` the buttons drive."""

    def approve(self, fingerprint: str, step: str, user: str) -> ApprovalResult:
        """A human approved running ``step`` for the alert."""
        ...

    def skip(self, fingerprint: str, step: str, user: str) -> ApprovalResult:
        """A human chose not to run ``step``."""
        ...


# One step of the runbook planner's suggestion text: "2. restart [systemd] ..." then "   → verdict: why".
_PLAN_STEP = re.compile(r"^\d+\. (?P<step>\S+) \[[^\]]*\]")
_PLAN_VERDICT = re.compile(r"^\s+→ (?P<verdict>[a-z_]+):")
AWAITING_APPROVAL = "awaiting_approval"


def approvable_steps(event: RunbookEvent) -> tuple[str, ...]:
    """Steps of a ``suggestion`` event that wait for a human: those whose verdict is ``awaiting_approval``
    in the planner's suggestion text (``format_plan``). Pure."""
    if event.kind != "suggestion":
        return ()
    found: list[str] = []
    current = ""
    for line in event.text.splitlines():
        step = _PLAN_STEP.match(line)
        if step:
            current = step.group("step")
            continue
        verdict = _PLAN_VERDICT.match(line)
        if verdict and current and verdict.group("verdict") == AWAITING_APPROVAL:
            found.append(current)
            current = ""
    return tuple(found)


ACTIONS = {APPROVE_ACTION: "approve", SKIP_ACTION: "skip", ACK_ACTION: "ack", SILENCE_ACTION: "silence"}


@dataclass(frozen=True)
class Interaction:
    """One button click: what, on which alert and step, by whom, whether that user may, and where."""

    action: str  # approve | skip | ack | silence
    fingerprint: str
    step: str
    user: str
    allowed: bool
    channel: str = ""
    thread_ts: str = ""


class AlertButtons:
    """Acknowledge and Silence: look the alert up, store a silence, say so in the thread."""

    def __init__(self, alerts: AlertStateStore, silences: SilenceStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.alerts = alerts
        self.silences = silences
        self.clock = clock

    def acknowledge(self, fingerprint: str, user: str) -> str:
        """The thread reply for an acknowledgement."""
        known = self.alerts.load_alerts().get(fingerprint)
        name = known.name if known is not None else "this alert"
        log.info("alert acknowledged", extra={"fingerprint": fingerprint, "user": user})
        return f":eyes: <@{user}> acknowledged {name}."

    def silence(self, fingerprint: str, user: str) -> str:
        """Silence the alert's exact labels; the thread reply (or why not)."""
        known = self.alerts.load_alerts().get(fingerprint)
        if known is None:
            return "Cannot silence: the alert is no longer known here (it resolved)."
        labels = {k: v for k, v in known.labels.items() if k != "severity"}
        now_ms = int(self.clock() * 1000)
        silence = self.silences.add([Matcher(k, "=", v) for k, v in sorted(labels.items())], now_ms,
                                    now_ms + SILENCE_BUTTON_HOURS * 3_600_000, f"slack:{user}",
                                    "silenced from Slack", now_ms)
        log.info("alert silenced from Slack", extra={"fingerprint": fingerprint, "user": user,
                                                     "silence": silence.id})
        return (f":mute: <@{user}> silenced {known.name} for {SILENCE_BUTTON_HOURS}h "
                f"(`inference-watchdog silence expire {silence.id[:12]}` ends it).")


def parse_interaction(payload: dict[str, Any], approvers: Collection[str]) -> list[Interaction]:
    """The watchdog button clicks in a ``block_actions`` payload (pure; other payloads give [])."""
    if payload.get("type") != "block_actions":
        return []
    user = str((payload.get("user") or {}).get("id", ""))
    message = payload.get("message") or {}
    channel = str((payload.get("channel") or {}).get("id", ""))
    thread_ts = str(message.get("thread_ts") or message.get("ts") or
                    (payload.get("container") or {}).get("message_ts", ""))
    out = []
    for action in payload.get("actions") or []:
        kind = ACTIONS.get(str(action.get("action_id")))
        if kind is None:
            continue
        try:
            value = json.loads(action.get("value") or "{}")
        except json.JSONDecodeError:
            continue
        allowed = bool(user) and (kind == "ack" or user in set(approvers))
        out.append(Interaction(kind, str(value.get("fingerprint", "")), str(value.get("step", "")), user,
                               allowed, channel, thread_ts))
    return out


def apply_interactions(interactions: list[Interaction], manager: RunbookDecisions,
                       buttons: AlertButtons | None = None,
                       reply: Callable[[str, str, str], None] | None = None) -> int:
    """Act on allowed clicks (refused ones are logged); ``reply(channel, thread_ts, text)`` answers
    Acknowledge / Silence in the thread. Returns how many were honoured."""
    honoured = 0
    for it in interactions:
        if not it.allowed:
            log.warning(
                "button click refused: user not in approvers",
                extra={"user": it.user, "fingerprint": it.fingerprint, "step": it.step, "action": it.action},
            )
            continue
        if it.action == "approve":
            manager.approve(it.fingerprint, it.step, it.user)
        elif it.action == "skip":
            manager.skip(it.fingerprint, it.step, it.user)
        elif buttons is None:
            continue
        else:
            text = (buttons.acknowledge if it.action == "ack" else buttons.silence)(it.fingerprint, it.user)
            if reply is not None and it.channel:
                reply(it.channel, it.thread_ts, text)
        honoured += 1
    return honoured


class ApprovalListener:
    """A Socket Mode connection that acknowledges interactive requests and applies allowed clicks."""

    def __init__(
        self,
        app_token: str,
        approvers: Collection[str],
        manager: RunbookDecisions,
        base_url: str = "https://slack.com/api/",
        buttons: AlertButtons | None = None,
    ) -> None:
        from slack_sdk.socket_mode import SocketModeClient
        from slack_sdk.web import WebClient

        self.approvers = tuple(approvers)
        self.manager = manager
        self.buttons = buttons
        self.client = SocketModeClient(app_token=app_token, web_client=WebClient(base_url=base_url))
        self.client.socket_mode_request_listeners.append(self._on_request)

    def _on_request(self, client: BaseSocketModeClient, request: SocketModeRequest) -> None:
        from slack_sdk.socket_mode.response import SocketModeResponse

        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            apply_interactions(parse_interaction(request.payload or {}, self.approvers), self.manager,
                               self.buttons, self._reply)

    def _reply(self, channel: str, thread_ts: str, text: str) -> None:
        self.client.web_client.chat_postMessage(channel=channel, thread_ts=thread_ts or None, text=text)

    def start(self) -> None:
        """Connect (in the SDK's own threads)."""
        self.client.connect()

    def close(self) -> None:
        """Disconnect."""
        self.client.close()

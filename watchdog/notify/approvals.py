"""Approve / Skip buttons (``remediation.mode: approve``) received over Slack Socket Mode.

Only Slack user ids in ``notifiers.slack.approvers`` are honoured; a click by anyone else is refused and
logged. Honoured clicks call the runbook manager (``approve(fingerprint, step, user)`` /
``skip(fingerprint, step, user)``), which audits the decision like every other and posts it to the thread.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from watchdog.notify.slack_blocks import APPROVE_ACTION, SKIP_ACTION
from watchdog.runbooks.events import RunbookEvent

log = logging.getLogger("watchdog.notify.approvals")


class RunbookDecisions(Protocol):
    """The slice of ``RunbookManager`` the buttons drive."""

    def approve(self, fingerprint: str, step: str, user: str) -> Any:
        """A human approved running ``step`` for the alert."""
        ...

    def skip(self, fingerprint: str, step: str, user: str) -> Any:
        """A human chose not to run ``step``."""
        ...


# One step of the runbook planner's suggestion text: "2. restart [systemd] ..." then "   → verdict: why".
_PLAN_STEP = re.compile(r"^\d+\. (?P<step>\S+) \[[^\]]*\]")
_PLAN_VERDICT = re.compile(r"^\s+→ (?P<verdict>[a-z_]+):")
AWAITING_APPROVAL = "awaiting_approval"


def approvable_steps(event: RunbookEvent) -> tuple[str, ...]:
    """Steps of a ``suggestion`` event that wait for a human: the event's ``steps`` attribute when the
    runbook side provides one, else the steps whose verdict is ``awaiting_approval`` in the planner's
    suggestion text (``format_plan``). Pure."""
    if event.kind != "suggestion":
        return ()
    explicit = getattr(event, "steps", None)
    if explicit:
        return tuple(str(s) for s in explicit)
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


@dataclass(frozen=True)
class Interaction:
    """One button click: what, on which alert and step, by whom, and whether that user may decide."""

    action: str  # approve | skip
    fingerprint: str
    step: str
    user: str
    allowed: bool


def parse_interaction(payload: dict[str, Any], approvers: Collection[str]) -> list[Interaction]:
    """The watchdog button clicks in a ``block_actions`` payload (pure; other payloads give [])."""
    if payload.get("type") != "block_actions":
        return []
    user = str((payload.get("user") or {}).get("id", ""))
    out = []
    for action in payload.get("actions") or []:
        action_id = action.get("action_id")
        if action_id not in (APPROVE_ACTION, SKIP_ACTION):
            continue
        try:
            value = json.loads(action.get("value") or "{}")
        except json.JSONDecodeError:
            continue
        out.append(
            Interaction(
                action="approve" if action_id == APPROVE_ACTION else "skip",
                fingerprint=str(value.get("fingerprint", "")),
                step=str(value.get("step", "")),
                user=user,
                allowed=bool(user) and user in set(approvers),
            )
        )
    return out


def apply_interactions(interactions: list[Interaction], manager: RunbookDecisions) -> int:
    """Call the manager for allowed clicks; refused ones are logged. Returns how many were honoured."""
    honoured = 0
    for it in interactions:
        if not it.allowed:
            log.warning(
                "approval click refused: user not in approvers",
                extra={"user": it.user, "fingerprint": it.fingerprint, "step": it.step, "action": it.action},
            )
            continue
        if it.action == "approve":
            manager.approve(it.fingerprint, it.step, it.user)
        else:
            manager.skip(it.fingerprint, it.step, it.user)
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
    ) -> None:
        from slack_sdk.socket_mode import SocketModeClient
        from slack_sdk.web import WebClient

        self.approvers = tuple(approvers)
        self.manager = manager
        self.client = SocketModeClient(app_token=app_token, web_client=WebClient(base_url=base_url))
        self.client.socket_mode_request_listeners.append(self._on_request)

    def _on_request(self, client: Any, request: Any) -> None:
        from slack_sdk.socket_mode.response import SocketModeResponse

        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            apply_interactions(parse_interaction(request.payload or {}, self.approvers), self.manager)

    def start(self) -> None:
        """Connect (in the SDK's own threads)."""
        self.client.connect()

    def close(self) -> None:
        """Disconnect."""
        self.client.close()

"""The log notifier: firing and resolved alerts (and runbook events) as one structured line each.

JSON lines when the stream is not a terminal (journald, files, pipes), aligned human lines on a terminal.
It goes through the outbox like every notifier, so a line is printed at least once (a crash between the
write and the commit prints it again: the log is the one notifier where that is acceptable).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

from watchdog.infra.logs import redact
from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.grouping import member_description
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.delivery.base import Delivered, PlanContext
from watchdog.notify.delivery.outbox import OutboxItem, OutboxRow


def _iso(ms: int) -> str:
    if not ms:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def alert_fields(kind: AlertState, alert: Alert, node: str, group: GroupNotification) -> dict[str, Any]:
    """The structured fields of one alert line (pure)."""
    fields: dict[str, Any] = {
        "event": f"alert_{kind.value}",
        "alertname": alert.name,
        "severity": alert.severity,
        "node": alert.labels.get("node", node),
        "summary": alert.annotations.get("summary", ""),
        "description": alert.annotations.get("description", ""),
        "value": alert.value,
        "labels": alert.labels,
        "fingerprint": alert.fingerprint,
        "fired_at": _iso(alert.fired_at_ms),
    }
    if kind is not AlertState.FIRING:
        fields["resolved_at"] = _iso(alert.resolved_at_ms)
    if alert.annotations.get("runbook"):
        fields["runbook"] = alert.annotations["runbook"]
    if len(group.members) > 1:
        fields["group_size"] = len(group.members)
    return fields


NAME_WIDTH = 26
INDENT = " " * 9  # under the text after "HH:MM:SS "
SHORT_KINDS = {"diagnostics": "diagnose", "suggestion": "suggest"}  # 8 columns, like the severity
FOLD_LINES = 3  # diagnostics and results: the first lines, then how many more


def _value(value: Any) -> str:
    """A value with sensible precision: ``125``, ``0.973``, ``1.2e+06``."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _fold(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    shown = lines[:FOLD_LINES]
    if len(lines) > FOLD_LINES:
        shown.append(f"… {len(lines) - FOLD_LINES} more line(s) (JSON log, Slack thread)")
    return shown


def format_text(fields: dict[str, Any]) -> str:
    """Human form for a terminal: one aligned line per event (state, severity, alert, labels, summary,
    value); a runbook suggestion as an indented numbered list; diagnostics and results folded."""
    event = str(fields.get("event", ""))
    name = str(fields.get("alertname", ""))
    if event.startswith("alert_"):
        state = event[6:].upper()
        labels = fields.get("labels", {})
        who = " ".join(f"{k}={v}" for k, v in labels.items() if k not in ("alertname", "severity"))
        summary = fields.get("summary") or fields.get("description")
        line = f"{state:<8} {fields.get('severity') or '-':<8} {name:<{NAME_WIDTH}} {summary}"
        detail = f"{who}  value={_value(fields.get('value'))}" if who else f"value={_value(fields.get('value'))}"
        if fields.get("resolved_at"):
            detail += f"  resolved {fields['resolved_at']}"
        return f"{line}\n{INDENT}{detail}"
    kind = str(fields.get("kind", ""))
    head = f"{'RUNBOOK':<8} {SHORT_KINDS.get(kind, kind):<8} {name:<{NAME_WIDTH}} {fields.get('title')}"
    text = str(fields.get("text", ""))
    body = [line for line in text.splitlines() if line.strip()] if kind == "suggestion" else _fold(text)
    return "\n".join([head, *(f"{INDENT}  {line}" for line in body)])


class LogNotifier:
    """Writes one line per alert transition and runbook event to ``stream`` (default stdout)."""

    name = "log"
    batch_size = 50

    def __init__(self, stream: TextIO | None = None, fmt: str = "auto") -> None:
        self.stream = stream or sys.stdout
        if fmt == "auto":
            fmt = "text" if hasattr(self.stream, "isatty") and self.stream.isatty() else "json"
        self.json_lines = fmt == "json"
        self._lock = threading.Lock()

    def plan(
        self, groups: list[GroupNotification], events: list[EventNotification], ctx: PlanContext
    ) -> list[OutboxItem]:
        """One row per member of each group and per runbook event."""
        return self.lines(groups, events, ctx.node)

    @staticmethod
    def lines(groups: list[GroupNotification], events: list[EventNotification], node: str) -> list[OutboxItem]:
        """The rows :meth:`plan` queues (pure: the dispatcher prints them directly while the state database
        is not writable)."""
        items = [
            OutboxItem(
                f"{group.kind.value}:{m.fingerprint}:{m.fired_at_ms}",
                "line",
                alert_fields(group.kind, m, node, group),
            )
            for group in groups
            for m in group.members
        ]
        for ev in events:
            e = ev.event
            items.append(
                OutboxItem(
                    ev.key,
                    "line",
                    {
                        "event": f"runbook_{e.kind}",
                        "kind": e.kind,
                        "alertname": e.alertname,
                        "runbook": e.runbook,
                        "fingerprint": e.fingerprint,
                        "title": e.title,
                        "text": e.text,
                        "node": node,
                        "member": member_description(ev.alert) if ev.alert else "",
                    },
                )
            )
        return items

    def verify(self, row: OutboxRow) -> Delivered | None:
        """A log line cannot be looked up again: always resend."""
        return None

    def deliver(self, rows: list[OutboxRow]) -> list[Delivered]:
        """Write the lines and flush."""
        with self._lock:
            for row in rows:
                fields = row.payload
                if self.json_lines:
                    stamp = {"ts": _iso(row.created_ms), "level": "warning", "logger": "watchdog.alerts"}
                    line = json.dumps({**stamp, **fields}, default=str)
                else:
                    line = (
                        time.strftime("%H:%M:%S", time.localtime(row.created_ms / 1000))
                        + " "
                        + format_text(fields)
                    )
                self.stream.write(redact(line) + "\n")
            self.stream.flush()
        return [Delivered(row.id) for row in rows]

    def periodic(self, now_ms: int) -> int | None:
        """Nothing periodic."""
        return None

    def close(self) -> None:
        """Flush the stream."""
        self.stream.flush()

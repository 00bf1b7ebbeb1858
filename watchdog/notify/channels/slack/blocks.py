"""Block Kit rendering of alert messages, resolve replies and runbook events. Pure.

Slack limits respected here: header text 150 chars, section text 3000, at most 10 fields of 2000
chars, 50 blocks per message; the ``text`` fallback (notifications, screen readers) is always set.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.model import Alert
from watchdog.notify.decisions.grouping import DEFAULT_MEMBER_LABELS, member_description

SEVERITY_EMOJI = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":large_blue_circle:",
}
RESOLVED_EMOJI = ":white_check_mark:"
APPROVE_ACTION = "watchdog_approve"
SKIP_ACTION = "watchdog_skip"
ACK_ACTION = "watchdog_ack"
SILENCE_ACTION = "watchdog_silence"
SILENCE_BUTTON_HOURS = 1

Block = dict[str, Any]


@dataclass(frozen=True)
class Links:
    """Where the message links to; empty strings mean no link."""

    grafana_url: str = ""
    runbook_base_url: str = ""


@dataclass(frozen=True)
class Rendered:
    """One Slack message body."""

    text: str
    blocks: list[Block]


def _cap(text: str, limit: int) -> str:
    """At most ``limit`` chars, ending in "…" when cut; never cuts an ``&amp;``-style entity in half."""
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    amp = cut.rfind("&", max(0, len(cut) - 5))
    if amp >= 0 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _mrkdwn_escape(text: str) -> str:
    """Slack's three control characters as entities: ``<!channel>`` in a label or a process name is shown,
    never executed as a mention or a link (every text that reaches Slack goes through here)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code_block(text: str, limit: int) -> str:
    """``text`` as a mrkdwn code block of at most ``limit`` chars: escaped, unable to close early."""
    return "```" + _cap(_mrkdwn_escape(text).replace("```", "`\u200b``"), max(1, limit - 6)) + "```"


def humanize(value: float) -> str:
    """A compact value: ``93.5``, ``1.2k``, ``NaN``."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.4g}"


def value_text(alert: Alert) -> str:
    """The alert's value as its own text shows it: a ratio its summary or description gives as a
    percentage (Prometheus' ``humanizePercentage``, ``49.09%``) is shown so, not as ``0.4909``; any other
    value as :func:`humanize`."""
    value = alert.value
    if not (math.isnan(value) or math.isinf(value)):
        percent = f"{value * 100:.4g}%"
        text = " ".join((alert.annotations.get("summary", ""), alert.annotations.get("description", "")))
        if percent in text:
            return percent
    return humanize(value)


def slack_date(ms: int) -> str:
    """Slack's localised date token with an ISO fallback."""
    if not ms:
        return "-"
    secs = ms // 1000
    iso = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(secs))
    return f"<!date^{secs}^{{date_short_pretty}} {{time_secs}}|{iso}>"


def duration(ms: int) -> str:
    """``3h 12m``, ``45s``."""
    secs = max(0, ms // 1000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m}m" if h else (f"{m}m {s}s" if m else f"{s}s")


def runbook_file(url: str) -> str:
    """The local path of a ``file://`` runbook URL (the node's installed Markdown), else ""."""
    if not url.startswith("file://"):
        return ""
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path)


def runbook_url(runbook: str, links: Links) -> str:
    """The runbook's URL (``<base>/<id>.md``) or "" without a base URL."""
    return f"{links.runbook_base_url.rstrip('/')}/{runbook}.md" if runbook and links.runbook_base_url else ""


def _web_url(url: str) -> str:
    """``url`` when a person in Slack can open it (http/https), else ""."""
    return url if url.startswith(("https://", "http://")) else ""


def grafana_explore_url(expr: str, links: Links) -> str:
    """A Grafana Explore link running the rule's expression, or "" without a Grafana URL."""
    if not (expr and links.grafana_url):
        return ""
    left = json.dumps({"queries": [{"refId": "A", "expr": expr}], "range": {"from": "now-1h", "to": "now"}})
    return f"{links.grafana_url.rstrip('/')}/explore?orgId=1&left={urllib.parse.quote(left)}"


def _context_fields(alert: Alert, node: str, members: int) -> list[Block]:
    """Label/value fields; values are escaped, the date token is not (Slack renders it)."""
    labels = alert.labels
    fields = [("Severity", alert.severity or "-"), ("Node", labels.get("node", node))]
    if members <= 1 and labels.get("gpu"):
        fields.append(("GPU", labels["gpu"] + (f" ({labels['uuid']})" if labels.get("uuid") else "")))
    engine = " ".join(v for v in (labels.get("job", ""), labels.get("instance", "")) if v)
    if engine:
        fields.append(("Engine", engine))
    if labels.get("model_name"):
        fields.append(("Model", labels["model_name"]))
    if members <= 1:
        fields.append(("Value", value_text(alert)))
    texts = [f"*{name}*\n{_cap(_mrkdwn_escape(value), 1900)}" for name, value in fields[:9]]
    texts.append(f"*Firing since*\n{slack_date(alert.fired_at_ms)}")
    return [{"type": "mrkdwn", "text": text} for text in texts]


def _button(action_id: str, label: str, value: str, style: str = "") -> Block:
    button: Block = {"type": "button", "action_id": action_id, "value": value[:2000],
                     "text": {"type": "plain_text", "text": label}}
    if style:
        button["style"] = style
    return button


def alert_buttons(fingerprint: str) -> list[Block]:
    """Acknowledge and Silence (1 h) buttons for one alert (handled by
    :mod:`watchdog.notify.channels.slack.approvals`)."""
    value = json.dumps({"fingerprint": fingerprint})
    return [_button(ACK_ACTION, "Acknowledge", value),
            _button(SILENCE_ACTION, f"Silence {SILENCE_BUTTON_HOURS}h", value)]


def render_alert_message(
    members: Sequence[Alert],
    resolved: Sequence[str],
    node: str,
    links: Links,
    runbook_title: str = "",
    max_members: int = 20,
    member_labels: Sequence[str] = DEFAULT_MEMBER_LABELS,
    interactive: bool = False,
) -> Rendered:
    """The parent message of a group: firing while any member fires, resolved once all have.

    ``resolved`` lists fingerprints of members that resolved (shown struck through with a tick).
    ``interactive`` (a Slack app receives clicks) adds Acknowledge and Silence buttons while firing.
    """
    lead = members[0]
    done = set(resolved)
    all_resolved = all(m.fingerprint in done for m in members)
    sev = lead.severity or "alert"
    if all_resolved:
        head = f"{RESOLVED_EMOJI} RESOLVED: {lead.name}"
    else:
        head = f"{SEVERITY_EMOJI.get(sev, ':bell:')} {sev.upper()}: {lead.name}"
    if len(members) > 1:
        still = sum(1 for m in members if m.fingerprint not in done)
        head += f" ({len(members)} alerts" + (f", {still} firing)" if done and still else ")")
    head += f" on {lead.labels.get('node', node)}"
    summary = lead.annotations.get("summary", "")
    description = lead.annotations.get("description", "")
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cap(head, 150), "emoji": True}},
    ]
    body = "\n".join(
        p for p in (f"*{_mrkdwn_escape(summary)}*" if summary else "", _mrkdwn_escape(description)) if p
    )
    if body:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cap(body, 3000)}})
    blocks.append({"type": "section", "fields": _context_fields(lead, node, len(members))})
    if len(members) > 1:
        lines = []
        for m in members[:max_members]:
            who = _mrkdwn_escape(member_description(m, member_labels))
            mark = f"{RESOLVED_EMOJI} ~{who}~" if m.fingerprint in done else f"• {who}"
            lines.append(f"{mark}  value {humanize(m.value)}")
        if len(members) > max_members:
            lines.append(f"… and {len(members) - max_members} more")
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _cap("*Members*\n" + "\n".join(lines), 3000)},
            }
        )
    runbook = lead.annotations.get("runbook", "")
    link_parts = []
    url = runbook_url(runbook, links) or _web_url(lead.annotations.get("runbook_url", ""))
    if runbook:
        label = runbook_title or runbook
        local = runbook_file(lead.annotations.get("runbook_url", "")) if not url else ""
        if url:
            link_parts.append(f"*Runbook:* <{url}|{_mrkdwn_escape(label)}>")
        elif local:  # a file on the node: Slack cannot open file:// links, so show where it is
            link_parts.append(f"*Runbook:* {_mrkdwn_escape(label)} `{_mrkdwn_escape(local).replace('`', '')}`")
        else:
            link_parts.append(f"*Runbook:* {_mrkdwn_escape(label)}")
    explore = grafana_explore_url(lead.generator, links)
    if explore:
        link_parts.append(f"<{explore}|Grafana>")
    if link_parts:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _cap("  ·  ".join(link_parts), 3000)}}
        )
    if interactive and not all_resolved:
        blocks.append({"type": "actions", "block_id": "watchdog_alert", "elements": alert_buttons(lead.fingerprint)})
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": _cap(
                        f"inference-watchdog on {_mrkdwn_escape(node)} · {len(members)} alert(s)"
                        f" · fingerprint {lead.fingerprint[:16]}",
                        2000,
                    ),
                }
            ],
        }
    )
    text = _cap(_mrkdwn_escape(f"{head}: {summary or description}"), 3000)
    return Rendered(text, blocks[:50])


def render_resolved_reply(
    resolved: Sequence[Alert], node: str, member_labels: Sequence[str] = DEFAULT_MEMBER_LABELS
) -> Rendered:
    """The thread reply announcing that some (or all) members resolved."""
    lines = []
    for m in resolved[:40]:
        lasted = duration(m.resolved_at_ms - m.fired_at_ms) if m.fired_at_ms and m.resolved_at_ms else "?"
        lines.append(
            f"{RESOLVED_EMOJI} {_mrkdwn_escape(member_description(m, member_labels))}"
            f" resolved {slack_date(m.resolved_at_ms)} after {lasted}"
        )
    if len(resolved) > 40:
        lines.append(f"… and {len(resolved) - 40} more")
    text = _mrkdwn_escape(f"Resolved: {resolved[0].name} ({len(resolved)}) on {node}")
    return Rendered(
        text, [{"type": "section", "text": {"type": "mrkdwn", "text": _cap("\n".join(lines), 3000)}}]
    )


def render_standalone_resolved(resolved: Sequence[Alert], node: str, links: Links) -> Rendered:
    """Resolve notice as its own message (webhook mode, or when the parent message is unknown)."""
    msg = render_alert_message(resolved, [m.fingerprint for m in resolved], node, links)
    reply = render_resolved_reply(resolved, node)
    return Rendered(msg.text, [*msg.blocks[:-1], *reply.blocks, msg.blocks[-1]])


def render_event(
    kind: str,
    title: str,
    text: str,
    alertname: str,
    *,
    max_chars: int = 2800,
    approvals: Sequence[tuple[str, str]] = (),
    standalone: bool = False,
) -> Rendered:
    """A runbook event: diagnostics output as a code block, suggestions, decisions and results.

    ``approvals`` = [(fingerprint, step), ...] adds Approve / Skip buttons per step (approve mode), with
    Acknowledge and Silence next to them.
    """
    label = {
        "diagnostics": ":mag: Diagnostics",
        "suggestion": ":bulb: Suggested",
        "decision": ":scales: Decision",
        "result": ":gear: Result",
    }.get(kind, kind.title())
    prefix = f"[{alertname}] " if standalone else ""
    head = f"*{prefix}{label}: {_mrkdwn_escape(title)}*"
    body = _cap(text, max_chars)
    room = 3000 - len(head) - 1
    shown = f"{head}\n{_code_block(body, room)}" if kind in ("diagnostics", "result") and body else (
        f"{head}\n{_cap(_mrkdwn_escape(body), room)}")
    blocks: list[Block] = [{"type": "section", "text": {"type": "mrkdwn", "text": _cap(shown, 3000)}}]
    for fingerprint, step in list(approvals)[:10]:
        value = json.dumps({"fingerprint": fingerprint, "step": step})[:2000]
        approve = _button(APPROVE_ACTION, "Approve", value, "primary")
        skip = _button(SKIP_ACTION, "Skip", value)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cap(f"Step *{step}*", 3000)}})
        blocks.append(
            {
                "type": "actions",
                "block_id": _cap(f"watchdog_approval:{step}", 255),
                "elements": [approve, skip, *alert_buttons(fingerprint)],
            }
        )
    return Rendered(_cap(_mrkdwn_escape(f"{prefix}{label.split(' ', 1)[1]}: {title}"), 3000), blocks)


"""Block Kit rendering of an incident's one Slack message: the cause first, its symptoms folded under it. Pure.

The message of a probable cause (see :mod:`watchdog.notify.decisions.incidents`) becomes the incident's message once
symptoms are folded into it: the header, and so the first line of the notification, names the cause
(``GPU 5 fell off the bus on node-1``); then the cause's own alert message (summary, description, labels,
runbook); then the symptoms, one line each with when they began relative to the cause, struck through
once resolved. A symptom that had a message of its own before its cause fired gets that message rewritten
to a pointer (:func:`render_folded_pointer`): the channel keeps one message per incident that speaks.
"""

from __future__ import annotations

from collections.abc import Sequence

from watchdog.model import Alert
from watchdog.notify.channels.slack.blocks import (
    RESOLVED_EMOJI,
    SEVERITY_EMOJI,
    Block,
    Links,
    Rendered,
    _cap,
    _mrkdwn_escape,
    render_alert_message,
)
from watchdog.notify.decisions.grouping import DEFAULT_MEMBER_LABELS, member_description
from watchdog.notify.decisions.incidents import cause_text, is_known_cause

MAX_SYMPTOMS_LISTED = 25
FOLDED_EMOJI = ":arrow_heading_up:"


def incident_head(members: Sequence[Alert], resolved: Sequence[str], node: str) -> str:
    """``:red_circle: GPU 5 fell off the bus on node-1`` (``RESOLVED:`` once every cause member has)."""
    lead = members[0]
    done = set(resolved)
    more = f" (+{len(members) - 1} more)" if len(members) > 1 else ""
    where = lead.labels.get("node", node)
    if all(m.fingerprint in done for m in members):
        return f"{RESOLVED_EMOJI} RESOLVED: {cause_text(lead)}{more} on {where}"
    return f"{SEVERITY_EMOJI.get(lead.severity, ':bell:')} {cause_text(lead)}{more} on {where}"


def _symptom_line(alert: Alert, cause: Alert, done: bool, member_labels: Sequence[str]) -> str:
    who = member_description(alert, member_labels)
    what = f"{alert.name} {who}" if who != alert.name else alert.name
    summary = alert.annotations.get("summary", "")
    began = ""
    if alert.fired_at_ms and cause.fired_at_ms:
        began = f" ({(alert.fired_at_ms - cause.fired_at_ms) / 1000:+.0f}s)"
    line = _mrkdwn_escape(f"{what}{began}" + (f": {summary}" if summary else ""))
    return f"{RESOLVED_EMOJI} ~{line}~" if done else f"• {line}"


def render_incident_message(
    members: Sequence[Alert],
    symptoms: Sequence[Alert],
    resolved: Sequence[str],
    node: str,
    links: Links,
    runbook_title: str = "",
    max_members: int = 20,
    member_labels: Sequence[str] = DEFAULT_MEMBER_LABELS,
    interactive: bool = False,
) -> Rendered:
    """The incident message: the cause's alert message (``members``) headed by the cause sentence (kept as
    it is while a symptom leads, its cause not firing yet), with ``symptoms`` folded in after its details.
    ``resolved``: fingerprints of members and symptoms that resolved. Without symptoms: the alert message."""
    base = render_alert_message(members, resolved, node, links, runbook_title, max_members, member_labels,
                                interactive=interactive)
    if not symptoms:
        return base
    done = set(resolved)
    known = is_known_cause(members[0].name)  # else a symptom leads until its cause fires and takes over
    head = incident_head(members, resolved, node) if known else str(base.blocks[0]["text"]["text"])
    firing = sum(1 for s in symptoms if s.fingerprint not in done)
    count = f"{len(symptoms)} related alert(s)" + (f", {firing} firing" if firing != len(symptoms) else "")
    lines = [_symptom_line(s, members[0], s.fingerprint in done, member_labels)
             for s in symptoms[:MAX_SYMPTOMS_LISTED]]
    if len(symptoms) > MAX_SYMPTOMS_LISTED:
        lines.append(f"… and {len(symptoms) - MAX_SYMPTOMS_LISTED} more")
    folded: Block = {"type": "section", "block_id": "watchdog_symptoms",
                     "text": {"type": "mrkdwn", "text": _cap(f"*Symptoms ({count})*\n" + "\n".join(lines), 3000)}}
    blocks = list(base.blocks)
    blocks[0] = {"type": "header", "text": {"type": "plain_text", "text": _cap(head, 150), "emoji": True}}
    after = next(i for i, b in enumerate(blocks) if "fields" in b)  # the cause's labels
    if after + 1 < len(blocks) and blocks[after + 1].get("text", {}).get("text", "").startswith("*Members*"):
        after += 1
    blocks.insert(after + 1, folded)
    summary = members[0].annotations.get("summary", "")
    text_lines = [f"{head}: {'probable cause of' if known else 'with'} {count}" + (f". {summary}" if summary else "")]
    text_lines += [_symptom_line(s, members[0], s.fingerprint in done, member_labels)
                   for s in symptoms[:MAX_SYMPTOMS_LISTED]]
    text = _cap(_mrkdwn_escape(text_lines[0]) + "\n" + "\n".join(text_lines[1:]), 3000)
    return Rendered(text, blocks[:50])


def render_folded_pointer(members: Sequence[Alert], cause: Alert, node: str,
                          member_labels: Sequence[str] = DEFAULT_MEMBER_LABELS) -> Rendered:
    """What a symptom's own message becomes once it is folded into its cause's incident message."""
    lead = members[0]
    head = f"{FOLDED_EMOJI} Folded into an incident: {lead.name} on {lead.labels.get('node', node)}"
    who = ", ".join(member_description(m, member_labels) for m in members[:10])
    body = (f"*Probable cause: {cause_text(cause)}.* This alert ({who}) is a symptom of it; it is listed, "
            "and followed up, in the incident's message.")
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cap(head, 150), "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cap(_mrkdwn_escape(body), 3000)}},
    ]
    return Rendered(_cap(_mrkdwn_escape(f"{head}: probable cause {cause_text(cause)}"), 3000), blocks)


def render_cause_found(cause: Alert) -> Rendered:
    """The thread reply when a cause takes over the message of symptoms that fired before it."""
    text = _mrkdwn_escape(f"Probable cause: {cause_text(cause)} ({cause.name}, {cause.severity or 'alert'}); "
                          "the message now leads with it.")
    return Rendered(text, [{"type": "section", "text": {"type": "mrkdwn", "text": _cap(text, 3000)}}])

"""Grouping: alerts of one cause that change state in the same tick become one notification.

Two alerts share a cause when their ``alertname`` and every label except the *member labels* (those
that tell GPUs, ranks or scrape targets apart: ``gpu``, ``uuid``, ``instance`` ...) are equal. Eight GPUs
with the same XID, or every rank of one engine, thus become one message listing the members. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from watchdog.config.settings import GroupingSettings, section_settings
from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.model import GroupNotification, Transition

# The schema's default of notifiers.grouping.member_labels (the config schema is the one source).
DEFAULT_MEMBER_LABELS: tuple[str, ...] = section_settings(GroupingSettings, "notifiers.grouping").member_labels


def cause_key(alert: Alert, member_labels: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The labels that identify an alert's cause: all labels but the member labels, sorted."""
    skip = set(member_labels)
    return tuple(sorted((k, v) for k, v in alert.labels.items() if k not in skip))


def group_transitions(
    transitions: Sequence[Transition],
    at_ms: int,
    member_labels: Iterable[str] = DEFAULT_MEMBER_LABELS,
    enabled: bool = True,
) -> list[GroupNotification]:
    """Group one tick's transitions by (kind, alertname, cause labels); order of first appearance kept.

    Members inside a group are ordered by their labels (GPU 0 before GPU 1), so renders are stable.
    With ``enabled=False`` every transition is its own group.
    """
    members = tuple(member_labels)
    groups: dict[tuple[AlertState, object], list[Alert]] = {}
    for index, transition in enumerate(transitions):
        alert = transition.alert
        cause: object = (alert.name, cause_key(alert, members)) if enabled else index
        groups.setdefault((transition.kind, cause), []).append(alert)
    out: list[GroupNotification] = []
    for (kind, _cause), alerts in groups.items():
        ordered = tuple(sorted(alerts, key=lambda a: (_natural(sorted(a.labels.items())), a.fingerprint)))
        out.append(GroupNotification(kind=kind, members=ordered, at_ms=at_ms))
    return out


def member_description(alert: Alert, member_labels: Iterable[str] = DEFAULT_MEMBER_LABELS) -> str:
    """Short name of one member: its member labels, ``gpu=3 uuid=GPU-...``; the alertname if none."""
    parts = [f"{name}={alert.labels[name]}" for name in member_labels if alert.labels.get(name)]
    return " ".join(parts) if parts else alert.name


def _natural(pairs: list[tuple[str, str]]) -> list[tuple[str, tuple[int, str]]]:
    """Sort key that orders ``gpu=10`` after ``gpu=9``."""
    return [(k, (int(v), "") if v.isdigit() else (1 << 62, v)) for k, v in pairs]

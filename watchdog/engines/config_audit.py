"""The engine-config audit's digest: the info-level findings of rules/serving-config.yaml, grouped per engine.

The findings themselves are alerts (``severity=info``, a ``knob`` label, the reasoning in the
description), so they reach ``check``, the exporter's ``ALERTS`` and any notifier like every other
alert. :func:`config_digest` renders the ones active now as one plain-text report, engine by engine,
knob by knob, for a periodic (weekly-style) review: ``inference-watchdog check --digest``. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from watchdog.model import Alert, AlertState

AUDIT_RUNBOOK = "engine-config-audit"


def config_findings(alerts: Iterable[Alert]) -> list[Alert]:
    """The active (pending or firing) config-audit findings, ordered by engine and knob."""
    found = [a for a in alerts if a.annotations.get("runbook") == AUDIT_RUNBOOK
             and a.state in (AlertState.PENDING, AlertState.FIRING)]
    return sorted(found, key=lambda a: (a.labels.get("job", ""), a.labels.get("instance", ""),
                                        a.labels.get("knob", ""), a.name))


def config_digest(alerts: Iterable[Alert], node: str) -> str:
    """One text report of the active findings (a line saying there are none when there are none)."""
    findings = config_findings(alerts)
    if not findings:
        return f"Engine config digest for {node}: no findings.\n"
    lines = [f"Engine config digest for {node}: {len(findings)} finding(s)", ""]
    engine = None
    for alert in findings:
        key = (alert.labels.get("job", ""), alert.labels.get("instance", ""))
        if key != engine:
            engine = key
            lines.append(f"== {key[0]} ({key[1]})")
        lines.append(f"- {alert.labels.get('knob', alert.name)}: {alert.annotations.get('summary', '')}")
        lines.append(f"  {alert.annotations.get('description', '')}")
    return "\n".join(lines) + "\n"

"""What the runbook side tells the notification side about an alert: plain data.

Each event belongs to one alert (``fingerprint``) and is posted into that alert's notification thread.
``kind`` is one of ``diagnostics`` (read-only step output), ``suggestion`` (a remediation step a human
may run), ``decision`` (ran / skipped and why / escalated) and ``result`` (exit code, duration, digest).
``text`` is already size-capped and free of secrets.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunbookEvent:
    """One runbook event for one alert; ``at_ms`` is when it happened."""

    fingerprint: str
    alertname: str
    runbook: str
    kind: str
    title: str
    text: str
    at_ms: int

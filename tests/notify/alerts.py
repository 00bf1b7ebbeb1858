"""Build rule-engine ``Alert`` values for notification tests (plain data, like the engine hands over)."""

from __future__ import annotations

import hashlib

from watchdog.model import Alert, AlertState


def fingerprint(labels: dict[str, str]) -> str:
    """Stable digest of a label set (the engine's fingerprints behave the same way)."""
    return hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]


def make_alert(
    name: str,
    state: str = "firing",
    *,
    fired_at_ms: int = 1_000_000,
    resolved_at_ms: int = 0,
    value: float = 1.0,
    severity: str = "critical",
    summary: str = "",
    runbook: str = "gpu-xid",
    **labels: str,
) -> Alert:
    """One alert; ``state`` is firing, pending or resolved."""
    all_labels = {"alertname": name, "severity": severity, **labels}
    st = {"firing": AlertState.FIRING, "pending": AlertState.PENDING, "resolved": AlertState.INACTIVE}[state]
    return Alert(
        name=name,
        labels=all_labels,
        annotations={
            "summary": summary or f"{name} on {labels}",
            "description": "value {{ $value }}",
            "runbook": runbook,
        },
        state=st,
        value=value,
        fingerprint=fingerprint(all_labels),
        active_at_ms=fired_at_ms - 60_000,
        fired_at_ms=fired_at_ms if state != "pending" else 0,
        resolved_at_ms=resolved_at_ms if state == "resolved" else 0,
        generator="watchdog_gpu_xid_errors_total > 0",
    )


def xid_storm(state: str = "firing", gpus: int = 8, **kw: object) -> list[Alert]:
    """The same XID on ``gpus`` GPUs: one cause, many members."""
    return [
        make_alert("GpuXidError", state, gpu=str(i), uuid=f"GPU-{i:04d}", xid="79", **kw)  # type: ignore[arg-type]
        for i in range(gpus)
    ]

"""What the Node should say about its GPUs: the ``GpuUnhealthy`` condition and the ``NoSchedule`` taint (pure).

Contract:
- Only the alerts in :data:`UNFIT_ALERTS` make a node unfit for new GPU work: a GPU the driver cannot
  use (driver not loaded, fell off the bus, missing from NVML, flagged for a reset or reboot) or a fatal
  Xid. Other alerts (overload, thermals, a slow engine) are the serving verdict's business, not the
  scheduler's: a taint for them would move load, not fix anything.
- :func:`decide` is the whole policy: firing unfit alerts → unhealthy, the reason being the first of them
  in :data:`UNFIT_ALERTS` order (the most fundamental fault); none pending or firing for
  ``clear_after_ms`` → healthy; anything in between (an unfit alert pending, or quiet for less than that
  long) → ``None``: no decision, the Node is left as it is. Stale or missing data never clears a taint
  early, because pending alerts and the quiet period both hold the decision back.
- :func:`condition`, :func:`taint` and :func:`kubectl_argv` render a decision as the Kubernetes objects
  and the exact ``kubectl`` argv lists a human would run (no shell strings).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from watchdog.model import Alert, AlertState

# Most fundamental first: with the driver gone every other GPU alert is a consequence.
UNFIT_ALERTS: tuple[str, ...] = (
    "GpuDriverNotLoaded",
    "GpuFallenOffBus",
    "GpuMissing",
    "GpuRecoveryRequired",
    "GpuXidFatal",
)
HEALTHY_REASON = "NoGpuFault"
TAINT_EFFECT = "NoSchedule"
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class NodeSignal:
    """What the Node's condition (and taint) should say; ``lead`` names the alert the reason comes from.

    ``fingerprint``, ``alertname`` and ``runbook`` are the lead alert's (empty when healthy): the
    notification thread and audit rows of a change belong to that alert.
    """

    unhealthy: bool
    reason: str
    message: str
    fingerprint: str = ""
    alertname: str = ""
    runbook: str = ""

    @property
    def key(self) -> tuple[bool, str]:
        """What a change is about: the status and reason (a new message alone is not a change)."""
        return (self.unhealthy, self.reason)


def unfit(alerts: Iterable[Alert], state: AlertState) -> list[Alert]:
    """The node-unfit alerts in ``state``, in :data:`UNFIT_ALERTS` order, then by GPU."""
    rank = {name: i for i, name in enumerate(UNFIT_ALERTS)}
    found = [a for a in alerts if a.name in rank and a.state is state]
    return sorted(found, key=lambda a: (rank[a.name], a.labels.get("gpu", ""), a.fingerprint))


def decide(alerts: Sequence[Alert], *, quiet_ms: int, clear_after_ms: int) -> NodeSignal | None:
    """The signal for this tick: unhealthy, healthy, or ``None`` (leave the Node as it is).

    ``quiet_ms`` is how long no unfit alert has been pending or firing (the caller tracks it).
    """
    firing = unfit(alerts, AlertState.FIRING)
    if firing:
        lead = firing[0]
        message = "; ".join(f"{a.name}: {a.annotations.get('summary') or describe_gpu(a)}" for a in firing)
        return NodeSignal(True, lead.name, message[:MAX_MESSAGE], lead.fingerprint, lead.name,
                          lead.annotations.get("runbook", ""))
    if unfit(alerts, AlertState.PENDING) or quiet_ms < clear_after_ms:
        return None
    return NodeSignal(False, HEALTHY_REASON,
                      f"no node-unfit GPU alert ({', '.join(UNFIT_ALERTS)}) for {clear_after_ms // 1000} s")


def describe_gpu(alert: Alert) -> str:
    """``GPU 3 (GPU-uuid)`` from an alert's labels, or the node as a whole."""
    gpu, uuid = alert.labels.get("gpu"), alert.labels.get("uuid")
    if gpu is None:
        return "the node's GPUs"
    return f"GPU {gpu}" + (f" ({uuid})" if uuid else "")


def rfc3339(at_ms: int) -> str:
    """Kubernetes' time format (seconds, UTC)."""
    return datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(signal: NodeSignal, condition_type: str, now_ms: int, since_ms: int | None = None) -> dict[str, str]:
    """The NodeCondition for ``signal``; ``since_ms`` is when the status last changed (default now)."""
    return {
        "type": condition_type,
        "status": "True" if signal.unhealthy else "False",
        "reason": signal.reason,
        "message": signal.message,
        "lastHeartbeatTime": rfc3339(now_ms),
        "lastTransitionTime": rfc3339(now_ms if since_ms is None else since_ms),
    }


def taint(signal: NodeSignal, key: str) -> dict[str, str]:
    """The taint for an unhealthy ``signal``: ``KEY=ALERTNAME:NoSchedule``."""
    return {"key": key, "value": signal.reason, "effect": TAINT_EFFECT}


def status_patch(cond: dict[str, str]) -> dict[str, object]:
    """The strategic-merge patch of ``nodes/status`` that sets one condition (conditions merge by type)."""
    return {"status": {"conditions": [cond]}}


def kubectl_argv(node: str, signal: NodeSignal, *, condition_type: str, taint_key: str | None,
                 now_ms: int) -> tuple[tuple[str, ...], ...]:
    """The ``kubectl`` commands that apply ``signal`` to ``node``: the condition, then the taint (if any)."""
    patch = json.dumps(status_patch(condition(signal, condition_type, now_ms)), separators=(",", ":"))
    commands: list[tuple[str, ...]] = [
        ("kubectl", "patch", "node", node, "--subresource=status", "--type=strategic", f"--patch={patch}"),
    ]
    if taint_key is not None:
        if signal.unhealthy:
            commands.append(("kubectl", "taint", "node", node, f"{taint_key}={signal.reason}:{TAINT_EFFECT}",
                             "--overwrite"))
        else:
            commands.append(("kubectl", "taint", "node", node, f"{taint_key}:{TAINT_EFFECT}-"))
    return tuple(commands)

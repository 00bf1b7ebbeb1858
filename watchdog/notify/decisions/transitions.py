"""Derive notification transitions from the rule engine's alerts and the persisted notification state.

Pure. The rule engine hands over every alert it currently knows (pending, firing, and resolved ones for
a retention window); this module compares them with what was last persisted and says what changed:

- an alert that is firing and was not firing before is a ``firing`` transition (notified once);
- an alert that was firing and is now resolved, pending again (it resolved between two ticks) or gone
  from the engine's list altogether (the rule was removed, or it resolved while the agent was down) is a
  ``resolved`` transition (notified once);
- pending alerts and alerts that stay firing produce no transition, only state updates.

An alert that stays firing is the same episode even when the engine reports another ``fired_at`` (after
a restart the engine may restore it with a new one): only an observed resolve ends an episode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.model import Transition


def as_notified(alert: Alert, state: AlertState, fired_at_ms: int, resolved_at_ms: int = 0) -> Alert:
    """``alert`` as the notification side records it: in ``state`` (``pending``, ``firing`` or
    ``resolved``), with its episode's ``fired_at_ms`` and its ``resolved_at_ms``.

    The engine's per-evaluation bookkeeping (``last_eval_ms``, ``rule_group``) is cleared: it is not
    stored, so an alert read back from ``notify_alerts`` equals the one written. Labels and annotations
    are copied: what the notification side keeps never shares a dict with the caller.
    """
    return replace(alert, labels=dict(alert.labels), annotations=dict(alert.annotations), state=state,
                   fired_at_ms=fired_at_ms, resolved_at_ms=resolved_at_ms, last_eval_ms=0, rule_group="")


@dataclass
class Derivation:
    """What one tick changes: transitions to notify, state rows to write and rows to delete."""

    transitions: list[Transition] = field(default_factory=list)
    upserts: list[Alert] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


def _strongest(alerts: Sequence[Alert]) -> dict[str, Alert]:
    """One alert per fingerprint; firing beats pending beats inactive if the engine repeats one."""
    rank = {AlertState.FIRING: 2, AlertState.PENDING: 1, AlertState.INACTIVE: 0, AlertState.RESOLVED: 0}
    out: dict[str, Alert] = {}
    for alert in alerts:
        prev = out.get(alert.fingerprint)
        if prev is None or rank[alert.state] > rank[prev.state]:
            out[alert.fingerprint] = alert
    return out


def _resolve(was: Alert, resolved_at_ms: int, latest: Alert | None) -> tuple[Transition, Alert]:
    """End ``was``'s firing episode: the latest values when the engine still lists the alert, else the
    recorded ones; the episode's ``fired_at_ms``, pending and keep-firing times stay as recorded."""
    resolved = replace(as_notified(latest or was, AlertState.RESOLVED, was.fired_at_ms, resolved_at_ms),
                       active_at_ms=was.active_at_ms, keep_firing_since_ms=was.keep_firing_since_ms)
    return Transition(AlertState.RESOLVED, resolved), resolved


def derive_transitions(known: Mapping[str, Alert], alerts: Sequence[Alert], now_ms: int) -> Derivation:
    """Compare the engine's alerts with ``known`` (the alerts as last recorded, see :func:`as_notified`,
    by fingerprint) and return the tick's changes."""
    out = Derivation()
    current = _strongest(alerts)
    for fp, alert in current.items():
        prev = known.get(fp)
        was_firing = prev is not None and prev.state is AlertState.FIRING
        if alert.state is AlertState.FIRING:
            if not was_firing:
                firing = as_notified(alert, AlertState.FIRING, alert.fired_at_ms or now_ms)
                out.transitions.append(Transition(AlertState.FIRING, firing))
                out.upserts.append(firing)
            elif prev is not None and prev.keep_firing_since_ms != alert.keep_firing_since_ms:
                out.upserts.append(replace(prev, keep_firing_since_ms=alert.keep_firing_since_ms))
        elif alert.state is AlertState.PENDING:
            if prev is not None and was_firing:
                resolved_at = alert.active_at_ms if alert.active_at_ms > prev.fired_at_ms else now_ms
                transition, _ = _resolve(prev, resolved_at, alert)
                out.transitions.append(transition)
            stale = (prev is None or prev.state is not AlertState.PENDING
                     or prev.active_at_ms != alert.active_at_ms)
            if was_firing or stale:
                pending = replace(as_notified(alert, AlertState.PENDING, 0), keep_firing_since_ms=0)
                out.upserts.append(pending)
        else:  # inactive: resolved (resolved_at_ms > 0) or plainly inactive
            if prev is not None and was_firing:
                transition, row = _resolve(prev, alert.resolved_at_ms or now_ms, alert)
                out.transitions.append(transition)
                out.upserts.append(row)
            elif prev is not None and prev.state is AlertState.PENDING:
                out.deletes.append(fp)
    for fp, prev in known.items():
        if fp in current:
            continue
        if prev.state is AlertState.FIRING:
            transition, row = _resolve(prev, now_ms, None)
            out.transitions.append(transition)
            out.upserts.append(row)
        elif prev.state is AlertState.PENDING:
            out.deletes.append(fp)
    return out

"""The alert lifecycle of one alerting rule: Prometheus 2.42's state machine, as a pure object.

Contract (same transitions as Prometheus' ``AlertingRule.Eval``):
- A label set seen for the first time (or again after it resolved) becomes ``pending`` with
  ``active_at`` = now; while it stays in the results its value and annotations are refreshed.
- A pending alert becomes ``firing`` at the first evaluation where ``now - active_at >= for``
  (so ``for: 0`` fires at once).
- A pending alert that leaves the results is dropped. A firing one resolves (``inactive`` with
  ``resolved_at``) unless ``keep_firing_for`` holds it: it keeps firing while
  ``now - keep_firing_since < keep_firing_for``.
- Resolved alerts are kept (and reported) for :data:`RESOLVED_RETENTION_MS` so notifiers can re-send
  the resolution, then forgotten.
- Each evaluation yields the ``ALERTS{alertstate}`` (value 1) and ``ALERTS_FOR_STATE`` (value
  ``active_at`` in Unix seconds) samples of every pending or firing alert.
Fingerprints are FNV-1a 64 over the sorted labels, like Prometheus' ``model.LabelSet.Fingerprint``
(the form Alertmanager shows), so they are stable across restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from watchdog.model import Alert, AlertState, Sample, make_labels

__all__ = ["RESOLVED_RETENTION_MS", "ActiveAlert", "Alert", "AlertEvaluationError", "AlertState",
           "AlertingRuleState", "Candidate", "fingerprint"]

RESOLVED_RETENTION_MS = 15 * 60 * 1000
ALERTS_METRIC = "ALERTS"
ALERTS_FOR_STATE_METRIC = "ALERTS_FOR_STATE"

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1


def fingerprint(labels: Mapping[str, str]) -> str:
    """FNV-1a 64 of the sorted label set, as 16 hex digits (Prometheus' LabelSet.Fingerprint)."""
    h = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name.encode("utf-8"), b"\xff", labels[name].encode("utf-8"), b"\xff"):
            for byte in part:
                h ^= byte
                h = (h * _FNV_PRIME) & _MASK
    return f"{h:016x}"


class AlertEvaluationError(Exception):
    """An alerting rule's results cannot become alerts (e.g. duplicate label sets)."""


@dataclass(frozen=True)
class Candidate:
    """One element of the rule's result, with labels and annotations already rendered."""

    labels: dict[str, str]
    annotations: dict[str, str]
    value: float


@dataclass
class ActiveAlert:
    """Mutable state of one alert instance (one label set) of one rule."""

    labels: dict[str, str]
    annotations: dict[str, str]
    state: AlertState
    value: float
    active_at_ms: int
    fired_at_ms: int = 0
    resolved_at_ms: int = 0
    keep_firing_since_ms: int = 0
    last_eval_ms: int = 0


class AlertingRuleState:
    """The active alerts of one alerting rule and their transitions. Pure: time comes in as ``t_ms``."""

    def __init__(self, name: str, rule_labels: Mapping[str, str], for_ms: int, keep_firing_for_ms: int,
                 rule_group: str = "", generator: str = "") -> None:
        self.name = name
        self.rule_labels = dict(rule_labels)
        self.for_ms = for_ms
        self.keep_firing_for_ms = keep_firing_for_ms
        self.rule_group = rule_group
        self.generator = generator
        self.active: dict[str, ActiveAlert] = {}

    def step(self, t_ms: int, candidates: Iterable[Candidate]) -> list[Sample]:
        """Apply one evaluation's results at ``t_ms``; returns the ALERTS/ALERTS_FOR_STATE samples.

        Raises :class:`AlertEvaluationError` (state unchanged) when two results share a label set.
        """
        fresh: dict[str, Candidate] = {}
        for cand in candidates:
            fp = fingerprint(cand.labels)
            if fp in fresh:
                raise AlertEvaluationError(
                    "vector contains metrics with the same labelset after applying alert labels")
            fresh[fp] = cand
        for fp, cand in fresh.items():
            existing = self.active.get(fp)
            if existing is not None and existing.state is not AlertState.INACTIVE:
                existing.value = cand.value
                existing.annotations = dict(cand.annotations)
                existing.last_eval_ms = t_ms
                continue
            self.active[fp] = ActiveAlert(dict(cand.labels), dict(cand.annotations), AlertState.PENDING,
                                          cand.value, t_ms, last_eval_ms=t_ms)
        samples: list[Sample] = []
        for fp, alert in list(self.active.items()):
            if fp not in fresh:
                keep_firing = False
                if alert.state is AlertState.FIRING and self.keep_firing_for_ms > 0:
                    if alert.keep_firing_since_ms == 0:
                        alert.keep_firing_since_ms = t_ms
                    if t_ms - alert.keep_firing_since_ms < self.keep_firing_for_ms:
                        keep_firing = True
                if alert.state is AlertState.PENDING or (
                        alert.resolved_at_ms and t_ms - alert.resolved_at_ms > RESOLVED_RETENTION_MS):
                    del self.active[fp]
                if alert.state is not AlertState.INACTIVE and not keep_firing:
                    alert.state = AlertState.INACTIVE
                    alert.resolved_at_ms = t_ms
                if not keep_firing:
                    continue
            else:
                alert.keep_firing_since_ms = 0
            if alert.state is AlertState.PENDING and t_ms - alert.active_at_ms >= self.for_ms:
                alert.state = AlertState.FIRING
                alert.fired_at_ms = t_ms
            samples.extend(self._series(alert, t_ms))
        return samples

    def _series(self, alert: ActiveAlert, t_ms: int) -> list[Sample]:
        del t_ms
        base = {**self.rule_labels, **alert.labels, "alertname": self.name}
        alerts = make_labels({**base, "__name__": ALERTS_METRIC, "alertstate": alert.state.value})
        for_state = make_labels({**base, "__name__": ALERTS_FOR_STATE_METRIC})
        return [Sample(alerts, 1.0), Sample(for_state, float(alert.active_at_ms // 1000))]

    def alerts(self) -> list[Alert]:
        """Every alert this rule holds (pending, firing, or resolved within retention), by labels."""
        out = [self._to_alert(fp, a) for fp, a in self.active.items()]
        out.sort(key=lambda a: sorted(a.labels.items()))
        return out

    def _to_alert(self, fp: str, alert: ActiveAlert) -> Alert:
        return Alert(
            name=self.name,
            labels=dict(alert.labels),
            annotations=dict(alert.annotations),
            state=alert.state,
            value=alert.value,
            fingerprint=fp,
            active_at_ms=alert.active_at_ms,
            fired_at_ms=alert.fired_at_ms,
            resolved_at_ms=alert.resolved_at_ms,
            keep_firing_since_ms=alert.keep_firing_since_ms,
            last_eval_ms=alert.last_eval_ms,
            rule_group=self.rule_group,
            generator=self.generator,
        )

    def export(self) -> list[dict[str, Any]]:
        """Plain-data snapshot of every held alert (for persistence across restarts).

        Bookkeeping that changes every evaluation (``last_eval_ms``) is left out, so the snapshot only
        changes when an alert's state, value or annotations do.
        """
        return [
            {
                "rule_group": self.rule_group,
                "alertname": self.name,
                "fingerprint": fp,
                "labels": dict(a.labels),
                "annotations": dict(a.annotations),
                "state": a.state.value,
                "value": a.value,
                "active_at_ms": a.active_at_ms,
                "fired_at_ms": a.fired_at_ms,
                "resolved_at_ms": a.resolved_at_ms,
                "keep_firing_since_ms": a.keep_firing_since_ms,
            }
            for fp, a in self.active.items()
        ]

    def restore(self, entry: Mapping[str, Any]) -> None:
        """Put back one alert from :meth:`export` output (its fingerprint is recomputed)."""
        labels = {str(k): str(v) for k, v in dict(entry["labels"]).items()}
        self.active[fingerprint(labels)] = ActiveAlert(
            labels=labels,
            annotations={str(k): str(v) for k, v in dict(entry.get("annotations") or {}).items()},
            state=AlertState(entry["state"]),
            value=float(entry.get("value", 0.0)),
            active_at_ms=int(entry["active_at_ms"]),
            fired_at_ms=int(entry.get("fired_at_ms", 0)),
            resolved_at_ms=int(entry.get("resolved_at_ms", 0)),
            keep_firing_since_ms=int(entry.get("keep_firing_since_ms", 0)),
            last_eval_ms=int(entry.get("last_eval_ms", 0)),
        )

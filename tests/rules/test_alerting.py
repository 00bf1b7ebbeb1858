"""The alert state machine, driven with literal results and a fake clock (plain integers)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from watchdog.model import AlertState, label_value, metric_name
from watchdog.rules.alerting import (
    RESOLVED_RETENTION_MS,
    AlertEvaluationError,
    AlertingRuleState,
    Candidate,
    fingerprint,
)

MIN = 60_000
GPU0 = Candidate({"alertname": "GpuHot", "gpu": "0", "severity": "warning"}, {"summary": "hot"}, 91.0)


def rule(for_ms: int = 0, keep_ms: int = 0) -> AlertingRuleState:
    return AlertingRuleState("GpuHot", {"severity": "warning"}, for_ms, keep_ms, "gpu", "temp > 90")


def states(r: AlertingRuleState) -> list[str]:
    return [a.state.value + ("/resolved" if a.is_resolved else "") for a in r.alerts()]


def test_for_zero_fires_at_first_evaluation() -> None:
    r = rule()
    r.step(0, [GPU0])
    (alert,) = r.alerts()
    assert alert.state is AlertState.FIRING and alert.active_at_ms == 0 and alert.fired_at_ms == 0


def test_pending_until_for_has_elapsed_then_firing() -> None:
    r = rule(for_ms=2 * MIN)
    r.step(0, [GPU0])
    assert states(r) == ["pending"]
    r.step(1 * MIN, [GPU0])
    assert states(r) == ["pending"]
    r.step(2 * MIN, [GPU0])  # t - active_at >= for
    (alert,) = r.alerts()
    assert alert.state is AlertState.FIRING and alert.active_at_ms == 0 and alert.fired_at_ms == 2 * MIN


def test_pending_alert_that_disappears_is_dropped_and_restarts() -> None:
    r = rule(for_ms=2 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [])
    assert r.alerts() == []
    r.step(2 * MIN, [GPU0])
    assert r.alerts()[0].active_at_ms == 2 * MIN and r.alerts()[0].state is AlertState.PENDING


def test_firing_alert_resolves_and_is_kept_for_retention() -> None:
    r = rule()
    r.step(0, [GPU0])
    r.step(1 * MIN, [])
    (alert,) = r.alerts()
    assert alert.is_resolved and alert.resolved_at_ms == 1 * MIN and alert.fired_at_ms == 0
    r.step(1 * MIN + RESOLVED_RETENTION_MS, [])
    assert len(r.alerts()) == 1  # exactly at retention: still kept (Prometheus uses ">")
    r.step(2 * MIN + RESOLVED_RETENTION_MS, [])
    assert r.alerts() == []


def test_keep_firing_for_holds_a_firing_alert() -> None:
    r = rule(keep_ms=2 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [])
    assert states(r) == ["firing"] and r.alerts()[0].keep_firing_since_ms == 1 * MIN
    r.step(2 * MIN, [])
    assert states(r) == ["firing"]
    r.step(3 * MIN, [])  # 3m - 1m >= keep_firing_for
    assert states(r) == ["inactive/resolved"]


def test_keep_firing_since_resets_when_the_condition_returns() -> None:
    r = rule(keep_ms=2 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [])
    r.step(2 * MIN, [GPU0])
    assert r.alerts()[0].keep_firing_since_ms == 0
    r.step(3 * MIN, [])
    r.step(4 * MIN, [])
    assert states(r) == ["firing"]


def test_keep_firing_for_does_not_hold_pending_alerts() -> None:
    r = rule(for_ms=5 * MIN, keep_ms=10 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [])
    assert r.alerts() == []


def test_flapping_alert_starts_a_new_pending_period() -> None:
    r = rule(for_ms=1 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [GPU0])
    assert states(r) == ["firing"]
    r.step(2 * MIN, [])
    assert states(r) == ["inactive/resolved"]
    r.step(3 * MIN, [GPU0])
    (alert,) = r.alerts()
    assert alert.state is AlertState.PENDING and alert.active_at_ms == 3 * MIN and alert.resolved_at_ms == 0
    r.step(4 * MIN, [GPU0])
    assert states(r) == ["firing"]


def test_value_and_annotations_follow_the_latest_evaluation() -> None:
    r = rule(for_ms=5 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [Candidate(GPU0.labels, {"summary": "hotter"}, 95.0)])
    (alert,) = r.alerts()
    assert alert.value == 95.0 and alert.annotations == {"summary": "hotter"} and alert.active_at_ms == 0


def test_alerts_series_are_emitted_for_pending_and_firing() -> None:
    r = rule(for_ms=1 * MIN)
    samples = r.step(90_000, [GPU0])
    by_name = {metric_name(s.labels): s for s in samples}
    alerts, for_state = by_name["ALERTS"], by_name["ALERTS_FOR_STATE"]
    assert label_value(alerts.labels, "alertstate") == "pending" and alerts.value == 1.0
    assert label_value(alerts.labels, "gpu") == "0" and label_value(alerts.labels, "alertname") == "GpuHot"
    assert label_value(for_state.labels, "alertstate") == "" and for_state.value == 90.0  # seconds
    samples = r.step(150_000, [GPU0])
    assert {label_value(s.labels, "alertstate") for s in samples} == {"firing", ""}
    assert r.step(210_000, []) == []  # resolved: no series


def test_duplicate_label_sets_fail_without_touching_state() -> None:
    r = rule()
    r.step(0, [GPU0])
    with pytest.raises(AlertEvaluationError, match="same labelset"):
        r.step(1 * MIN, [GPU0, GPU0])
    assert states(r) == ["firing"]


def test_fingerprint_is_stable_and_order_free() -> None:
    assert fingerprint({}) == "cbf29ce484222325"  # FNV-1a 64 offset basis, as Prometheus' empty set
    a = fingerprint({"alertname": "GpuHot", "gpu": "0"})
    assert a == fingerprint({"gpu": "0", "alertname": "GpuHot"})
    assert a != fingerprint({"alertname": "GpuHot", "gpu": "1"})
    assert len(a) == 16 and int(a, 16) >= 0


def test_export_and_restore_round_trip() -> None:
    r = rule(for_ms=1 * MIN)
    r.step(0, [GPU0])
    r.step(1 * MIN, [GPU0])
    saved = r.export()
    fresh = rule(for_ms=1 * MIN)
    for entry in saved:
        fresh.restore(entry)
    assert fresh.alerts() == [replace(a, last_eval_ms=0) for a in r.alerts()]
    fresh.step(2 * MIN, [GPU0])
    (alert,) = fresh.alerts()
    assert alert.fired_at_ms == 1 * MIN and alert.active_at_ms == 0

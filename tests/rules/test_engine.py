"""The rule engine over a real store and our PromQL evaluator: ordering, staleness, failures, state."""

from __future__ import annotations

import math
from pathlib import Path

from watchdog.model import AlertState, Sample, metric, metric_name
from watchdog.promql import evaluate
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_text
from watchdog.store import Store

MIN = 60_000

RULES = """
groups:
  - name: engines
    rules:
      - record: engine:requests_waiting
        expr: sum by (job) (vllm:num_requests_waiting)
      - alert: QueueBacklog
        expr: engine:requests_waiting > 10
        for: 2m
        labels: {severity: warning}
        annotations:
          summary: "{{ $labels.job }} has {{ $value }} waiting requests in {{ $externalLabels.node }}"
          runbook: queue-backlog
"""


def ticking_clock() -> object:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.25
        return now[0]
    return clock


def make(store: Store, text: str = RULES, **kwargs: object) -> RuleEngine:
    return RuleEngine(load_rule_text(text), store, {"node": "gpu-7"}, clock=ticking_clock(), **kwargs)  # type: ignore[arg-type]


def scrape(store: Store, t_ms: int, waiting: float | None) -> None:
    samples = [] if waiting is None else [Sample(metric("vllm:num_requests_waiting", job="vllm", engine="0"),
                                                 waiting)]
    store.ingest("engine:vllm", samples, t_ms)


def values(store: Store, expr: str, t_ms: int) -> list[tuple[dict[str, str], float]]:
    result = evaluate(expr, store, t_ms)
    assert isinstance(result, list)
    return sorted((dict(s.labels), s.value) for s in result)


def test_recording_output_is_visible_to_later_rules_in_the_same_tick() -> None:
    store = Store()
    engine = make(store)
    scrape(store, 0, 25)
    (alert,) = engine.evaluate(0)
    assert alert.state is AlertState.PENDING and alert.value == 25
    assert alert.labels == {"alertname": "QueueBacklog", "job": "vllm", "severity": "warning"}
    assert alert.annotations["summary"] == "vllm has 25 waiting requests in gpu-7"
    assert values(store, "engine:requests_waiting", 0) == [({"__name__": "engine:requests_waiting",
                                                            "job": "vllm"}, 25.0)]


def test_alert_fires_after_for_and_writes_alerts_series() -> None:
    store = Store()
    engine = make(store)
    for t in range(0, 3 * MIN, MIN):
        scrape(store, t, 25)
        alerts = engine.evaluate(t)
    assert alerts[0].state is AlertState.FIRING and alerts[0].fired_at_ms == 2 * MIN
    assert values(store, 'ALERTS{alertstate="firing"}', 2 * MIN)[0][0]["alertname"] == "QueueBacklog"
    assert values(store, 'ALERTS{alertstate="pending"}', 2 * MIN) == []  # the pending series went stale
    assert values(store, "ALERTS_FOR_STATE", 2 * MIN)[0][1] == 0.0


def test_vanished_results_go_stale_and_alert_resolves() -> None:
    store = Store()
    engine = make(store)
    for t in range(0, 3 * MIN, MIN):
        scrape(store, t, 25)
        engine.evaluate(t)
    scrape(store, 3 * MIN, None)  # the engine's series vanished from its scrape
    (alert,) = engine.evaluate(3 * MIN)
    assert alert.is_resolved and alert.resolved_at_ms == 3 * MIN
    assert values(store, "engine:requests_waiting", 3 * MIN) == []
    assert values(store, "ALERTS", 3 * MIN) == []


def test_failing_rule_is_counted_and_the_tick_goes_on() -> None:
    text = """
groups:
  - name: g
    rules:
      - record: bad
        expr: a + on() group_left b
      - record: good
        expr: vector(1)
"""
    store = Store()
    store.ingest("x", [Sample(metric("a", k="1"), 1), Sample(metric("b", k="1"), 1),
                       Sample(metric("b", k="2"), 2)], 0)
    engine = make(store, text)
    engine.evaluate(0)
    assert values(store, "good", 0) == [({"__name__": "good"}, 1.0)]
    (failure,) = engine.failures_at(0)
    assert failure.rule == "bad" and "many-to-many" in failure.error
    by_name = {metric_name(s.labels): s.value for s in engine.self_samples()}
    failures = {dict(s.labels)["reason"]: s.value for s in engine.self_samples()
                if metric_name(s.labels) == "watchdog_rule_evaluation_failures_total"}
    assert failures == {"error": 1, "timeout": 0, "samples": 0}
    assert by_name["watchdog_rule_group_rules"] == 2
    assert by_name["watchdog_rule_group_evaluations_total"] == 1
    assert by_name["watchdog_rule_group_last_duration_seconds"] == 0.25
    assert by_name["watchdog_rule_group_last_evaluation_timestamp_seconds"] == 0.0


def test_self_samples_before_any_evaluation() -> None:
    by_name = {metric_name(s.labels): s.value for s in make(Store()).self_samples()}
    assert math.isnan(by_name["watchdog_rule_group_last_evaluation_timestamp_seconds"])


def test_non_vector_result_is_an_evaluation_failure() -> None:
    engine = make(Store(), 'groups: [{name: g, rules: [{record: r, expr: "up[5m]"}]}]')
    engine.evaluate(0)
    assert engine.failures_at(0)[0].error == "rule result is not a vector or scalar"


def test_scalar_result_records_one_series_without_labels() -> None:
    store = Store()
    make(store, 'groups: [{name: g, rules: [{record: r, expr: "1 + 1", labels: {a: b}}]}]').evaluate(0)
    assert values(store, "r", 0) == [({"__name__": "r", "a": "b"}, 2.0)]


def test_state_survives_a_restart_through_export(tmp_path: Path) -> None:
    store = Store()
    engine = make(store)
    for t in range(0, 3 * MIN, MIN):
        scrape(store, t, 25)
        engine.evaluate(t)
    saved = engine.export_state()
    assert saved[0]["state"] == "firing" and saved[0]["active_at_ms"] == 0
    restarted = make(store, restored_state=saved)
    scrape(store, 4 * MIN, 30)
    (alert,) = restarted.evaluate(4 * MIN)
    assert alert.state is AlertState.FIRING and alert.active_at_ms == 0 and alert.fired_at_ms == 2 * MIN
    assert alert.fingerprint == saved[0]["fingerprint"]


def test_restored_alert_of_a_removed_rule_is_dropped() -> None:
    engine = make(Store(), restored_state=[{
        "rule_group": "gone", "alertname": "Old", "labels": {"alertname": "Old"}, "state": "firing",
        "active_at_ms": 0}])
    assert engine.alerts() == []


def test_templates_can_query_the_store() -> None:
    text = """
groups:
  - name: g
    rules:
      - alert: A
        expr: vector(1)
        annotations:
          total: '{{ with query "sum(vllm:num_requests_waiting)" }}{{ . | first | value }}{{ end }}'
"""
    store = Store()
    scrape(store, 0, 7)
    (alert,) = make(store, text).evaluate(0)
    assert alert.annotations["total"] == "7"


def test_empty_rendered_label_is_dropped_and_rule_labels_override_series_labels() -> None:
    text = """
groups:
  - name: g
    rules:
      - alert: A
        expr: vllm:num_requests_waiting
        labels: {job: overridden, empty: '{{ $labels.nope }}'}
"""
    store = Store()
    scrape(store, 0, 7)
    (alert,) = make(store, text).evaluate(0)
    assert alert.labels == {"alertname": "A", "engine": "0", "job": "overridden"}


def test_retire_stale_marks_everything_the_engine_wrote() -> None:
    store = Store()
    engine = make(store)
    scrape(store, 0, 25)
    engine.evaluate(0)
    assert values(store, "ALERTS", 0) and values(store, "engine:requests_waiting", 0)
    engine.retire(MIN)
    assert values(store, "ALERTS", MIN) == [] and values(store, "engine:requests_waiting", MIN) == []


def test_recording_label_sets_follow_the_result_and_clashes_fail_every_time() -> None:
    """A recording rule keeps the label sets it wrote its last result under while the result's label sets
    stay the same: new series, vanished ones and a result whose label sets clash once the rule's labels
    are applied (an evaluation failure at each evaluation, not only the first) all come out as without it."""
    store = Store()
    engine = make(store, """
groups:
  - name: g
    rules:
      - record: engine:waiting
        expr: vllm:num_requests_waiting
        labels: {engine: "all"}
""")
    def scrape_engines(t_ms: int, engines: list[str]) -> None:
        store.ingest("engine:vllm", [Sample(metric("vllm:num_requests_waiting", job="vllm", engine=e), t_ms / 1000)
                                      for e in engines], t_ms)

    for t_ms, engines in ((0, ["0"]), (1000, ["0"]), (2000, ["0", "1"]), (3000, ["0", "1"]), (4000, ["1"])):
        scrape_engines(t_ms, engines)
        engine.evaluate(t_ms)
        written = values(store, "engine:waiting", t_ms)
        if len(engines) == 1:
            assert written == [({"__name__": "engine:waiting", "engine": "all", "job": "vllm"}, t_ms / 1000)]
            assert not engine.failures_at(t_ms)
        else:  # two engines, one label set once engine="all" is applied
            assert [f.error for f in engine.failures_at(t_ms)] == [
                "vector contains metrics with the same labelset after applying rule labels"]

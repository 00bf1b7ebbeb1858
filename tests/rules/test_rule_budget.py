"""A time budget per rule evaluation, and groups that honour their own ``interval:``."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchdog.model import Sample, metric, metric_name
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_text
from watchdog.store import Store

PATHOLOGICAL = """
groups:
  - name: heavy
    rules:
      - record: heavy:max
        expr: max_over_time((sum by (job) (rate(x[5m])))[15m:1ms])
      - record: light:one
        expr: vector(1)
"""


def _store() -> Store:
    store = Store()
    for t in range(0, 900_000, 15_000):
        store.ingest("x", [Sample(metric("x", job=str(j), i=str(i)), float(t)) for j in range(3) for i in range(5)], t)
    return store


def _failures(engine: RuleEngine) -> dict[str, float]:
    return {dict(s.labels)["reason"]: s.value for s in engine.self_samples()
            if metric_name(s.labels) == "watchdog_rule_evaluation_failures_total"}


def test_a_rule_past_its_budget_is_stopped_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = _store()
    engine = RuleEngine(load_rule_text(PATHOLOGICAL, "heavy.yaml"), store, rule_timeout_s=0.05)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="watchdog.rules"):
        engine.evaluate(900_000)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"the tick took {elapsed:.2f}s despite a 0.05s budget"  # unbounded: minutes
    (failure,) = engine.failures_at(900_000)
    assert failure.rule == "heavy:max" and "timed out" in failure.error
    assert _failures(engine) == {"error": 0, "timeout": 1, "samples": 0}
    record = next(r for r in caplog.records if getattr(r, "reason", None) == "timeout")
    assert (record.file, record.rule_group, record.rule) == ("heavy.yaml", "heavy", "heavy:max")
    assert "time budget of 0.05s" in record.error
    # the next rule of the group still ran in the same tick
    (light,) = store.select([("__name__", "=", "light:one")])
    assert list(light.window(0, 900_000)[1]) == [1.0]


class _StarvedStore(Store):
    """A store whose every selection waits (as a thread does for a core on a busy host), using no CPU."""

    def select(self, matchers):  # type: ignore[no-untyped-def]
        time.sleep(0.12)
        return super().select(matchers)


def test_a_rule_that_only_waits_past_its_budget_is_not_stopped() -> None:
    """The budget is CPU time: a starved host delays a cheap rule, it does not fail it (steady.py's
    8 x 8 warnings on a loaded machine were cheap rules stopped by the wall clock)."""
    store = _StarvedStore()
    for t in range(0, 60_000, 15_000):
        store.ingest("x", [Sample(metric("x", job=str(j)), float(t)) for j in range(3)], t)
    rules = "groups:\n  - name: g\n    rules:\n      - record: x:sum\n        expr: sum(x{job=\"0\"}) + sum(x)\n"
    engine = RuleEngine(load_rule_text(rules, "starved.yaml"), store, rule_timeout_s=0.05)
    started = time.monotonic()
    engine.evaluate(45_000)
    assert time.monotonic() - started > 0.2  # it waited four times its budget
    assert engine.failures_at(45_000) == []
    (series,) = store.select([("__name__", "=", "x:sum")])
    assert list(series.window(0, 45_000)[1]) == [180_000.0]


def test_without_a_budget_the_same_rule_finishes() -> None:
    text = PATHOLOGICAL.replace("[15m:1ms]", "[15m:30s]")
    engine = RuleEngine(load_rule_text(text, "heavy.yaml"), _store(), rule_timeout_s=5.0)
    engine.evaluate(900_000)
    assert engine.failures_at(900_000) == []
    assert _failures(engine) == {"error": 0, "timeout": 0, "samples": 0}


def test_groups_honour_their_interval() -> None:
    text = """
groups:
  - name: every_tick
    rules:
      - record: fast
        expr: vector(time())
  - name: slow
    interval: 5s
    rules:
      - record: slow
        expr: vector(time())
"""
    store = Store()
    engine = RuleEngine(load_rule_text(text, "g.yaml"), store, honour_group_intervals=True)
    for t in range(0, 11_000, 1000):
        engine.evaluate(t)
    evaluations = {dict(s.labels)["rule_group"]: s.value for s in engine.self_samples()
                   if metric_name(s.labels) == "watchdog_rule_group_evaluations_total"}
    assert evaluations == {"every_tick": 11, "slow": 3}
    (slow,) = store.select([("__name__", "=", "slow")])
    assert list(slow.window(0, 11_000)[0]) == [0, 5000, 10_000]


SLOW_GROUP = """
groups:
  - name: slow
    interval: 5s
    rules:
      - record: slow
        expr: vector(time())
"""


def test_group_interval_slack_keeps_a_jittered_tick_on_its_interval() -> None:
    """Tick times come from the wall clock and jitter: a 5 s group must run every fifth 1 s tick, not slip
    to the sixth whenever a tick starts a few milliseconds earlier than the one it is measured from."""
    ticks = [k * 1000 + (30 if k == 0 else 2) for k in range(16)]  # the first tick started late
    for slack, expected in ((0, [30, 6002, 11_002]), (500, [30, 5002, 10_002, 15_002])):
        store = Store()
        engine = RuleEngine(load_rule_text(SLOW_GROUP, "g.yaml"), store, honour_group_intervals=True,
                            group_interval_slack_ms=slack)
        for t in ticks:
            engine.evaluate(t)
        (slow,) = store.select([("__name__", "=", "slow")])
        assert list(slow.window(0, 20_000)[0]) == expected


def test_a_group_on_its_interval_meets_its_hold_despite_jitter() -> None:
    """A 10 s hold in a 5 s group, the condition true from the first (late) tick: the alert fires at the
    evaluation about 10 s later, not at the one after it because that tick started 28 ms early."""
    text = SLOW_GROUP + """      - alert: Held
        expr: vector(1)
        for: 10s
"""
    ticks = [k * 1000 + (30 if k == 0 else 2) for k in range(16)]  # evaluated at 30, 5002, 10002, 15002
    engine = RuleEngine(load_rule_text(text, "g.yaml"), Store(), honour_group_intervals=True,
                        group_interval_slack_ms=500)
    firing = [t for t in ticks if any(a.state.value == "firing" for a in engine.evaluate(t))]
    assert firing[0] == 10_002  # 9 972 ms after it became active: within the half-tick slack of 10 s


def test_promtool_unit_tests_ignore_group_intervals() -> None:
    """promtool 2.42 evaluates every group at every evaluation_interval step; so does our runner."""
    engine = RuleEngine(load_rule_text(SLOW_GROUP, "g.yaml"), Store())
    for t in range(0, 3000, 1000):
        engine.evaluate(t)
    assert engine.stats["slow"].evaluations_total == 3


def test_rules_check_warns_about_subquery_cost(tmp_path: Path) -> None:
    path = tmp_path / "heavy.yaml"
    path.write_text(PATHOLOGICAL + """      - alert: Nested
        expr: max_over_time(avg_over_time(x[1m:])[1h:1m]) > 1
      - record: fine
        expr: max_over_time(rate(x[5m])[10m:1m])
""")
    result = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr  # a warning, not a failure
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, result.stderr
    assert 'rule 1 "heavy:max"' in warnings[0] and "[15m:1ms] = 900001 steps" in warnings[0]
    assert 'rule 3 "Nested"' in warnings[1] and "[1h:1m] = 61 steps inside [1m:1s] = 61 steps" in warnings[1]
    assert "3721 inner evaluations" in warnings[1] and "steps x series" in warnings[1]


def test_an_agent_with_a_pathological_rule_keeps_its_tick(tmp_path: Path) -> None:
    """A running agent (real collectors on the fake GPU, real rule engine) with a subquery that would
    take minutes per evaluation: every tick still finishes well within the 1 s interval."""
    from tests.support.agents import make_agent

    now = [1_800_000_000.0]
    agent = make_agent(tmp_path, """
groups:
  - name: heavy
    rules:
      - record: heavy:max
        expr: max_over_time((sum by (gpu) (rate(watchdog_gpu_temperature_celsius[5m])))[15m:1ms])
  - name: light
    rules:
      - record: light:gpus
        expr: count(watchdog_gpu_temperature_celsius)
""", clock=lambda: now[0], rules_section={"rule_timeout_seconds": 0.1})
    durations = []
    for _ in range(3):
        started = time.thread_time()  # CPU time: other processes on a shared machine do not count
        agent.tick()
        durations.append(time.thread_time() - started)
        now[0] += 1
    assert max(durations) < 1.0, durations  # unbudgeted, the heavy rule alone takes minutes
    failures = {tuple(sorted(dict(s.labels).items())): s.value for s in agent.rule_engine.self_samples()
                if metric_name(s.labels) == "watchdog_rule_evaluation_failures_total"}
    assert failures[(("__name__", "watchdog_rule_evaluation_failures_total"), ("reason", "timeout"),
                     ("rule_group", "heavy"))] == 3
    assert [s for s in agent.store.all_series() if metric_name(s.labels) == "light:gpus"]

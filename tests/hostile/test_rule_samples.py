"""A rule that would allocate gigabytes is stopped at ``rules.max_samples``, not the process (issue 17 item 4).

``count_over_time((watchdog_gpu_temperature_celsius @ end())[1h:1ms])`` over the eight fake GPUs asks for 3.6 million
subquery steps times eight series, about 29 million samples (2 GB of Python objects). The limit is made small
here so that the test itself stays bounded; the same rule without a limit is what item 4 is about.
"""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path

import pytest

from tests.hostile.conftest import hostile_agent
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.model import Sample, metric, metric_name
from watchdog.promql import EvalOptions, TooManySamples, evaluate
from watchdog.store import Store

GREEDY = """
groups:
  - name: greedy
    rules:
      - record: greedy:steps
        expr: count_over_time((watchdog_gpu_temperature_celsius @ end())[1h:1ms])
      - record: greedy:after
        expr: count(watchdog_gpu_temperature_celsius)
"""

LIMIT = 20_000


def test_a_rule_that_would_allocate_gigabytes_is_stopped_and_the_tick_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rules = tmp_path / "greedy.yaml"
    rules.write_text(GREEDY)
    clock = [1_800_000_000.0]
    agent = hostile_agent(tmp_path, clock, {"rules": {
        "paths": [str(rules)], "max_samples": LIMIT, "rule_timeout_seconds": 60}})  # the limit, not the clock)
    try:
        tracemalloc.start()
        with caplog.at_level(logging.WARNING, logger="watchdog.rules"):
            agent.tick()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 30_000_000, f"peak {peak / 1e6:.0f} MB while the rule was stopped at {LIMIT} samples"
        record = next(r for r in caplog.records if getattr(r, "reason", None) == "samples")
        assert (record.file, record.rule_group, record.rule) == (str(rules), "greedy", "greedy:steps")
        assert "too many samples" in record.error and f"sample limit of {LIMIT}" in record.error
        failures = {dict(s.labels)["reason"]: s.value for s in agent.rule_engine.self_samples()
                    if metric_name(s.labels) == "watchdog_rule_evaluation_failures_total"}
        assert failures["samples"] == 1 and failures["error"] == 0
        # the next rule of the same group ran in the same tick
        (after,) = agent.store.select([("__name__", "=", "greedy:after")])
        assert after.latest() is not None and after.latest()[1] == 8.0  # type: ignore[index]
    finally:
        agent.close()


def test_the_default_limit_comes_from_the_schema_and_lets_ordinary_rules_through(tmp_path: Path) -> None:
    settings = settings_from_config(load_config_text("{}", "config.yaml"))
    assert settings.rules.max_samples == 1_000_000
    clock = [1_800_000_000.0]
    agent = hostile_agent(tmp_path, clock, {})  # the shipped rules
    try:
        assert agent.rule_engine.sample_limit == 1_000_000
        for _ in range(3):
            agent.tick()
            clock[0] += 1
        assert agent.rule_engine.stats and all(
            s.failures_by_reason["samples"] == 0 for s in agent.rule_engine.stats.values())
    finally:
        agent.close()


def _store(series: int, points: int) -> Store:
    store = Store()
    for t in range(points):
        store.ingest("x", [Sample(metric("x", i=str(i)), float(t)) for i in range(series)], t * 1000)
    return store


@pytest.mark.parametrize(("query", "held"), [
    ("x", 50),                                  # an instant vector: one sample per series
    ("sum_over_time(x[1m])", 50 * 61),          # range-selector points
    ("count_over_time(x[1m:1s])", 50 * 61),     # subquery steps times series
    ("count_over_time((x * on(i) x)[1m:1s])", 50 * 61),
])
def test_the_limit_counts_what_is_held_at_once(query: str, held: int) -> None:
    store = _store(50, 120)
    evaluate(query, store, 119_000, EvalOptions(sample_limit=held + 50))  # fits (plus the output vector)
    with pytest.raises(TooManySamples, match="too many samples into memory in query execution"):
        evaluate(query, store, 119_000, EvalOptions(sample_limit=held - 1))

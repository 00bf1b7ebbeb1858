"""Every shipped scenario, fast-forwarded through the real agent, fires what it promises and nothing it
forbids (the scenario's ``expect:`` block), and lists everything it fires (``alerts`` or ``also``), so the
demo's "not in the scenario's expectations" marks only a real surprise. This is the demo's contract,
checked on simulated time."""

from __future__ import annotations

from functools import cache

import pytest

from watchdog.demo.harness import ScenarioResult, run_scenario
from watchdog.demo.scenario import list_scenarios, load_scenario

pytestmark = pytest.mark.slow


@cache
def result_of(name: str) -> ScenarioResult:
    """One run per scenario and test process (the healthy one serves two tests), over its whole duration:
    an alert fired late that the scenario does not list must fail the test."""
    return run_scenario(load_scenario(name))


@pytest.mark.parametrize("name", list_scenarios())
def test_scenario_fires_what_it_promises(name: str) -> None:
    scenario = load_scenario(name)
    result = result_of(name)
    fired_in_time = {alert for alert, at in result.fired.items() if at <= scenario.expect_within_seconds}
    missing = set(scenario.expect_alerts) - fired_in_time
    within = scenario.expect_within_seconds
    assert not missing, f"{name}: expected within {within}s: {sorted(missing)}; fired: {result.fired}"
    forbidden = set(scenario.forbid_alerts) & set(result.fired)
    assert not forbidden, f"{name}: must never fire {sorted(forbidden)}; fired: {result.fired}"
    not_along = set(scenario.also_alerts) - set(result.fired)
    assert not not_along, f"{name}: expected along the way: {sorted(not_along)}; fired: {result.fired}"
    surprises = set(result.fired) - set(scenario.expect_alerts) - set(scenario.also_alerts)
    assert not surprises, f"{name}: fired but not listed in expect.alerts or expect.also: {sorted(surprises)}"


def test_healthy_node_is_quiet() -> None:
    result = result_of("healthy")
    assert load_scenario("healthy").forbid_alerts  # so its run above was not cut short
    assert result.fired == {}, result.fired

"""Every shipped scenario, fast-forwarded through the real agent, fires what it promises and nothing it
forbids (the scenario's ``expect:`` block). This is the demo's contract, checked on simulated time."""

from __future__ import annotations

import pytest

from watchdog.demo.harness import run_scenario
from watchdog.demo.scenario import list_scenarios, load_scenario


@pytest.mark.parametrize("name", list_scenarios())
def test_scenario_fires_what_it_promises(name: str) -> None:
    scenario = load_scenario(name)
    result = run_scenario(scenario)
    fired_in_time = result.fired_within(scenario.expect_within_seconds)
    missing = set(scenario.expect_alerts) - fired_in_time
    within = scenario.expect_within_seconds
    assert not missing, f"{name}: expected within {within}s: {sorted(missing)}; fired: {result.fired}"
    forbidden = set(scenario.forbid_alerts) & set(result.fired)
    assert not forbidden, f"{name}: must never fire {sorted(forbidden)}; fired: {result.fired}"


def test_healthy_node_is_quiet() -> None:
    result = run_scenario("healthy")
    assert result.fired == {}, result.fired

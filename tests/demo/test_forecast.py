"""The KV exhaustion forecast on simulated traffic: it warns before the first preemption of the
long-context bomb and of a prompt-length drift spread over minutes, and never on steady, rising-by-day or
falling traffic (an hour of diurnal traffic replayed through the real store and rule engine in seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.demo.diurnal import DiurnalTraffic, ForecastReplay, diurnal_samples, replay_forecast
from watchdog.demo.harness import ScenarioResult, run_scenario
from watchdog.promtool.runner import run_test_file

ROOT = Path(__file__).resolve().parents[2]
RULES = [str(ROOT / "rules" / "engines.yaml")]
ALERT = "EngineKvExhaustionPredicted"
PREEMPTED = "increase(engine:preemptions_total[1m]) > 0"


def replay(**traffic: float) -> ForecastReplay:
    return replay_forecast(diurnal_samples(DiurnalTraffic(**traffic)), RULES)  # type: ignore[arg-type]


@pytest.mark.parametrize("start_hour", [6.0, 18.0], ids=["morning-rise", "evening-fall"])
def test_an_hour_of_diurnal_traffic_never_predicts_exhaustion(start_hour: float) -> None:
    result = replay(start_hour=start_hour)
    assert len(result.seconds) == 361
    assert max(result.kv_usage) < 1.0  # the traffic itself never fills the pool
    assert result.alert_share() == 0.0, [
        (s, e) for s, e, a in zip(result.seconds, result.eta_seconds, result.alerting, strict=True) if a]


def test_prompt_length_drift_is_predicted_minutes_before_the_pool_fills() -> None:
    """The same morning, but from minute 10 the median prompt grows by 1 token per second."""
    result = replay(drift_start_seconds=600.0, drift_tokens_per_second=1.0)
    warned, full = result.first_alert_seconds(), result.first_full_seconds()
    assert warned is not None and full is not None
    assert warned > 600.0  # nothing before the drift starts
    assert full - warned >= 120.0, (warned, full)


def test_long_context_bomb_is_predicted_before_the_first_preemption() -> None:
    def preempted(result: ScenarioResult) -> bool:
        return "preempted" in result.seen

    result = run_scenario("long-context-bomb", duration_seconds=30, stop_when=preempted,
                          watch={"preempted": PREEMPTED})
    assert "preempted" in result.seen
    assert ALERT in result.pending, result.pending
    # The surge driver warns 3 samples into the burst (7 s), the first preemption comes at 12 s.
    assert result.seen["preempted"] - result.pending[ALERT] >= 5, (result.pending, result.seen)


@pytest.mark.parametrize("name", ["forecast_steps.yaml", "forecast_real.yaml"])
def test_forecast_rule_tests_pass_under_our_evaluator(name: str) -> None:
    """The 5-second step shapes and lane run13's real 1-second trace (a false positive of the old arrivals
    driver). scripts/test runs every rules/tests file under promtool; tests/rules/test_issue15_rules.py runs
    the other forecast files under ours."""
    result = run_test_file(str(ROOT / "rules" / "tests" / name))
    assert result.ok, "\n".join(result.errors)[-6000:]

"""Scenario files: every shipped scenario loads; errors name file and key; knobs hold their last value."""

from __future__ import annotations

import pytest

from watchdog.demo.engine_sim import EngineModel
from watchdog.demo.scenario import (
    ScenarioError,
    knob_value,
    list_scenarios,
    load_scenario,
    parse_duration,
    parse_scenario,
)
from watchdog.engines.buckets import buckets_1_2_5
from watchdog.exposition import parse_exposition


def test_every_shipped_scenario_loads() -> None:
    names = list_scenarios()
    assert {"healthy", "long-context-bomb", "gpu-hot"} <= set(names)
    for name in names:
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.description


def test_knob_holds_last_value_and_skips_omitted() -> None:
    values = [1.0, None, 3.0]
    assert knob_value(values, 0, 9) == 1.0
    assert knob_value(values, 1, 9) == 1.0
    assert knob_value(values, 10, 9) == 3.0
    assert knob_value([None], 0, 9) == 9


def test_errors_name_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"engines\[0\]\.knobs\.kv_usag"):
        parse_scenario({"name": "x", "engines": [{"job": "a", "knobs": {"kv_usag": "1"}}]}, "s.yaml")
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.fault"):
        parse_scenario({"name": "x", "faults": [{"at": "1s", "fault": "meteor"}]}, "s.yaml")
    with pytest.raises(ScenarioError, match="invalid series value"):
        parse_scenario({"name": "x", "engines": [{"job": "a", "knobs": {"ttft": "1+x"}}]}, "s.yaml")
    with pytest.raises(ScenarioError, match="unknown key"):
        parse_scenario({"name": "x", "engins": []}, "s.yaml")


def test_durations() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("2m") == 120
    assert parse_duration("500ms") == 0.5
    with pytest.raises(ScenarioError):
        parse_duration("soon")


def test_vllm_buckets_match_build_1_2_5() -> None:
    assert buckets_1_2_5(100) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def test_engine_model_counts_requests_and_histograms() -> None:
    scenario = parse_scenario({"name": "x", "engines": [{"job": "a", "knobs": {
        "arrival_rate": "10", "generation_tokens": "100", "ttft": "0.2", "kv_usage": "0.5x2 0.9"}}]}, "s")
    model = EngineModel(scenario.engines[0], 1.0)
    model.advance_to(4)  # steps 0..4: 5 steps × 10 requests
    samples = {(lbl, v) for lbl, v, _ in parse_exposition(model.exposition().decode())}
    by_name: dict[str, float] = {}
    for labels, value in samples:
        d = dict(labels)
        if d["__name__"] == "vllm:time_to_first_token_seconds_bucket" and d["le"] == "+Inf":
            by_name["ttft_count"] = value
        if d["__name__"] == "vllm:kv_cache_usage_perc":
            by_name["kv"] = value
        if d["__name__"] == "vllm:request_success_total" and d.get("finished_reason") == "stop":
            by_name["success"] = value
    assert by_name["ttft_count"] == 50
    assert by_name["success"] == 50
    assert by_name["kv"] == 0.9


def test_engine_model_stall_stops_tokens() -> None:
    scenario = parse_scenario({"name": "x", "engines": [{"job": "a", "knobs": {
        "arrival_rate": "10", "generation_stall": "0x1 1"}}]}, "s")
    model = EngineModel(scenario.engines[0], 1.0)
    model.advance_to(1)
    before = model.exposition().decode()
    model.advance_to(10)
    assert _value(before, "vllm:generation_tokens_total") == _value(
        model.exposition().decode(), "vllm:generation_tokens_total")


def _value(text: str, name: str) -> float:
    for labels, value, _ in parse_exposition(text):
        if dict(labels)["__name__"] == name:
            return value
    raise AssertionError(name)

"""SLO rule generation: targets from config, bucket-boundary warnings, rendered rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.settings import settings_of
from watchdog.config import load_settings
from watchdog.config.settings import Settings
from watchdog.engines.buckets import boundary_at_or_below, le_spellings
from watchdog.engines.slo import render_slo_rules, slo_rule_groups, slo_targets, slo_warnings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = ROOT / "rules" / "tests" / "generated" / "slo_example_config.yaml"
EXAMPLE_RULES = ROOT / "rules" / "tests" / "generated" / "slo_example_rules.yaml"


def config(text: str) -> Settings:
    return settings_of(text)


def records(groups: list[dict[str, Any]]) -> list[str]:
    return [rule["record"] for group in groups for rule in group["rules"]]


def test_rendered_example_matches_the_checked_in_rules() -> None:
    assert EXAMPLE_RULES.read_text(encoding="utf-8") == render_slo_rules(load_settings(EXAMPLE_CONFIG)), (
        "run: python -m watchdog.engines.slo rules/tests/generated/slo_example_config.yaml "
        "> rules/tests/generated/slo_example_rules.yaml")


def test_target_on_a_boundary_gives_no_warning_and_off_boundary_names_the_bucket_used() -> None:
    on = config("""
engines:
  - {url: "http://h:8000/metrics", job: v, kind: vllm,
     models: [{model: m, ttft_seconds: 0.5, tpot_seconds: 0.05, e2e_seconds: 30}]}
""")
    assert slo_warnings(on) == []
    off = config("""
engines:
  - {url: "http://h:8000/metrics", job: v, kind: vllm, models: [{model: m, ttft_seconds: 0.3}]}
""")
    (v0, v1) = slo_warnings(off)
    assert "engines[0] (job v) model 'm': ttft_seconds 0.3" in v0
    assert "vLLM V0" in v0 and "vLLM V1" in v1
    assert "the 0.25 s bucket is used instead" in v1
    assert "understated" in v1


def test_auto_kind_checks_every_known_layout_and_flags_targets_below_every_bucket() -> None:
    warnings = slo_warnings(config("""
engines:
  - {url: "http://h:8000/metrics", job: e, models: [{model: "*", ttft_seconds: 0.05}]}
"""))
    assert any("SGLang >= 0.5" in w and "the 0.1 s bucket" in w and "overstated" in w for w in warnings)
    assert any("vLLM V1" in w and "the 0.04 s bucket" in w for w in warnings)


def test_defaults_apply_to_endpoints_without_models_and_star_excludes_named_models() -> None:
    c = config("""
engines:
  - {url: "http://h:8000/metrics", job: a}
  - url: "http://h:8001/metrics"
    job: b
    models: [{model: "*", ttft_seconds: 2.5}, {model: x, ttft_seconds: 1}]
slo: {objective: 0.995, ttft_seconds: 1.0, tpot_seconds: 0.05}
""")
    targets = slo_targets(c)
    assert [(t.job, t.model, t.signal, t.target_seconds, t.objective) for t in targets] == [
        ("a", "*", "ttft", 1.0, 0.995), ("a", "*", "tpot", 0.05, 0.995),
        ("b", "*", "ttft", 2.5, 0.995), ("b", "*", "tpot", 0.05, 0.995),
        ("b", "x", "ttft", 1.0, 0.995), ("b", "x", "tpot", 0.05, 0.995),
    ]
    text = render_slo_rules(c)
    assert 'engine:ttft_seconds_count{job="b",model_name!~"x"}' in text
    assert 'engine:ttft_seconds_count{job="b",model_name="x"}' in text
    assert "/ 0.005" in text  # error budget of a 99.5 % objective


def test_groups_and_names() -> None:
    assert slo_rule_groups(config("")) == []
    c = config("""
engines:
  - {url: "http://h:8000/metrics", job: v, models: [{model: m, ttft_seconds: 0.5}]}
""")
    groups = slo_rule_groups(c)
    assert [g["name"] for g in groups] == ["engine-latency-quantiles", "engine-slo"]
    names = records(groups)
    for name in ("engine:ttft_seconds:p99_5m", "engine:tpot_seconds:p50_1m", "engine:itl_seconds:p90_5m",
                 "engine:e2e_latency_seconds:p99_1m", "engine:queue_time_seconds:p99_5m",
                 "engine:slo_attainment_ratio:rate6h", "engine:slo_error_budget_burn_rate:rate30m",
                 "engine:goodput_tokens_per_second:rate5m",
                 "engine:predicted_queue_wait_over_ttft_target_ratio"):
        assert name in names


@pytest.mark.parametrize(("target", "bounds", "expected"), [
    (0.5, (0.25, 0.5, 1.0), 0.5),
    (0.6, (0.25, 0.5, 1.0), 0.5),
    (0.1, (0.25, 0.5), 0.25),
    (3.0, (0.25, 0.5), 0.5),
])
def test_boundary_at_or_below(target: float, bounds: tuple[float, ...], expected: float) -> None:
    assert boundary_at_or_below(target, bounds) == expected


def test_le_spellings_cover_python_and_go_clients() -> None:
    assert le_spellings(1.0) == ["1.0", "1"]
    assert le_spellings(0.25) == ["0.25"]
    assert le_spellings(2560.0) == ["2560.0", "2560"]


def test_generating_the_rules_logs_the_warnings(caplog: pytest.LogCaptureFixture) -> None:
    c = config("""
engines:
  - {url: "http://h:8000/metrics", job: v, kind: vllm, models: [{model: m, ttft_seconds: 0.3}]}
""")
    with caplog.at_level("WARNING", logger="watchdog.engines.slo"):
        slo_rule_groups(c)
    assert sum("ttft_seconds 0.3" in r.getMessage() for r in caplog.records) == 2

"""The rule group generated from the config's ``forecast`` section (the KV exhaustion forecast's horizon).

``rules/forecast.yaml`` computes ``engine:kv_exhaustion_eta_seconds`` and raises
``EngineKvExhaustionPredicted`` below ``engine:kv_exhaustion_horizon_seconds``, or below 600 s where that
series does not exist (a plain Prometheus loading only the rule pack). :func:`forecast_rule_groups`
returns the group that records the configured horizon, for ``rules render`` and the agent. Pure: config
in, data out. Formulas and lead times: docs/forecast.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchdog.engines.canonical import dump_rule_yaml

DEFAULT_HORIZON_SECONDS = 600.0
GROUP_NAME = "engine-forecast-config"


def kv_exhaustion_horizon_seconds(config: Mapping[str, Any]) -> float:
    """The configured horizon of EngineKvExhaustionPredicted (default 600 s)."""
    section = config.get("forecast") or {}
    return float(section.get("kv_exhaustion_horizon_seconds", DEFAULT_HORIZON_SECONDS))


def forecast_rule_groups(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One group recording the horizon when engines are configured; none otherwise."""
    if not config.get("engines"):
        return []
    horizon = kv_exhaustion_horizon_seconds(config)
    text = repr(horizon)
    text = text[:-2] if text.endswith(".0") else text
    return [{"name": GROUP_NAME, "rules": [
        {"record": "engine:kv_exhaustion_horizon_seconds", "expr": f"vector({text})"},
    ]}]


def render_forecast_rules(config: Mapping[str, Any]) -> str:
    """The generated group as one Prometheus rule file (YAML text); ``groups: []`` without engines."""
    header = "# GENERATED from the config's forecast section by watchdog.engines.forecast (docs/forecast.md).\n"
    return header + dump_rule_yaml({"groups": forecast_rule_groups(config)})

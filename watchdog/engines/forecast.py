"""The rule group generated from the config's ``forecast`` section (the KV exhaustion forecast's horizon).

The ``engines`` group (``rules/engines.yaml``, :mod:`watchdog.engines.kv_forecast`) computes
``engine:kv_exhaustion_eta_seconds`` and raises ``EngineKvExhaustionPredicted`` below
``engine:kv_exhaustion_horizon_seconds``, or below 600 s where that series does not exist (a plain
Prometheus loading only the rule pack). :func:`forecast_rule_groups`
returns the group that records the configured horizon, for ``rules render`` and the agent. Pure: settings
in, data out. Formulas and lead times: docs/forecast.md.
"""

from __future__ import annotations

from typing import Any

from watchdog.config.settings import Settings

GROUP_NAME = "engine-forecast-config"


def forecast_rule_groups(settings: Settings) -> list[dict[str, Any]]:
    """One group recording the horizon when engines are configured; none otherwise."""
    if not settings.engines:
        return []
    text = repr(float(settings.forecast.kv_exhaustion_horizon_seconds))
    text = text[:-2] if text.endswith(".0") else text
    return [{"name": GROUP_NAME, "rules": [
        {"record": "engine:kv_exhaustion_horizon_seconds", "expr": f"vector({text})"},
    ]}]



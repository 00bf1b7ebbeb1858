"""Shared builders of the serving tests: settings with the schema's defaults, readings of a healthy engine."""

from __future__ import annotations

import dataclasses
from typing import Any

from watchdog.config.settings import DrainGuardSettings, ServingSettings, section_settings
from watchdog.serving.readings import EngineReadings

NOW_MS = 1_800_000_000_000
SCRAPE_S = 5.0


def serving(**overrides: Any) -> ServingSettings:
    """The ``serving`` section with the schema's defaults and ``overrides`` (``drain_guard`` a dict)."""
    guard = overrides.pop("drain_guard", None)
    s = section_settings(ServingSettings, "serving")
    if guard:
        s = dataclasses.replace(s, drain_guard=dataclasses.replace(s.drain_guard, **guard))
    return dataclasses.replace(s, **overrides)


def guard_settings(**overrides: Any) -> DrainGuardSettings:
    """``serving.drain_guard`` with defaults and overrides."""
    return dataclasses.replace(serving().drain_guard, **overrides)


def reading(job: str = "vllm-a", *, kv_free: float | None = 0.8, at_ms: int = NOW_MS, **fields: Any) -> EngineReadings:
    """A fresh, answering engine with ``kv_free`` free KV share (None: no KV reading)."""
    base: dict[str, Any] = {"job": job, "instance": f"127.0.0.1:{8000 + len(job)}", "reading_ms": at_ms, "up": 1.0,
                            "kv_reading_ms": at_ms if kv_free is not None else None,
                            "kv_usage_ratio": 1.0 - kv_free if kv_free is not None else None}
    base.update(fields)
    return EngineReadings(**base)

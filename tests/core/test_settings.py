"""Typed settings: the schema is the one source of defaults, and the settings cover the whole schema."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from tests.support.settings import settings_of
from watchdog.config import load_config, schema
from watchdog.config.settings import (
    EngineKind,
    RemediationMode,
    Settings,
    SlackSettings,
    section_settings,
    settings_document,
    settings_from_config,
)


def _resolve(sub: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    return root["$defs"][sub["$ref"].split("/")[-1]] if "$ref" in sub else sub


def _settings_class(tp: Any) -> type | None:
    """The settings dataclass inside ``tp`` (``X``, ``tuple[X, ...]``, ``Mapping[str, X]``), if any."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    for arg in typing.get_args(tp):
        found = _settings_class(arg)
        if found is not None:
            return found
    return None


def _walk(cls: type, sub: dict[str, Any], root: dict[str, Any], path: str, out: list[str]) -> None:
    sub = _resolve(sub, root)
    if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
        sub = _resolve(sub["items"], root)
    if sub.get("type") == "object" and "properties" not in sub and isinstance(sub.get("additionalProperties"), dict):
        sub = _resolve(sub["additionalProperties"], root)
    props = sub.get("properties", {})
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    out.extend(f"{path}{name}: in the schema, not in {cls.__name__}" for name in sorted(set(props) - fields))
    out.extend(f"{path}{name}: in {cls.__name__}, not in the schema" for name in sorted(fields - set(props)))
    for name in sorted(set(props) & fields):
        inner = _settings_class(hints[name])
        if inner is not None:
            _walk(inner, props[name], root, f"{path}{name}.", out)


def test_settings_cover_the_schema_key_for_key() -> None:
    root = schema()
    problems: list[str] = []
    _walk(Settings, root, root, "", problems)
    assert problems == []


def test_settings_classes_declare_no_defaults() -> None:
    """The schema is the only source of defaults: no settings field repeats one."""
    seen: set[type] = set()
    todo: list[type] = [Settings]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for f in dataclasses.fields(cls):
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, (cls, f.name)
            inner = _settings_class(typing.get_type_hints(cls)[f.name])
            if inner is not None:
                todo.append(inner)
    assert len(seen) > 20


def test_defaults_are_typed_and_frozen() -> None:
    settings = settings_from_config(load_config(None))
    assert settings.remediation.mode is RemediationMode.SUGGEST
    assert settings.collectors.nvml.timeout_seconds == 2.0 and isinstance(settings.tick_interval_seconds, float)
    assert settings.notifiers.grouping.member_labels[:2] == ("gpu", "uuid")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.remediation.mode = RemediationMode.AUTO  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.remediation.vars["x"] = "y"  # type: ignore[index]


def test_a_document_becomes_typed_sections() -> None:
    settings = settings_of({
        "remediation": {"mode": "approve", "allow": {"units": ["vllm.service"]}},
        "engines": [{"job": "vllm", "url": "http://127.0.0.1:8000/metrics", "kind": "vllm",
                     "models": [{"model": "m", "ttft_seconds": 0.5}]}],
    })
    assert settings.remediation.mode is RemediationMode.APPROVE
    assert settings.remediation.allow.units == ("vllm.service",)
    (engine,) = settings.engines
    assert engine.kind is EngineKind.VLLM and engine.scrape_timeout_seconds == 2.0
    assert engine.process.match is None and engine.models[0].tpot_seconds is None
    assert settings_from_config(settings_document(settings)) == settings


def test_one_section_gets_the_schema_defaults_for_the_rest() -> None:
    slack = section_settings(SlackSettings, "notifiers.slack", {"channel": "C1"})
    assert slack.channel == "C1" and slack.base_url == "https://slack.com/api/" and not slack.enabled

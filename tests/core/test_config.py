"""Config loading: defaults applied, errors naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.config import ConfigError, load_config, load_config_text, schema


def test_defaults_are_applied() -> None:
    config = load_config(None)
    assert config["tick_interval_seconds"] == 1
    assert config["listen"] == "0.0.0.0:9847"
    assert config["retention_seconds"] == 900


def test_unknown_key_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("tick_interval_seconds: 2\nlisten: 127.0.0.1:1\ntick_intervl: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and ":3" in message and "tick_intervl" in message


def test_wrong_type_names_key_path() -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text("rules:\n  paths: 5\n", "c.yaml")
    assert err.value.key_path == "rules.paths"
    assert err.value.line == 2


def test_invalid_yaml_names_line() -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text("a: [1,\nb: 2\n", "c.yaml")
    assert "invalid YAML" in str(err.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_schema_is_one_closed_object() -> None:
    merged = schema()
    assert merged["type"] == "object"
    assert merged["additionalProperties"] is False
    assert "tick_interval_seconds" in merged["properties"]

"""The documented example config is valid and means what it says."""

from __future__ import annotations

from pathlib import Path

from watchdog.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "config.yaml"


def test_example_config_validates() -> None:
    config = load_config(EXAMPLE)
    assert config["remediation"]["mode"] == "suggest"
    assert config["engines"][0]["models"][0]["ttft_seconds"] == 1.0
    assert config["notifiers"]["slack"]["token_env"] == "SLACK_BOT_TOKEN"

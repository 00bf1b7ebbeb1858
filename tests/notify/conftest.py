"""Fixtures for notification tests: a fake Slack on loopback, configs, dispatchers that get closed."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.notify.slack_api import DEFAULT_TOKEN, FakeSlack
from tests.support.settings import settings_of
from watchdog.config.loader import load_config_text
from watchdog.infra.state import StateDB
from watchdog.notify.dispatcher import NotificationDispatcher, dispatcher_for


def notify_config(slack: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """A validated, defaulted config with fast outbox retries for tests."""
    notifiers: dict[str, Any] = {
        "log": {"enabled": True, "format": "json"},
        "outbox": {
            "initial_backoff_seconds": 0.05,
            "max_backoff_seconds": 0.3,
            "poll_interval_seconds": 0.05,
            "failing_alert_after_seconds": 0.5,
        },
    }
    if slack is not None:
        notifiers["slack"] = {
            "enabled": True,
            "channel": "C0ALERTS",
            "timeout_seconds": 2,
            "rate_limit_max_wait_seconds": 2,
            **slack,
        }
    for key, value in sections.items():
        notifiers[key] = {**notifiers.get(key, {}), **value}
    return load_config_text(yaml.safe_dump({"node": "gpu-node-7", "notifiers": notifiers}))


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as server:
        yield server


@pytest.fixture
def slack_token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SLACK_BOT_TOKEN", DEFAULT_TOKEN)
    return DEFAULT_TOKEN


class Dispatchers:
    """Creates dispatchers on one state dir and closes them all at the end."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.made: list[tuple[NotificationDispatcher, StateDB]] = []
        self.log_stream = io.StringIO()

    def __call__(self, config: dict[str, Any], **kw: Any) -> NotificationDispatcher:
        db = StateDB.in_dir(self.state_dir)
        kw.setdefault("stream", self.log_stream)
        d = dispatcher_for(settings_of(config), db, "gpu-node-7", **kw)
        self.made.append((d, db))
        return d

    def close_all(self) -> None:
        for d, db in self.made:
            d.close(1.0)
            db.close()
        self.made.clear()


@pytest.fixture
def dispatchers(tmp_path: Path) -> Iterator[Dispatchers]:
    made = Dispatchers(tmp_path / "state")
    yield made
    made.close_all()

"""`inference-watchdog notify test`: the sample alert rendered as Slack shows it, runbook included, and
sent once to a real HTTP server speaking Slack's Web API (tests/notify/slack_api.py) with --send."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.notify.slack_api import DEFAULT_TOKEN, FakeSlack
from tests.support.blockkit import validate_message
from watchdog.infra.paths import asset_dir


def _run(config: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLACK_BOT_TOKEN"}
    if token:
        env["SLACK_BOT_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "watchdog", "notify", "test", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_sample_renders_with_its_runbook_and_valid_blocks(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"node": "gpu-node-7", "state_dir": str(tmp_path / "state")}))
    done = _run(config, "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert validate_message(body["text"], body["blocks"]) == []
    runbook = str(asset_dir("runbooks") / "gpu-thermal-margin.md")  # type: ignore[operator]
    assert f"`{runbook}`" in json.dumps(body["blocks"], ensure_ascii=False)  # no base URL: the file's path
    assert "GpuThermalMarginLow on gpu-node-7" in body["text"]


def test_send_posts_it_once_to_slack(tmp_path: Path) -> None:
    with FakeSlack() as slack:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"node": "gpu-node-7", "state_dir": str(tmp_path / "state"), "notifiers": {
            "slack": {"enabled": True, "channel": "C0ALERTS", "base_url": slack.base_url, "timeout_seconds": 2}}}))
        missing = _run(config, "--send")
        assert missing.returncode == 2 and "not set" in missing.stderr and slack.top_level() == []
        sent = _run(config, "--send", token=DEFAULT_TOKEN)
        assert sent.returncode == 0, sent.stderr
        assert "sent to C0ALERTS" in sent.stdout
        assert len(slack.top_level()) == 1

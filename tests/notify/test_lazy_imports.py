"""The daemon's import graph leaves slack-sdk out until Slack is enabled (tests/notify/test_slack.py
builds enabled Slack notifiers, so the deferred import is exercised there)."""

from __future__ import annotations

import subprocess
import sys


def test_agent_and_daemon_import_without_slack_sdk() -> None:
    code = ("import sys, watchdog.agent, watchdog.daemon.serve, watchdog.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'slack_sdk', 'asyncio'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

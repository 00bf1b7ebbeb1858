"""Crash tests: the dispatcher + outbox in a child process, killed with SIGKILL during a Slack outage and
mid-send, restarted on the same state dir; what the fake Slack received is counted (exactly once)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.notify.conftest import notify_config
from tests.notify.slack_api import DEFAULT_TOKEN, FakeSlack, Fault
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")


class Driver:
    """Starts, kills and stops driver processes on one state dir."""

    def __init__(self, tmp: Path, slack: FakeSlack) -> None:
        self.state_dir = tmp / "state"
        self.config = tmp / "config.json"
        self.stop_file = tmp / "stop"
        self.stderr = tmp / "driver.stderr"
        cfg = notify_config({"base_url": slack.base_url, "timeout_seconds": 2})
        cfg["notifiers"]["outbox"]["failing_alert_after_seconds"] = 3600
        self.config.write_text(json.dumps(cfg))
        self.proc: subprocess.Popen[str] | None = None

    def start(self, phase: str) -> None:
        env = {**os.environ, "SLACK_BOT_TOKEN": DEFAULT_TOKEN, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                "--state-dir",
                str(self.state_dir),
                "--config",
                str(self.config),
                "--phase",
                phase,
                "--stop-file",
                str(self.stop_file),
            ],
            stdout=subprocess.PIPE,
            stderr=self.stderr.open("a"),
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "READY"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        assert self.proc.returncode == -signal.SIGKILL

    def stop(self) -> int:
        assert self.proc is not None
        self.stop_file.write_text("")
        code = self.proc.wait(timeout=60)
        self.stop_file.unlink()
        return code

    def open_rows(self) -> int:
        with sqlite3.connect(self.state_dir / "state.db") as conn:
            return int(
                conn.execute("SELECT COUNT(*) FROM notify_outbox WHERE status IN ('pending','sending')").fetchone()[0]
            )

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def driver(tmp_path: Path, fake_slack: FakeSlack) -> Iterator[Driver]:
    d = Driver(tmp_path, fake_slack)
    yield d
    d.cleanup()


# An uncertain post (killed mid-send) is verified in the history before it is sent again; while Slack
# is down that verification fails too and is retried: both are delivery attempts.
ATTEMPTS = ("chat.postMessage", "conversations.history")


def _posts_failed(slack: FakeSlack) -> int:
    return sum(1 for method, status in slack.requests if method in ATTEMPTS and status >= 500)


def test_outage_with_two_kills_delivers_every_firing_and_resolve_exactly_once(
    fake_slack: FakeSlack, driver: Driver
) -> None:
    fake_slack.outage = True
    driver.start("storm")  # 8-GPU XID storm + engine down fire while Slack is down
    wait_until(lambda: _posts_failed(fake_slack) >= 2, what="failed attempts")
    driver.kill()
    seen = _posts_failed(fake_slack)
    driver.start("after")  # the storm resolved, a new alert fired, while still down
    wait_until(lambda: _posts_failed(fake_slack) >= seen + 2, what="failed attempts after restart")
    driver.kill()
    seen = _posts_failed(fake_slack)
    driver.start("after")
    wait_until(lambda: _posts_failed(fake_slack) >= seen + 1, what="failed attempts after second restart")
    wait_until(lambda: "delivery failed" in driver.stderr.read_text(), what="a failed attempt logged")
    fake_slack.outage = False  # Slack recovers
    wait_until(lambda: driver.open_rows() == 0, timeout=60, what="outbox drained")
    assert driver.stop() == 0

    counts = fake_slack.by_key()
    assert all(n == 1 for n in counts.values()), counts
    top = fake_slack.top_level()
    assert len(top) == 3
    for name in ("EngineDown", "GpuHot", "GpuXidError"):
        assert sum(f": {name} " in m.text for m in top) == 1, [m.text for m in top]
    storm = next(m for m in top if "GpuXidError" in m.text)
    assert "8 alerts" in storm.text
    replies = fake_slack.replies(storm.ts)
    assert [r.text.startswith("Resolved: GpuXidError (8)") for r in replies] == [True]
    assert storm.updates and "RESOLVED" in storm.updates[-1]["text"]
    for other in (m for m in top if m is not storm):
        assert fake_slack.replies(other.ts) == []  # still firing: no resolve
    log = driver.stderr.read_text()
    assert DEFAULT_TOKEN not in log and "delivery failed" in log


def test_kill_mid_send_then_restart_does_not_post_twice(fake_slack: FakeSlack, driver: Driver) -> None:
    fake_slack.script(Fault("slow", seconds=120, methods=("chat.postMessage",)))
    driver.start("storm")
    assert fake_slack.slow_started.wait(timeout=30)  # Slack stored the message; the answer is held back
    driver.kill()
    driver.start("storm")
    wait_until(lambda: driver.open_rows() == 0, timeout=60, what="outbox drained")
    assert driver.stop() == 0
    fake_slack.release_slow()
    assert len(fake_slack.top_level()) == 2  # the storm message (posted once) and EngineDown
    assert all(n == 1 for n in fake_slack.by_key().values())
    assert ("conversations.history", 200) in fake_slack.requests


def test_resolved_while_down_is_resolved_in_slack_after_restart(fake_slack: FakeSlack, driver: Driver) -> None:
    driver.start("storm")
    wait_until(lambda: len(fake_slack.top_level()) == 2 and driver.open_rows() == 0, what="firing posted")
    driver.kill()
    driver.start("clear")  # storm and engine both gone while the agent was down
    wait_until(
        lambda: driver.open_rows() == 0 and sum(len(m.updates) for m in fake_slack.top_level()) == 2,
        what="resolves delivered",
    )
    assert driver.stop() == 0
    assert len(fake_slack.top_level()) == 2  # not re-announced
    for message in fake_slack.top_level():
        assert len(fake_slack.replies(message.ts)) == 1
        assert "RESOLVED" in message.updates[-1]["text"]

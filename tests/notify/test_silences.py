"""Silences and inhibition: a silence added by command, and one added in a real Alertmanager, each stop the
matching Slack post and nothing else; a lost GPU inhibits the node's engine alerts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tests.notify.alerts import make_alert
from tests.notify.conftest import Dispatchers, notify_config
from tests.notify.slack_api import FakeSlack
from tests.support.alertmanager import BINARY, RealAlertmanager
from tests.support.polling import wait_until
from watchdog.config.settings import InhibitRuleSettings
from watchdog.infra.state import StateDB
from watchdog.notify.decisions.silences import InhibitRule, Matcher, MatcherError, SilenceStore, inhibitors

NOW = 1_000_000


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("alertname=GpuXidFatal", {"alertname": "GpuXidFatal"}, True),
    ('gpu="3"', {"gpu": "3"}, True),
    ("gpu!=3", {"gpu": "3"}, False),
    ("gpu!=3", {}, True),  # absent is the empty string
    ("job=~vllm-.*", {"job": "vllm-a"}, True),
    ("job=~vllm", {"job": "vllm-a"}, False),  # anchored
    ("job!~vllm-.*", {"job": "sglang"}, True),
])
def test_matchers_follow_alertmanager(text: str, labels: dict[str, str], expected: bool) -> None:
    assert Matcher.parse(text).matches(labels) is expected


def test_a_bad_matcher_says_how_to_write_one() -> None:
    with pytest.raises(MatcherError, match="write name=value"):
        Matcher.parse("GpuXidFatal")
    with pytest.raises(MatcherError, match="bad regular expression"):
        Matcher.parse("job=~(")


def test_store_add_list_expire(tmp_path: Path) -> None:
    store = SilenceStore(StateDB(tmp_path / "state.db"))
    silence = store.add([Matcher.parse("gpu=3")], NOW, NOW + 3_600_000, "alice", "swapping GPU 3", NOW)
    reopened = SilenceStore(StateDB(tmp_path / "state.db"))  # durable
    assert [s.id for s in reopened.active(NOW + 1)] == [silence.id]
    assert reopened.active(NOW + 3_600_000) == []
    assert reopened.expire(silence.id[:8], NOW + 10) is not None
    assert reopened.active(NOW + 11) == [] and len(reopened.all()) == 1
    assert reopened.expire(silence.id, NOW + 20) is None


def test_inhibition_follows_alertmanager() -> None:
    rule = InhibitRule.from_settings(InhibitRuleSettings(('alertname="GpuFallenOffBus"',), ('alertname=~"Engine.+"',),
                                                         ("node",)))
    lost = {"alertname": "GpuFallenOffBus", "gpu": "5", "node": "n1"}
    engine = {"alertname": "EngineDown", "job": "vllm", "node": "n1"}
    other_lost = {**lost, "gpu": "6"}
    assert inhibitors(engine, [lost, {**lost, "node": "n2"}, other_lost], [rule]) == [lost, other_lost]
    assert not inhibitors(engine, [{**lost, "node": "n2"}], [rule])
    assert not inhibitors(lost, [lost], [rule])
    assert not inhibitors({"alertname": "HostOomKill", "node": "n1"}, [lost], [rule])


def _posted(slack: FakeSlack) -> list[str]:
    """The alert names of the top-level Slack messages ("... CRITICAL: Name on node: ...")."""
    return sorted(re.search(r"[A-Z]+: (\w+)", m.text).group(1) for m in slack.top_level())  # type: ignore[union-attr]


def _drained(d) -> bool:  # type: ignore[no-untyped-def]
    return sum(d.outbox.pending_counts().values()) == 0


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", "silence", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "SUDO_USER": "alice"})


def test_a_silence_added_by_command_stops_that_post_and_nothing_else(
        tmp_path: Path, fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({"state_dir": str(dispatchers.state_dir)}))
    typo = _cli(config_path, "add", "alertname=GpuThermalMarginLwo", "--comment", "x")
    assert typo.returncode == 1 and "did you mean GpuThermalMarginLow?" in typo.stderr
    added = _cli(config_path, "add", "alertname=GpuThermalMarginLow", "gpu=3", "--duration", "2h",
                 "--comment", "replacing the fan")
    assert added.returncode == 0, added.stderr
    silence_id = added.stdout.strip()
    listed = json.loads(_cli(config_path, "list", "--json").stdout)
    assert [(s["id"], s["createdBy"], s["comment"], s["status"]["state"]) for s in listed] == [
        (silence_id, "alice", "replacing the fan", "active")]
    # Alertmanager API v2's gettableSilence names, RFC 3339 times two hours apart.
    assert {"id", "status", "updatedAt", "matchers", "startsAt", "endsAt", "createdBy", "comment"} <= set(listed[0])
    starts, ends = (datetime.fromisoformat(listed[0][k].replace("Z", "+00:00")) for k in ("startsAt", "endsAt"))
    assert listed[0]["endsAt"].endswith("Z") and ends - starts == timedelta(hours=2)
    assert {"name": "gpu", "value": "3", "isRegex": False, "isEqual": True} in listed[0]["matchers"]
    table = _cli(config_path, "list").stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "ENDS", "AT", "CREATED", "BY", "MATCHERS", "COMMENT"]
    assert table[1].startswith(silence_id[:12]) and table[1].endswith("replacing the fan")

    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    hot3 = make_alert("GpuThermalMarginLow", gpu="3", severity="warning")
    hot4 = make_alert("GpuThermalMarginLow", gpu="4", severity="warning")
    d.handle([hot3, hot4], [], now)
    wait_until(lambda: _drained(d), what="delivered")
    assert _posted(fake_slack) == ["GpuThermalMarginLow"]
    blocks = json.dumps(fake_slack.top_level()[0].blocks)
    assert "GPU*\\n4" in blocks and "GPU*\\n3" not in blocks  # only the unsilenced GPU
    # The silenced alert resolving sends nothing either; the other one's resolve goes out.
    d.handle([make_alert("GpuThermalMarginLow", "resolved", resolved_at_ms=now + 5000, gpu=g,
                         severity="warning") for g in ("3", "4")], [], now + 6000)
    wait_until(lambda: _drained(d), what="resolves delivered")
    assert len(fake_slack.top_level()) == 1
    assert len(fake_slack.replies(fake_slack.top_level()[0].ts)) == 1

    expired = _cli(config_path, "expire", silence_id[:10])
    assert expired.returncode == 0 and silence_id in expired.stdout
    assert json.loads(_cli(config_path, "list", "--json").stdout) == []


def test_a_lost_gpu_inhibits_the_nodes_engine_alerts(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))  # the default inhibit rule
    d.handle([make_alert("GpuFallenOffBus", gpu="5"), make_alert("EngineDown", job="vllm"),
              make_alert("HostOomKill", process="python3")], [], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert _posted(fake_slack) == ["GpuFallenOffBus", "HostOomKill"]


@pytest.mark.skipif(BINARY is None, reason="prometheus-alertmanager not installed")
def test_an_alertmanager_silence_stops_the_direct_slack_post(
        tmp_path: Path, fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    am = RealAlertmanager(tmp_path / "am").start()
    try:
        start = datetime.now(timezone.utc)
        body = json.dumps({"matchers": [{"name": "alertname", "value": "EngineQueueBuildup", "isRegex": False,
                                         "isEqual": True}],
                           "startsAt": start.isoformat(), "endsAt": (start + timedelta(hours=1)).isoformat(),
                           "createdBy": "bob", "comment": "load test"}).encode()
        request = urllib.request.Request(f"{am.url}/api/v2/silences", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        d = dispatchers(notify_config({"base_url": fake_slack.base_url},
                                      alertmanager={"urls": [am.url], "resend_interval_seconds": 60}))
        now = int(datetime.now(timezone.utc).timestamp() * 1000)
        d.handle([make_alert("EngineQueueBuildup", job="vllm"), make_alert("EngineKvCacheNearFull", job="vllm")],
                 [], now)
        wait_until(lambda: _drained(d), what="delivered")
        assert _posted(fake_slack) == ["EngineKvCacheNearFull"]
        # Alertmanager itself still receives both (it applies its own silence to what it routes).
        wait_until(lambda: len(am.alerts()) == 2, what="both alerts in Alertmanager")
    finally:
        am.stop()


def test_acknowledge_and_silence_buttons(tmp_path: Path, dispatchers: Dispatchers) -> None:
    from watchdog.notify.channels.slack.approvals import AlertButtons, apply_interactions, parse_interaction

    d = dispatchers(notify_config())
    hot = make_alert("GpuThermalMarginLow", gpu="3", severity="warning")
    d.handle([hot], [], NOW)
    buttons = AlertButtons(d.state_store, d.muting.store, clock=lambda: NOW / 1000)

    def click(action_id: str, user: str) -> dict[str, object]:
        return {"type": "block_actions", "user": {"id": user}, "channel": {"id": "C0ALERTS"},
                "message": {"ts": "171.000100"},
                "actions": [{"action_id": action_id, "value": json.dumps({"fingerprint": hot.fingerprint})}]}

    replies: list[tuple[str, str, str]] = []
    clicks = [*parse_interaction(click("watchdog_ack", "U0ANYONE"), ["U0ONCALL"]),
              *parse_interaction(click("watchdog_silence", "U0ANYONE"), ["U0ONCALL"]),  # refused
              *parse_interaction(click("watchdog_silence", "U0ONCALL"), ["U0ONCALL"])]
    assert apply_interactions(clicks, manager=None, buttons=buttons,  # type: ignore[arg-type]
                              reply=lambda *a: replies.append(a)) == 2
    assert replies[0] == ("C0ALERTS", "171.000100", ":eyes: <@U0ANYONE> acknowledged GpuThermalMarginLow.")
    assert replies[1][2].startswith(":mute: <@U0ONCALL> silenced GpuThermalMarginLow for 1h")
    [silence] = d.muting.store.active(NOW + 1)
    assert silence.created_by == "slack:U0ONCALL" and silence.ends_ms == NOW + 3_600_000
    assert silence.matches(hot.labels, NOW + 1)
    assert not silence.matches({**hot.labels, "gpu": "4"}, NOW + 1)


def test_a_silence_that_ends_while_the_alert_fires_announces_it_once_across_restarts(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    """As Alertmanager: an alert that fires on when its silence ends is announced then, once. Which alerts
    were muted lives in the state database (real SQLite file): a restart while the silence holds announces
    nothing, and a silence that ended while the agent was down is announced at start."""
    config = notify_config({"base_url": fake_slack.base_url})
    clock = [NOW / 1000]
    d = dispatchers(config, clock=lambda: clock[0])
    d.muting.store.add([Matcher.parse("gpu=3")], NOW, NOW + 60_000, "alice", "fan swap", NOW)
    d.muting.store.add([Matcher.parse("gpu=5")], NOW, NOW + 120_000, "alice", "reseat", NOW)
    hot3, hot5 = (make_alert("GpuThermalMarginLow", gpu=g, severity="warning") for g in ("3", "5"))

    def restart(at_ms: int) -> None:
        wait_until(lambda: _drained(d), what="delivered")
        made, db = dispatchers.made.pop()
        made.close(1.0)
        db.close()
        clock[0] = at_ms / 1000

    d.handle([hot3, hot5], [], NOW + 1_000)
    assert d.muting.muted("slack") == {hot3.fingerprint, hot5.fingerprint}
    restart(NOW + 2_000)
    d = dispatchers(config, clock=lambda: clock[0])
    assert d.muting.muted("slack") == {hot3.fingerprint, hot5.fingerprint}  # read back from the database
    d.reconcile_on_start([hot3, hot5])
    d.handle([hot3, hot5], [], NOW + 30_000)
    wait_until(lambda: _drained(d), what="delivered")
    assert fake_slack.top_level() == []

    d.handle([hot3, hot5], [], NOW + 61_000)  # gpu 3's silence has ended; the alert fires on
    d.handle([hot3, hot5], [], NOW + 62_000)
    wait_until(lambda: _drained(d), what="delivered")
    assert len(fake_slack.top_level()) == 1 and "GPU*\\n3" in json.dumps(fake_slack.top_level()[0].blocks)
    assert d.muting.muted("slack") == {hot5.fingerprint}

    restart(NOW + 130_000)  # gpu 5's silence ends while the agent is down
    d = dispatchers(config, clock=lambda: clock[0])
    d.reconcile_on_start([hot3, hot5])
    wait_until(lambda: _drained(d), what="delivered")
    posted = [json.dumps(m.blocks) for m in fake_slack.top_level()]
    assert len(posted) == 2 and "GPU*\\n5" in posted[1]  # gpu 3 not announced again
    assert d.muting.muted("slack") == set() and d.muting.muted("log") == set()
    announced = [json.loads(line)["labels"]["gpu"] for line in dispatchers.log_stream.getvalue().splitlines()
                 if json.loads(line).get("event") == "alert_firing"]
    assert announced == ["3", "5"]  # the log notifier too, each once
    # Its resolve now goes to the thread of the message announcing it.
    d.handle([make_alert("GpuThermalMarginLow", "resolved", resolved_at_ms=NOW + 131_000, gpu=g,
                         severity="warning") for g in ("3", "5")], [], NOW + 132_000)
    wait_until(lambda: _drained(d), what="resolves delivered")
    assert [len(fake_slack.replies(m.ts)) for m in fake_slack.top_level()] == [1, 1]


def test_an_alert_inhibited_no_longer_is_announced_while_it_fires(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))  # the default inhibit rule
    lost, down = make_alert("GpuFallenOffBus", gpu="5"), make_alert("EngineDown", job="vllm")
    d.handle([lost, down], [], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert _posted(fake_slack) == ["GpuFallenOffBus"]
    d.handle([make_alert("GpuFallenOffBus", "resolved", resolved_at_ms=NOW + 500, gpu="5"), down], [], NOW + 1000)
    wait_until(lambda: _drained(d), what="delivered")
    assert _posted(fake_slack) == ["EngineDown", "GpuFallenOffBus"]


def test_an_unmuting_the_database_could_not_store_is_announced_once_it_can(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.muting.store.add([Matcher.parse("gpu=3")], NOW, NOW + 60_000, "alice", "fan swap", NOW)
    hot3 = make_alert("GpuThermalMarginLow", gpu="3", severity="warning")
    d.handle([hot3], [], NOW + 1_000)
    conn = d.db._conn
    conn.execute("PRAGMA query_only = ON")  # a full disk: every write fails
    d.handle([hot3], [], NOW + 61_000)
    assert d.muting.muted("slack") == {hot3.fingerprint}  # the unmuting was not stored, so not forgotten
    conn.execute("PRAGMA query_only = OFF")
    d.handle([hot3], [], NOW + 62_000)
    d.handle([hot3], [], NOW + 63_000)
    wait_until(lambda: _drained(d), what="delivered")
    assert _posted(fake_slack) == ["GpuThermalMarginLow"] and d.muting.muted("slack") == set()

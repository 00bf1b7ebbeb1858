"""Item 7: exactly once to Slack, also when the verification of an uncertain post gets 5xx or 429; and
every text reaching Slack is escaped (``<!channel>`` in a process name is shown, not executed). Against
the loopback Slack Web API stand-in (tests/notify/slack_api.py)."""

from __future__ import annotations

import json

from tests.notify.alerts import make_alert
from tests.notify.conftest import Dispatchers, dispatchers, fake_slack, notify_config, slack_token  # noqa: F401
from tests.notify.slack_api import FakeSlack, Fault
from tests.support.polling import wait_until
from watchdog.notify.dispatcher import NotificationDispatcher
from watchdog.runbooks.events import RunbookEvent

NOW = 1_000_000


def _drained(d: NotificationDispatcher) -> bool:
    return sum(d.outbox.pending_counts().values()) == 0


def test_a_failing_verification_stays_uncertain_and_never_reposts_blind(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers  # noqa: F811
) -> None:
    fake_slack.script(
        Fault("slow", seconds=3, methods=("chat.postMessage",)),  # stored, answer lost: uncertain
        Fault("status", status=503, count=3, methods=("conversations.history",)),  # beyond the SDK's retries
        Fault("status", status=429, retry_after=0, count=3, methods=("conversations.history",)),
    )
    d = dispatchers(notify_config({"base_url": fake_slack.base_url, "timeout_seconds": 1}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: _drained(d), 40, what="delivered")
    fake_slack.release_slow()
    assert [m.idem_key for m in fake_slack.top_level()] == [fake_slack.top_level()[0].idem_key]
    assert len(fake_slack.messages) == 1, [m.text for m in fake_slack.messages]
    assert ("conversations.history", 503) in fake_slack.requests
    assert ("conversations.history", 200) in fake_slack.requests  # found by a later verification


def _mrkdwn_texts(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [str(node["text"])] if node.get("type") == "mrkdwn" and "text" in node else []
        return found + [t for value in node.values() for t in _mrkdwn_texts(value)]
    if isinstance(node, list):
        return [t for value in node for t in _mrkdwn_texts(value)]
    return []


def test_mentions_in_kernel_process_names_and_runbook_text_are_shown_not_executed(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers  # noqa: F811
) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    alert = make_alert("HostOomKill", process="<!channel> evil", node="<!here>")
    event = RunbookEvent(alert.fingerprint, "HostOomKill", "host-oom", "diagnostics", "<!everyone> title",
                         "Killed process 1 (<!channel>) <https://evil.example|click>", NOW)
    d.handle([alert], [event], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert fake_slack.messages
    for message in fake_slack.messages:
        sent = "\n".join([message.text, *_mrkdwn_texts(message.blocks)])  # plain_text is never parsed
        for raw in ("<!channel>", "<!here>", "<!everyone>", "<https://evil"):
            assert raw not in sent, sent
    everything = json.dumps([m.blocks for m in fake_slack.messages])
    assert "&lt;!channel&gt;" in everything
    assert "<!date^" in everything  # Slack's own date token still formats (only foreign text is escaped)

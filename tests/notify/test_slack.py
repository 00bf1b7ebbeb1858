"""The Slack notifier through slack-sdk against a real HTTP server on loopback (tests/notify/slack_api.py)."""

from __future__ import annotations

import json
import logging

import pytest

from tests.notify.alerts import make_alert, xid_storm
from tests.notify.conftest import Dispatchers, notify_config
from tests.notify.slack_api import WEBHOOK_PATH, FakeSlack, Fault
from tests.support.polling import wait_until
from watchdog.runbooks.events import RunbookEvent

NOW = 1_000_000


def _drained(d) -> bool:
    return sum(d.outbox.pending_counts().values()) == 0


def test_storm_of_eight_gpus_is_one_message_and_resolve_updates_it_and_replies(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    d = dispatchers(
        notify_config(
            {
                "base_url": fake_slack.base_url,
                "runbook_base_url": "https://rb.example/rb",
                "grafana_url": "https://grafana.example",
            }
        )
    )
    storm = xid_storm()
    d.handle(storm, [], NOW)
    d.handle(storm, [], NOW + 1000)  # still firing: nothing new
    wait_until(lambda: _drained(d), what="firing delivered")
    [message] = fake_slack.top_level()
    text = json.dumps(message.blocks)
    assert "GpuXidError" in message.text and "8 alerts" in message.text
    for gpu in range(8):
        assert f"gpu={gpu} uuid=GPU-{gpu:04d}" in text
    assert "https://rb.example/rb/gpu-xid.md" in text and "grafana.example/explore" in text
    assert "gpu-node-7" in text

    resolved = [
        make_alert("GpuXidError", "resolved", resolved_at_ms=NOW + 60_000, gpu=str(i), uuid=f"GPU-{i:04d}", xid="79")
        for i in range(8)
    ]
    d.handle(resolved, [], NOW + 61_000)
    wait_until(lambda: _drained(d), what="resolve delivered")
    assert len(fake_slack.top_level()) == 1
    [reply] = fake_slack.replies(message.ts)
    assert "Resolved" in reply.text and "(8)" in reply.text
    assert len(message.updates) == 1 and "RESOLVED" in message.updates[0]["text"]


def test_partial_resolve_marks_members_and_keeps_the_message_firing(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    storm = xid_storm(gpus=3)
    d.handle(storm, [], NOW)
    one_resolved = [
        make_alert("GpuXidError", "resolved", resolved_at_ms=NOW + 5000, gpu="0", uuid="GPU-0000", xid="79"),
        *storm[1:],
    ]
    d.handle(one_resolved, [], NOW + 6000)
    wait_until(lambda: _drained(d), what="delivered")
    [message] = fake_slack.top_level()
    update = message.updates[-1]
    assert "RESOLVED" not in update["text"] and "2 firing" in update["text"]
    assert "~gpu=0 uuid=GPU-0000~" in json.dumps(update["blocks"])


def test_runbook_events_go_in_the_thread_and_unknown_alerts_get_their_own_message(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    alert = make_alert("EngineDown", job="vllm", instance="127.0.0.1:8000", model_name="llama")
    diag = RunbookEvent(
        alert.fingerprint, "EngineDown", "engine-down", "diagnostics", "systemctl status", "x" * 5000, NOW
    )
    orphan = RunbookEvent("nope", "Other", "other", "decision", "skipped", "cooldown active", NOW)
    d.handle([alert], [diag, orphan], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    parent = next(m for m in fake_slack.top_level() if m.idem_key.startswith("post:" + alert.fingerprint))
    [thread_reply] = fake_slack.replies(parent.ts)
    assert "Diagnostics" in thread_reply.text and "```" in json.dumps(thread_reply.blocks)
    assert len(json.dumps(thread_reply.blocks)) < 3500  # capped
    assert any("[Other]" in m.text for m in fake_slack.top_level())
    assert "llama" in json.dumps(parent.blocks)


def test_approve_mode_adds_buttons_to_suggestions(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    config = notify_config({"base_url": fake_slack.base_url})
    config["remediation"] = {"mode": "approve"}
    d = dispatchers(config)
    alert = make_alert("EngineDown", job="vllm")
    plan = (
        "policy: mode=approve\n"
        "1. restart-engine [systemd] systemctl restart vllm.service\n"
        "   → awaiting_approval: approve mode\n"
        "   guards: cooldown 10m\n"
        "2. drain-node [http] POST http://127.0.0.1:9000/drain\n"
        "   → refused: url not allowlisted\n"
    )
    ev = RunbookEvent(alert.fingerprint, "EngineDown", "engine-down", "suggestion", "runbook engine-down", plan, NOW)
    d.handle([alert], [ev], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    parent = fake_slack.top_level()[0]
    [reply] = fake_slack.replies(parent.ts)
    [actions] = [b for b in reply.blocks if b["type"] == "actions"]
    assert [a["action_id"] for a in actions["elements"]] == ["watchdog_approve", "watchdog_skip", "watchdog_ack",
                                                            "watchdog_silence"]
    assert json.loads(actions["elements"][0]["value"]) == {
        "fingerprint": alert.fingerprint,
        "step": "restart-engine",
    }


def test_short_rate_limit_is_retried_by_the_sdk_honouring_retry_after(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.script(Fault("status", status=429, retry_after=1, methods=("chat.postMessage",)))
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert [r for r in fake_slack.requests if r[0] == "chat.postMessage"] == [
        ("chat.postMessage", 429),
        ("chat.postMessage", 200),
    ]
    assert d.workers["slack"].stats.attempt_failures == 0  # the SDK's handler absorbed it


def test_long_retry_after_goes_back_to_the_outbox_and_is_honoured(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.script(Fault("status", status=429, retry_after=3, methods=("chat.postMessage",)))
    d = dispatchers(notify_config({"base_url": fake_slack.base_url, "rate_limit_max_wait_seconds": 1}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: d.workers["slack"].stats.attempt_failures == 1, what="rate limited")
    assert d.workers["slack"]._retry_at > 0  # waiting; the backoff ceiling (0.3 s) does not cut Retry-After
    wait_until(lambda: _drained(d), what="delivered")
    assert len(fake_slack.top_level()) == 1


def test_server_errors_are_retried_until_delivered_once(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.script(Fault("status", status=500, count=7, methods=("chat.postMessage",)))
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert fake_slack.by_key() == {f"post:{make_alert('GpuHot', gpu='0').fingerprint}:firing:{1_000_000}": 1}
    samples = {
        (dict(s.labels).get("__name__"), dict(s.labels).get("outcome")): s.value
        for s in d.self_samples()
        if dict(s.labels).get("notifier") == "slack"
    }
    assert samples[("watchdog_notifications_total", "delivered")] == 1
    assert samples[("watchdog_notification_attempt_failures_total", None)] >= 2


def test_timeout_after_slack_stored_the_message_is_verified_not_reposted(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.script(Fault("slow", seconds=4, methods=("chat.postMessage",)))
    d = dispatchers(notify_config({"base_url": fake_slack.base_url, "timeout_seconds": 1}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: _drained(d), what="delivered")
    assert len(fake_slack.top_level()) == 1
    assert ("conversations.history", 200) in fake_slack.requests
    fake_slack.release_slow()
    wait_until(lambda: any(r[0] == "chat.postMessage" for r in fake_slack.requests), what="slow answer")
    assert len(fake_slack.messages) == 1
    assert [r for r in fake_slack.requests if r[0] == "chat.postMessage"] == [("chat.postMessage", 200)]


def test_rejected_message_is_counted_failed_and_does_not_block_the_rest(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.script(Fault("error", error="invalid_blocks", methods=("chat.postMessage",)))
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    d.handle([make_alert("GpuHot", gpu="0"), make_alert("EngineDown", job="vllm")], [], NOW + 1000)
    wait_until(lambda: _drained(d), what="settled")
    assert len(fake_slack.top_level()) == 1
    assert [r.status for r in d.outbox.rows("slack")] == ["failed", "done"]


def test_webhook_mode_posts_firing_and_resolved_as_messages(
    fake_slack: FakeSlack, dispatchers: Dispatchers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_WEBHOOK_URL", fake_slack.webhook_url)
    fake_slack.script(Fault("status", status=503, count=2, methods=("webhook",)))
    d = dispatchers(notify_config({"mode": "webhook"}))
    d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    d.handle([make_alert("GpuHot", "resolved", gpu="0", resolved_at_ms=NOW + 500)], [], NOW + 1000)
    wait_until(lambda: _drained(d), what="delivered")
    texts = [p["text"] for p in fake_slack.webhook_posts]
    assert len(texts) == 2 and "CRITICAL" in texts[0] and "RESOLVED" in texts[1]


def test_secrets_never_reach_logs_or_metrics_when_sends_fail(
    fake_slack: FakeSlack,
    dispatchers: Dispatchers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from watchdog.infra.logs import JsonFormatter

    token = "xoxb-9999-SUPERsecretTOKENvalue"
    monkeypatch.setenv("SLACK_BOT_TOKEN", token)
    monkeypatch.setenv("SLACK_WEBHOOK_URL", fake_slack.webhook_url)
    caplog.set_level(logging.DEBUG)
    fake_slack.outage = True
    bot = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    hook = dispatchers(notify_config({"mode": "webhook"}))
    for d in (bot, hook):
        d.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(
        lambda: bot.workers["slack"].stats.attempt_failures >= 3 and hook.workers["slack"].stats.attempt_failures >= 3,
        what="failures",
    )
    # a closed port too: connection errors carry the URL in urllib's exception text
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/services/T1/B1/ANOTHERwebhookSECRET")
    dead = dispatchers(notify_config({"mode": "webhook"}))
    dead.handle([make_alert("GpuHot", gpu="0")], [], NOW)
    wait_until(lambda: dead.workers["slack"].stats.attempt_failures >= 2, what="connection failures")
    formatter = JsonFormatter()
    rendered = "\n".join(formatter.format(r) for r in caplog.records)
    raw = "\n".join(
        r.getMessage() + json.dumps({k: str(v) for k, v in r.__dict__.items()})
        for r in caplog.records
        if r.name.startswith("watchdog")
    )
    metrics = "\n".join(f"{s.labels} {s.value}" for d in (bot, hook, dead) for s in d.self_samples())
    errors = "\n".join(r.last_error for d in (bot, hook, dead) for r in [d.workers["slack"].stats])
    for secret in (token, WEBHOOK_PATH, fake_slack.webhook_url, "ANOTHERwebhookSECRET"):
        assert secret not in rendered and secret not in raw and secret not in metrics and secret not in errors
    assert "service_unavailable" in errors or "HTTP 503" in errors
    assert "delivery failed" in rendered

"""The dispatcher end to end with real parts: restarts on one state DB, the notifier-failing alert, the
log notifier's lines, secrets from files, shutdown flush, rule-state persistence and approval clicks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.notify.alerts import make_alert, xid_storm
from tests.notify.conftest import Dispatchers, notify_config
from tests.notify.slack_api import FakeSlack
from tests.support.polling import wait_until
from watchdog.infra.logs import redact
from watchdog.infra.secrets import SecretError, read_secret
from watchdog.infra.state import StateDB
from watchdog.notify.channels.log import LogNotifier
from watchdog.notify.channels.slack.approvals import apply_interactions, approvable_steps, parse_interaction
from watchdog.runbooks.events import RunbookEvent

NOW = 1_000_000


def _drained(d: Any) -> bool:
    return sum(d.outbox.pending_counts().values()) == 0


def _log_lines(dispatchers: Dispatchers) -> list[dict[str, Any]]:
    return [json.loads(line) for line in dispatchers.log_stream.getvalue().splitlines()]


def test_restart_reconciles_firing_alerts_and_resolves_what_went_away(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    config = notify_config({"base_url": fake_slack.base_url})
    first = dispatchers(config)
    hot = make_alert("GpuHot", gpu="1")
    storm = xid_storm(gpus=4)
    first.handle([*storm, hot], [], NOW)
    wait_until(lambda: _drained(first), what="delivered")
    dispatchers.close_all()

    second = dispatchers(config)
    counts = second.reconcile_on_start(storm)  # GpuHot resolved while the agent was down
    assert counts["still_firing"] == 5 - 1 and counts["resolved_while_down"] == 1 and counts["newly_firing"] == 0
    for tick in range(1, 5):
        second.handle(storm, [], NOW + tick * 1000)
    wait_until(lambda: _drained(second), what="resolve delivered")
    top = fake_slack.top_level()
    assert len(top) == 2  # nothing re-announced
    hot_message = next(m for m in top if "GpuHot" in m.text)
    assert "RESOLVED" in hot_message.updates[-1]["text"] and len(fake_slack.replies(hot_message.ts)) == 1
    storm_message = next(m for m in top if "GpuXidError" in m.text)
    assert storm_message.updates == [] and fake_slack.replies(storm_message.ts) == []
    events = [(line["event"], line["alertname"]) for line in _log_lines(dispatchers)]
    assert events.count(("alert_firing", "GpuXidError")) == 4 and events.count(("alert_resolved", "GpuHot")) == 1


def test_failing_notifier_raises_an_alert_through_the_others_only(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.outage = True
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    alert = make_alert("GpuHot", gpu="1")
    tick = [NOW]

    def step() -> None:
        tick[0] += 100
        d.handle([alert], [], tick[0])

    wait_until(lambda: (step(), d.workers["slack"].stats.snapshot()[2] > 0)[1], what="slack failing")
    failing_since = d.workers["slack"].stats.snapshot()[2]
    tick[0] = failing_since + 1000  # past failing_alert_after_seconds (0.5 s)
    wait_until(
        lambda: (
            step(),
            any(line["alertname"] == "WatchdogNotifierFailing" for line in _log_lines(dispatchers)),
        )[1],
        what="internal alert logged",
    )
    line = next(x for x in _log_lines(dispatchers) if x["alertname"] == "WatchdogNotifierFailing")
    assert line["event"] == "alert_firing" and line["labels"]["notifier"] == "slack"
    assert "service_unavailable" in line["description"]
    assert not any(
        "WatchdogNotifierFailing" in r.idem_key or "WatchdogNotifierFailing" in json.dumps(r.payload)
        for r in d.outbox.rows("slack")
    )
    up = {
        dict(s.labels)["notifier"]: s.value
        for s in d.self_samples()
        if dict(s.labels)["__name__"] == "watchdog_notifier_up"
    }
    assert up == {"log": 1.0, "slack": 0.0}

    fake_slack.outage = False
    wait_until(
        lambda: (
            step(),
            any(
                x["event"] == "alert_resolved" and x["alertname"] == "WatchdogNotifierFailing"
                for x in _log_lines(dispatchers)
            ),
        )[1],
        what="internal alert resolved",
    )
    wait_until(lambda: _drained(d), what="slack drained")
    assert len(fake_slack.top_level()) == 1  # GpuHot, once


def test_log_notifier_json_and_text_lines() -> None:
    from watchdog.notify.decisions.grouping import group_transitions
    from watchdog.notify.decisions.model import Transition
    from watchdog.notify.delivery.outbox import OutboxRow

    alert = make_alert("GpuHot", gpu="3", summary="GPU 3 at 91C")
    group = group_transitions([Transition("firing", alert)], NOW)
    from watchdog.notify.delivery.base import PlanContext

    json_stream, text_stream = io.StringIO(), io.StringIO()
    db = StateDB(":memory:")
    for stream, fmt in ((json_stream, "auto"), (text_stream, "text")):
        notifier = LogNotifier(stream, fmt)
        with db.transaction() as cur:
            items = notifier.plan(group, [], PlanContext(cur, NOW, "gpu-node-7", {}))
        rows = [
            OutboxRow(i, "log", it.idem_key, it.kind, it.payload, "pending", 0, NOW, "") for i, it in enumerate(items)
        ]
        notifier.deliver(rows)
    line = json.loads(json_stream.getvalue())
    assert line["event"] == "alert_firing" and line["alertname"] == "GpuHot" and line["labels"]["gpu"] == "3"
    assert line["summary"] == "GPU 3 at 91C" and line["fired_at"] == "1970-01-01T00:16:40.000Z"
    text = text_stream.getvalue()
    assert "FIRING" in text and "critical" in text and "gpu=3" in text and "GPU 3 at 91C" in text
    assert not text.lstrip().startswith("{")


def test_secret_from_file_is_registered_and_redacted(tmp_path: Path) -> None:
    secret_file = tmp_path / "token"
    secret_file.write_text("xoxb-from-a-FILE-secret\n")
    secret_file.chmod(0o600)
    assert read_secret("UNSET_VAR_FOR_TEST", str(secret_file)) == "xoxb-from-a-FILE-secret"
    assert redact("Bearer xoxb-from-a-FILE-secret") == "Bearer <redacted>"
    assert read_secret("ENV_TOKEN", "", environ={"ENV_TOKEN": " xoxb-env-SECRET "}) == "xoxb-env-SECRET"
    with pytest.raises(SecretError) as err:
        read_secret("", str(tmp_path / "missing"))
    assert "missing" in str(err.value)


def test_close_flushes_what_was_just_queued(fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.handle([*xid_storm(gpus=2), make_alert("EngineDown", job="vllm")], [], NOW)
    d.close(10.0)
    assert len(fake_slack.top_level()) == 2 and _drained(d)


def test_close_during_an_outage_returns_and_keeps_rows_queued(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    fake_slack.outage = True
    d = dispatchers(notify_config({"base_url": fake_slack.base_url}))
    d.handle([make_alert("EngineDown", job="vllm")], [], NOW)
    wait_until(lambda: d.workers["slack"].stats.attempt_failures > 0, what="a failure")
    d.close(0.5)
    assert d.outbox.pending_counts().get("slack") == 1


class RecordingManager:
    """Stands in for RunbookManager: records approve/skip calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str]] = []

    def approve(self, fingerprint: str, step: str, user: str) -> None:
        self.calls.append(("approve", fingerprint, step, user))

    def skip(self, fingerprint: str, step: str, user: str) -> None:
        self.calls.append(("skip", fingerprint, step, user))


def _click(action_id: str, user: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user},
        "actions": [{"action_id": action_id, "value": json.dumps({"fingerprint": "abc", "step": "restart-engine"})}],
    }


def test_approval_clicks_are_honoured_only_for_allowlisted_users() -> None:
    manager = RecordingManager()
    allowed = parse_interaction(_click("watchdog_approve", "U0ONCALL"), ["U0ONCALL"])
    refused = parse_interaction(_click("watchdog_skip", "U0INTERN"), ["U0ONCALL"])
    other = parse_interaction({"type": "view_submission"}, ["U0ONCALL"])
    assert apply_interactions([*allowed, *refused, *other], manager) == 1
    assert manager.calls == [("approve", "abc", "restart-engine", "U0ONCALL")]
    apply_interactions(parse_interaction(_click("watchdog_skip", "U0ONCALL"), ["U0ONCALL"]), manager)
    assert manager.calls[-1] == ("skip", "abc", "restart-engine", "U0ONCALL")


def test_approvable_steps_come_from_the_planner_text() -> None:
    text = (
        "policy: mode=approve\n1. restart-engine [systemd] systemctl restart vllm\n"
        "   → awaiting_approval: approve mode\n   guards: -\n"
        "2. collect-bugreport [command] nvidia-bug-report.sh\n   → run: auto step\n"
        "3. reset-gpu [command] nvidia-smi -r\n   → awaiting_approval: approve mode\n"
    )
    event = RunbookEvent("fp", "GpuXidError", "gpu-xid", "suggestion", "runbook gpu-xid", text, NOW)
    assert approvable_steps(event) == ("restart-engine", "reset-gpu")
    decision = RunbookEvent("fp", "GpuXidError", "gpu-xid", "decision", "x", text, NOW)
    assert approvable_steps(decision) == ()


def test_self_metrics_are_in_the_exporter_catalogue(dispatchers: Dispatchers) -> None:
    from watchdog.exporter.catalogue import load_catalogue
    from watchdog.model import metric_name

    catalogue = load_catalogue()
    d = dispatchers(notify_config(alertmanager={"urls": ["http://127.0.0.1:9"]}))
    names = set()
    for sample in d.self_samples():
        name = metric_name(sample.labels)
        names.add(name)
        spec = catalogue[name]
        assert {k for k, _ in sample.labels} - {"__name__"} == set(spec.labels), name
        assert spec.type == ("counter" if name.endswith("_total") else "gauge")
    listed = {n for n, spec in catalogue.items() if n.startswith(("watchdog_notif", "watchdog_outbox"))}
    assert names == listed

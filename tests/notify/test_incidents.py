"""One incident, one cause: the gpu-fallen-off-bus and tp-straggler scenarios (fast-forwarded through the
real agent) each give one incident whose cause is the GPU or link; the cause ranking as a table; and a
real Alertmanager with the generated inhibit rules keeps the cause and mutes its symptoms."""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.notify.slack_api import FakeSlack
from tests.support.alertmanager import BINARY, CONFIG, RealAlertmanager
from tests.support.polling import wait_until
from watchdog.config.settings import Settings, SlackSettings, section_settings
from watchdog.demo.harness import run_scenario
from watchdog.model import Alert, AlertState
from watchdog.notify.incidents import Incident, correlate, inhibit_rules, render_incident


def alert(name: str, severity: str = "warning", at_s: float = 0.0, **labels: str) -> Alert:
    return Alert(name=name, labels={"alertname": name, "severity": severity, **labels},
                 annotations={"summary": f"{name} summary"}, state=AlertState.FIRING, value=1.0,
                 fingerprint=name + repr(sorted(labels.items())), active_at_ms=int(at_s * 1000))


TOPOLOGY = {("vllm-a", "h:8000"): {"0", "1", "2", "3"}, ("vllm-b", "h:8001"): {"4", "5", "6", "7"}}


def test_cause_is_ranked_first_and_symptoms_join_through_the_tp_group() -> None:
    incidents = correlate([
        alert("EngineQueueBuildup", at_s=30, job="vllm-b", instance="h:8001"),
        alert("EngineTtftSloBurn", "critical", at_s=60, job="vllm-b", instance="h:8001"),
        alert("GpuFallenOffBus", "critical", at_s=10, gpu="5", uuid="GPU-5"),
        alert("EngineQueueBuildup", at_s=40, job="vllm-a", instance="h:8000"),  # another engine: apart
        alert("EngineConfigNcclTimeoutsUnset", "info", job="vllm-b", instance="h:8001"),  # a finding: out
    ], TOPOLOGY)
    assert [(i.cause.name, [s.name for s in i.symptoms]) for i in incidents] == [
        ("GpuFallenOffBus", ["EngineTtftSloBurn", "EngineQueueBuildup"]),
        ("EngineQueueBuildup", []),
    ]
    assert incidents[0].gpus == ("4", "5", "6", "7") and incidents[0].engines == ("vllm-b",)


def test_alerts_far_apart_in_time_are_separate_incidents() -> None:
    incidents = correlate([alert("GpuHwSlowdown", at_s=0, gpu="1", uuid="GPU-1"),
                           alert("EngineQueueBuildup", at_s=3600, job="vllm-a", instance="h:8000")], TOPOLOGY)
    assert len(incidents) == 2


def _only_incident(scenario: str) -> Incident:
    result = run_scenario(scenario, duration_seconds=60)  # the cause and its first symptoms (fast)
    incidents = correlate(result.final_alerts, result.engine_gpus)
    assert len(incidents) == 1, [render_incident(i, "demo-node") for i in incidents]
    return incidents[0]


def test_gpu_fallen_off_bus_is_one_incident_naming_gpu_5() -> None:
    incident = _only_incident("gpu-fallen-off-bus")
    assert incident.cause.name == "GpuFallenOffBus" and incident.symptoms
    text = render_incident(incident, "demo-node")
    assert text.splitlines()[0].startswith("GPU 5 fell off the bus on demo-node")
    assert "Symptoms:" in text and "EngineQueueBuildup" in text


def test_tp_straggler_is_one_incident_naming_the_link() -> None:
    incident = _only_incident("tp-straggler")
    assert incident.cause.name == "GpuPcieLinkDegraded"
    assert render_incident(incident, "demo-node").splitlines()[0].startswith(
        "PCIe link of GPU 2 is downtrained")
    assert "TpStraggler" in {s.name for s in incident.symptoms}


def test_gpu_fallen_off_bus_gives_one_slack_message_naming_gpu_5(
        fake_slack: FakeSlack, slack_token: str) -> None:
    """The symptoms go into the thread of the cause's message: one top-level message, cause first.

    The default ``notifiers.inhibit_rules`` (issue 13) mute a lost GPU's engine symptoms altogether; they
    are switched off here so that the symptom is delivered and its folding under the cause can be seen."""
    def add_slack(settings: Settings) -> Settings:
        slack = section_settings(SlackSettings, "notifiers.slack", {
            "enabled": True, "mode": "bot", "channel": "C0ALERTS", "base_url": fake_slack.base_url,
            "token_env": "SLACK_BOT_TOKEN", "timeout_seconds": 2})
        return replace(settings, notifiers=replace(settings.notifiers, slack=slack, inhibit_rules=()))

    result = run_scenario("gpu-fallen-off-bus", duration_seconds=90, configure=add_slack)
    assert {"GpuFallenOffBus", "EngineQueueBuildup"} <= set(result.fired)
    wait_until(lambda: any("EngineQueueBuildup" in m.text for m in fake_slack.messages), timeout=10,
               what="the symptom delivered")
    top = fake_slack.top_level()
    assert len(top) == 1, [m.text[:80] for m in top]
    assert "GPU 5" in top[0].text.splitlines()[0], top[0].text
    assert any("EngineQueueBuildup" in m.text or "queued" in m.text for m in fake_slack.replies(top[0].ts))


@pytest.mark.skipif(BINARY is None, reason="alertmanager (Debian prometheus-alertmanager) not installed")
def test_alertmanager_inhibits_the_symptoms_of_a_cause(tmp_path: Path) -> None:
    config = yaml.safe_load(CONFIG)
    config["inhibit_rules"] = inhibit_rules()
    am = RealAlertmanager(tmp_path, config=yaml.safe_dump(config)).start()
    try:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        sent = [
            {"alertname": "GpuFallenOffBus", "severity": "critical", "gpu": "5", "node": "n1"},
            {"alertname": "EngineQueueBuildup", "severity": "warning", "job": "vllm", "node": "n1"},
            {"alertname": "EngineQueueBuildup", "severity": "warning", "job": "vllm", "node": "n2"},
            {"alertname": "EngineConfigMaxNumSeqsAboveBmax", "severity": "info", "job": "vllm", "node": "n1"},
        ]
        body = json.dumps([{"labels": labels, "startsAt": now} for labels in sent]).encode()
        request = urllib.request.Request(f"{am.url}/api/v2/alerts", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=5).close()
        wait_until(lambda: len(am.alerts()) == 4, timeout=10, what="alerts received")
        wait_until(lambda: len(am.alerts(inhibited="false")) == 3, timeout=10, what="inhibition")
        shown = sorted((a["labels"]["alertname"], a["labels"]["node"]) for a in am.alerts(inhibited="false"))
        assert shown == [("EngineConfigMaxNumSeqsAboveBmax", "n1"), ("EngineQueueBuildup", "n2"),
                         ("GpuFallenOffBus", "n1")]
    finally:
        am.stop()

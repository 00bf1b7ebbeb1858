"""One incident, one cause: the gpu-fallen-off-bus and tp-straggler scenarios (fast-forwarded through the
real agent) each give one incident whose cause is the GPU or link; the cause ranking as a table; and a
real Alertmanager with the generated inhibit rules keeps the cause and mutes its symptoms."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from tests.notify.alerts import make_alert
from tests.notify.conftest import Dispatchers, notify_config
from tests.notify.slack_api import DEFAULT_TOKEN, FakeSlack, Message
from tests.support.alertmanager import BINARY, CONFIG, RealAlertmanager
from tests.support.blockkit import validate_message, visible_text
from tests.support.polling import wait_until
from watchdog.cli.alertmanager_cmd import merge_inhibit_rules
from watchdog.config.settings import Settings, SlackSettings, section_settings
from watchdog.demo.harness import ScenarioResult, run_scenario
from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.incidents import (
    Incident,
    correlate,
    incident_causes,
    inhibit_rules,
    render_incident,
    symptom_causes,
)
from watchdog.notify.dispatcher import NotificationDispatcher


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


def test_incident_causes_reads_the_tp_groups_only_when_two_alerts_could_form_an_incident() -> None:
    reads: list[int] = []

    def topology() -> dict[tuple[str, str], set[str]]:
        reads.append(1)
        return TOPOLOGY

    bus = alert("GpuFallenOffBus", "critical", at_s=10, gpu="5", uuid="GPU-5")
    burn = alert("EngineTtftSloBurn", "critical", at_s=60, job="vllm-b", instance="h:8001")
    finding = alert("EngineConfigNcclTimeoutsUnset", "info", job="vllm-b", instance="h:8001")
    resolved = replace(burn, state=AlertState.INACTIVE, fingerprint="resolved")
    node_wide = alert("HostMemoryPressure", "critical", at_s=20)
    for alerts in ([], [bus], [bus, finding], [bus, resolved], [bus, node_wide]):
        assert incident_causes(alerts, topology) == {} == symptom_causes(correlate(alerts, TOPOLOGY))
    assert reads == []
    # The symptom joins its cause only through the TP group: the topology must be read.
    assert incident_causes([bus, burn], topology) == {burn.fingerprint: bus.fingerprint}
    assert reads == [1]


def with_slack(slack: FakeSlack, inhibit: bool) -> Callable[[Settings], Settings]:
    """A configure hook adding a bot-mode Slack notifier on the fake Web API (``inhibit``: keep issue 13's
    default ``notifiers.inhibit_rules``, which mute a lost GPU's engine symptoms)."""
    def add_slack(settings: Settings) -> Settings:
        config = section_settings(SlackSettings, "notifiers.slack", {
            "enabled": True, "mode": "bot", "channel": "C0ALERTS", "base_url": slack.base_url,
            "token_env": "SLACK_BOT_TOKEN", "timeout_seconds": 2})
        notifiers = replace(settings.notifiers, slack=config)
        return replace(settings, notifiers=notifiers if inhibit else replace(notifiers, inhibit_rules=()))
    return add_slack


@dataclass
class SlackRun:
    """One scenario fast-forwarded with a Slack notifier: the agent's view and what the channel got."""

    result: ScenarioResult
    slack: FakeSlack

    def only_incident(self) -> Incident:
        incidents = correlate(self.result.final_alerts, self.result.engine_gpus)
        assert len(incidents) == 1, [render_incident(i, "demo-node") for i in incidents]
        return incidents[0]


@contextmanager
def slack_run(scenario: str, seconds: float, inhibit: bool) -> Iterator[SlackRun]:
    with FakeSlack() as slack, pytest.MonkeyPatch.context() as env:
        env.setenv("SLACK_BOT_TOKEN", DEFAULT_TOKEN)
        result = run_scenario(scenario, duration_seconds=seconds, configure=with_slack(slack, inhibit))
        yield SlackRun(result, slack)


# One run per scenario, shared by the tests below (each run costs seconds of CPU).
@pytest.fixture(scope="module")
def bus() -> Iterator[SlackRun]:
    """gpu-fallen-off-bus to just past the engine's queue build-up (fires at 78 s), its symptom delivered
    (the default inhibition is off, so the symptom goes through the Slack notifier's own folding)."""
    with slack_run("gpu-fallen-off-bus", 80, inhibit=False) as run:
        yield run


@pytest.fixture(scope="module")
def straggler() -> Iterator[SlackRun]:
    """tp-straggler to just past the PCIe alert's firing (pending at 5 s, `for: 1m`); TpStraggler, its
    symptom, fires at 38 s, before it."""
    with slack_run("tp-straggler", 68, inhibit=True) as run:
        yield run


def message_problems(message: Message) -> list[str]:
    """Block Kit problems of a message as posted and after every update."""
    versions = [{"text": message.text, "blocks": message.blocks}, *message.updates]
    return [p for v in versions for p in validate_message(v["text"], v["blocks"])]


def test_gpu_fallen_off_bus_is_one_incident_naming_gpu_5(bus: SlackRun) -> None:
    incident = bus.only_incident()
    assert incident.cause.name == "GpuFallenOffBus" and incident.symptoms
    text = render_incident(incident, "demo-node")
    assert text.splitlines()[0].startswith("GPU 5 fell off the bus on demo-node")
    assert "Symptoms:" in text and "EngineQueueBuildup" in text


def test_tp_straggler_is_one_incident_naming_the_link(straggler: SlackRun) -> None:
    incident = straggler.only_incident()
    assert incident.cause.name == "GpuPcieLinkDegraded"
    assert render_incident(incident, "demo-node").splitlines()[0].startswith(
        "PCIe link of GPU 2 is downtrained")
    assert "TpStraggler" in {s.name for s in incident.symptoms}


def test_gpu_fallen_off_bus_gives_one_slack_message_naming_gpu_5_with_symptoms_folded(bus: SlackRun) -> None:
    """Symptoms are folded into the cause's message (``chat.update``), not posted, not threaded."""
    assert {"GpuFallenOffBus", "EngineQueueBuildup"} <= set(bus.result.fired)
    [message] = bus.slack.top_level()
    assert "GPU 5" in message.text.splitlines()[0], message.text
    assert message.updates, "the symptom that fired later was folded in with chat.update"
    assert "EngineQueueBuildup" in message.text and "GpuRecoveryRequired" in message.text
    assert "EngineDrained" in message.text  # the engine's drain (serving verdict) joins the GPU's incident
    shown = visible_text(message.blocks)
    assert shown.index("GPU 5 fell off the bus") < shown.index("Symptoms (3 related alert(s))")
    assert all(":event:" in r.idem_key for r in bus.slack.replies(message.ts))  # runbook output only
    assert not message_problems(message)


def test_tp_straggler_fires_before_its_cause_and_the_cause_takes_its_message_over(straggler: SlackRun) -> None:
    assert straggler.result.fired["TpStraggler"] < straggler.result.fired["GpuPcieLinkDegraded"]
    [message] = straggler.slack.top_level()
    assert message.text.splitlines()[0].startswith(":large_orange_circle: PCIe link of GPU 2 is downtrained"), \
        message.text
    assert "TpStraggler" in message.text
    assert [r.text for r in straggler.slack.replies(message.ts) if ":event:" not in r.idem_key] == [
        "Probable cause: PCIe link of GPU 2 is downtrained (GpuPcieLinkDegraded, warning); the message now "
        "leads with it."]
    assert not message_problems(message)


# -- the Slack notifier's folding, tick by tick (dispatcher + fake Slack Web API, no scenario) ----------

NOW = 1_000_000


def slack_dispatcher(dispatchers: Dispatchers, slack: FakeSlack, inhibit: bool = True) -> NotificationDispatcher:
    extra = {} if inhibit else {"inhibit_rules": []}
    config = notify_config({"base_url": slack.base_url})
    config["notifiers"].update(extra)
    return dispatchers(config)


def drained(d: NotificationDispatcher) -> None:
    wait_until(lambda: sum(d.outbox.pending_counts().values()) == 0, what="outbox drained")


LOST = make_alert("GpuFallenOffBus", gpu="5", uuid="GPU-5", node="gpu-node-7", summary="GPU 5 fell off the bus")
QUEUE = make_alert("EngineQueueBuildup", severity="warning", job="vllm", instance="h:8000", node="gpu-node-7",
                   summary="vllm: 60 requests queued", fired_at_ms=NOW + 5000)
SLO = make_alert("EngineTtftSloBurn", severity="warning", job="vllm", instance="h:8000", node="gpu-node-7",
                 summary="vllm: TTFT budget burning", fired_at_ms=NOW + 6000)


def resolved(alert: Alert, at_ms: int) -> Alert:
    return replace(alert, state=AlertState.INACTIVE, resolved_at_ms=at_ms)


def test_a_symptom_inhibited_by_its_cause_is_still_listed_in_the_incident_message_and_struck_when_it_resolves(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = slack_dispatcher(dispatchers, fake_slack)  # issue 13's default inhibition mutes the queue alert
    causes = {QUEUE.fingerprint: LOST.fingerprint}
    d.handle([LOST, QUEUE], [], NOW + 6000, causes=causes)
    drained(d)
    [message] = fake_slack.top_level()
    assert message.text.startswith(":red_circle: GPU 5 fell off the bus on gpu-node-7: probable cause of 1")
    assert "EngineQueueBuildup" in visible_text(message.blocks) and not message.updates
    d.handle([LOST, resolved(QUEUE, NOW + 9000)], [], NOW + 10_000, causes={})
    drained(d)
    assert len(fake_slack.top_level()) == 1 and len(message.updates) == 1
    assert "~EngineQueueBuildup" in json.dumps(message.updates[0]["blocks"])
    assert not [r for r in fake_slack.replies(message.ts)]  # a symptom's resolve only edits the message
    assert not message_problems(message)


def test_symptoms_before_their_cause_share_one_message_that_the_cause_takes_over(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    d = slack_dispatcher(dispatchers, fake_slack, inhibit=False)
    pending_cause = replace(LOST, state=AlertState.PENDING, fired_at_ms=0)
    causes = {QUEUE.fingerprint: LOST.fingerprint, SLO.fingerprint: LOST.fingerprint}
    d.handle([pending_cause, QUEUE], [], NOW + 5000, causes={QUEUE.fingerprint: LOST.fingerprint})
    d.handle([pending_cause, QUEUE, SLO], [], NOW + 6000, causes=causes)  # folded into the queue's message
    drained(d)
    [message] = fake_slack.top_level()
    assert message.text.startswith(":large_orange_circle: WARNING: EngineQueueBuildup")
    d.handle([LOST, QUEUE, SLO], [], NOW + 20_000, causes=causes)
    drained(d)
    assert len(fake_slack.top_level()) == 1
    assert message.text.splitlines()[0].startswith(":red_circle: GPU 5 fell off the bus on gpu-node-7")
    shown = visible_text(message.blocks)
    assert shown.index("GPU 5 fell off the bus") < shown.index("EngineQueueBuildup") < shown.index("EngineTtft")
    assert [r.text for r in fake_slack.replies(message.ts)] == [
        "Probable cause: GPU 5 fell off the bus (GpuFallenOffBus, critical); the message now leads with it."]
    d.handle([resolved(LOST, NOW + 30_000), resolved(QUEUE, NOW + 30_000), resolved(SLO, NOW + 30_000)], [],
             NOW + 31_000)
    drained(d)
    assert "RESOLVED: GPU 5 fell off the bus" in message.text.splitlines()[0]
    assert not message_problems(message)


def test_a_symptom_message_shared_by_nothing_else_becomes_a_pointer_when_the_cause_has_its_own(
        fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers) -> None:
    """Two symptoms posted apart (not yet known to be related) before the cause: the cause takes the first
    message over; the second is rewritten to point at the incident."""
    d = slack_dispatcher(dispatchers, fake_slack, inhibit=False)
    d.handle([QUEUE, SLO], [], NOW + 6000, causes={})
    drained(d)
    assert len(fake_slack.top_level()) == 2
    causes = {QUEUE.fingerprint: LOST.fingerprint, SLO.fingerprint: LOST.fingerprint}
    d.handle([LOST, QUEUE, SLO], [], NOW + 20_000, causes=causes)
    drained(d)
    first, second = fake_slack.top_level()
    assert first.text.startswith(":red_circle: GPU 5 fell off the bus")
    assert "EngineTtftSloBurn" in visible_text(first.blocks)
    assert second.text.startswith(":arrow_heading_up: Folded into an incident: EngineTtftSloBurn")
    assert "GPU 5 fell off the bus" in visible_text(second.blocks)
    assert not message_problems(first) and not message_problems(second)


@pytest.mark.skipif(BINARY is None, reason="alertmanager (Debian prometheus-alertmanager) not installed")
def test_alertmanager_inhibits_the_symptoms_of_a_cause(tmp_path: Path) -> None:
    """The rules as an operator installs them: merged into an existing alertmanager.yml by the CLI."""
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump({
        **yaml.safe_load(CONFIG), "inhibit_rules": [{"source_matchers": ['alertname="Mine"'],
                                                      "target_matchers": ['alertname="Theirs"']}]}))
    out = subprocess.run([sys.executable, "-m", "watchdog", "alertmanager", "inhibit-rules", "--merge",
                          str(tmp_path / "alertmanager.yml")], capture_output=True, text=True, check=True).stdout
    merged = yaml.safe_load(out)
    assert merged["inhibit_rules"][0]["source_matchers"] == ['alertname="Mine"']  # the operator's own kept
    assert merged["inhibit_rules"][1:] == inhibit_rules()
    assert merge_inhibit_rules(merged, inhibit_rules()) == merged  # merging again changes nothing
    am = RealAlertmanager(tmp_path / "am", config=out).start()
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


def test_merge_keeps_the_operators_comments_and_writes_no_anchors(tmp_path: Path) -> None:
    import shutil

    config = tmp_path / "alertmanager.yml"
    config.write_text('# our alertmanager\nroute:\n  receiver: team  # the on-call rotation\nreceivers:\n'
                      '  - name: team\ninhibit_rules:\n  # warnings under a critical are noise\n'
                      '  - source_matchers: [severity="critical"]\n    target_matchers: [severity="warning"]\n'
                      '    equal: [alertname]\n')
    def merge(path: Path) -> str:
        return subprocess.run([sys.executable, "-m", "watchdog", "alertmanager", "inhibit-rules", "--merge",
                               str(path)], capture_output=True, text=True, check=True, timeout=60).stdout
    merged = merge(config)
    for kept in ("# our alertmanager", "receiver: team  # the on-call rotation",
                 "# warnings under a critical are noise", 'target_matchers: [severity="warning"]'):
        assert kept in merged
    assert "&id" not in merged and "*id" not in merged
    assert yaml.safe_load(merged)["inhibit_rules"][1:] == inhibit_rules()
    again = tmp_path / "again.yml"
    again.write_text(merged)
    assert merge(again) == merged  # re-running after an upgrade changes nothing
    plain = subprocess.run([sys.executable, "-m", "watchdog", "alertmanager", "inhibit-rules"],
                           capture_output=True, text=True, check=True, timeout=60).stdout
    assert "&id" not in plain and yaml.safe_load(plain)["inhibit_rules"] == inhibit_rules()
    amtool = shutil.which("amtool")
    if amtool:
        check = subprocess.run([amtool, "check-config", str(again)], capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

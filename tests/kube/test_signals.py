"""The node-signal policy (pure): which alerts make a node unfit, when it is clear again, the kubectl argv."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from watchdog.kube.signals import HEALTHY_REASON, UNFIT_ALERTS, NodeSignal, condition, decide, kubectl_argv
from watchdog.model import Alert, AlertState

ROOT = Path(__file__).resolve().parents[2]
MINUTE = 60_000


def alert(name: str, state: AlertState = AlertState.FIRING, gpu: str | None = "3", summary: str = "") -> Alert:
    labels = {"alertname": name, "severity": "critical"}
    if gpu is not None:
        labels |= {"gpu": gpu, "uuid": f"GPU-{gpu}"}
    annotations = {"runbook": "gpu-fallen-off-bus"} | ({"summary": summary} if summary else {})
    return Alert(name, labels, annotations, state, 1.0, f"fp-{name}-{gpu}", active_at_ms=0,
                 fired_at_ms=1000 if state is AlertState.FIRING else 0)


def test_every_unfit_alert_is_a_critical_alert_of_the_rule_pack() -> None:
    severities = {rule["alert"]: rule["labels"]["severity"]
                  for path in (ROOT / "rules").glob("*.yaml")
                  for group in yaml.safe_load(path.read_text())["groups"]
                  for rule in group["rules"] if "alert" in rule}
    assert {name: severities.get(name) for name in UNFIT_ALERTS} == dict.fromkeys(UNFIT_ALERTS, "critical")


@pytest.mark.parametrize(("alerts", "quiet_ms", "expected"), [
    # a firing unfit alert: unhealthy, whatever the quiet time says
    ([alert("GpuXidFatal")], 0, (True, "GpuXidFatal")),
    # several: the most fundamental names the reason
    ([alert("GpuXidFatal", gpu="1"), alert("GpuFallenOffBus"), alert("GpuRecoveryRequired")], 0,
     (True, "GpuFallenOffBus")),
    ([alert("GpuMissing", gpu=None), alert("GpuDriverNotLoaded", gpu=None)], 0, (True, "GpuDriverNotLoaded")),
    # other alerts do not take GPUs out of scheduling
    ([alert("GpuXidBurst"), alert("GpuThermalThrottling")], 10 * MINUTE, (False, HEALTHY_REASON)),
    # quiet long enough: healthy
    ([], 3 * MINUTE, (False, HEALTHY_REASON)),
    # quiet, but not for long enough: no decision (a restarted agent does not clear early)
    ([], 3 * MINUTE - 1, None),
    # an unfit alert still pending: no decision, whatever the quiet time
    ([alert("GpuDriverNotLoaded", AlertState.PENDING, gpu=None)], 10 * MINUTE, None),
    # resolved (inactive) ones are history
    ([alert("GpuFallenOffBus", AlertState.INACTIVE)], 3 * MINUTE, (False, HEALTHY_REASON)),
])
def test_decide(alerts: list[Alert], quiet_ms: int, expected: tuple[bool, str] | None) -> None:
    signal = decide(alerts, quiet_ms=quiet_ms, clear_after_ms=3 * MINUTE)
    assert (signal.key if signal else None) == expected


def test_the_message_names_every_faulty_gpu_and_the_lead_alert_owns_the_thread() -> None:
    signal = decide([alert("GpuXidFatal", gpu="1", summary="GPU 1: fatal Xid 48"), alert("GpuFallenOffBus")],
                    quiet_ms=0, clear_after_ms=MINUTE)
    assert signal is not None
    assert signal.message == "GpuFallenOffBus: GPU 3 (GPU-3); GpuXidFatal: GPU 1: fatal Xid 48"
    assert (signal.fingerprint, signal.alertname, signal.runbook) == ("fp-GpuFallenOffBus-3", "GpuFallenOffBus",
                                                                     "gpu-fallen-off-bus")


def test_kubectl_argv_sets_and_clears_the_condition_and_the_taint() -> None:
    sick = NodeSignal(True, "GpuFallenOffBus", "GpuFallenOffBus: GPU 3 (GPU-3)")
    at = 1_796_000_000_000
    set_condition, set_taint = kubectl_argv("gpu-node-7", sick, condition_type="GpuUnhealthy",
                                            taint_key="inference-watchdog.io/gpu-unhealthy", now_ms=at)
    assert set_condition[:7] == ("kubectl", "patch", "node", "gpu-node-7", "--subresource=status",
                                 "--type=strategic", set_condition[6])
    patch = json.loads(set_condition[6].removeprefix("--patch="))
    assert patch == {"status": {"conditions": [condition(sick, "GpuUnhealthy", at)]}}
    assert patch["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-30T00:53:20Z"
    assert set_taint == ("kubectl", "taint", "node", "gpu-node-7",
                         "inference-watchdog.io/gpu-unhealthy=GpuFallenOffBus:NoSchedule", "--overwrite")
    well = NodeSignal(False, HEALTHY_REASON, "ok")
    clear_condition, clear_taint = kubectl_argv("gpu-node-7", well, condition_type="GpuUnhealthy",
                                                taint_key="inference-watchdog.io/gpu-unhealthy", now_ms=at)
    assert json.loads(clear_condition[6].removeprefix("--patch="))["status"]["conditions"][0]["status"] == "False"
    assert clear_taint == ("kubectl", "taint", "node", "gpu-node-7", "inference-watchdog.io/gpu-unhealthy:NoSchedule-")
    assert len(kubectl_argv("n", sick, condition_type="GpuUnhealthy", taint_key=None, now_ms=at)) == 1


@pytest.mark.parametrize(("runbook", "reason"), [("gpu-fallen-off-bus", "GpuFallenOffBus"),
                                                 ("gpu-xid", "GpuXidFatal"),
                                                 ("gpu-driver-not-loaded", "GpuDriverNotLoaded")])
def test_the_runbook_shows_the_commands_the_agent_suggests(runbook: str, reason: str) -> None:
    text = (ROOT / "runbooks" / f"{runbook}.md").read_text()
    key = "inference-watchdog.io/gpu-unhealthy"
    set_commands = kubectl_argv("gpu-node-7", NodeSignal(True, reason, ""), condition_type="GpuUnhealthy",
                                taint_key=key, now_ms=0)
    clear_commands = kubectl_argv("gpu-node-7", NodeSignal(False, HEALTHY_REASON, ""), condition_type="GpuUnhealthy",
                                  taint_key=key, now_ms=0)
    assert shlex.join(set_commands[1]) in text
    assert shlex.join(clear_commands[1]) in text
    assert shlex.join(set_commands[0][:6]) in text

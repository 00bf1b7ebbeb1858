"""Node signals end to end: a real agent on fake GPUs (suggest), and execute mode against a loopback server
that answers like the API server, with the exact requests, the audit rows and the rate limit."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apiserver import FakeApiServer, make_node, serving
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.config.settings import KubernetesSettings, NodeActionsMode, section_settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.state import StateDB
from watchdog.kube.api import ApiEndpoint, NodeApi
from watchdog.kube.node import STEP, NodeSignaller, build_node_signaller
from watchdog.kube.signals import NodeSignal, kubectl_argv
from watchdog.model import Alert, AlertState
from watchdog.runbooks.audit import RunbookState
from watchdog.runbooks.events import RunbookEvent

ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-node-7"
TAINT = "inference-watchdog.io/gpu-unhealthy"
TOKEN = "token-abc"
START_MS = 1_796_000_000_000
MINUTE = 60_000


def audit_rows(db: StateDB) -> list[dict[str, Any]]:
    rows = db.query("SELECT decision, alertname, runbook, action, action_key, reason, fingerprint FROM runbook_audit "
                    "WHERE step = ? ORDER BY id", (STEP,))
    return [dict(row) for row in rows]


# -- a real agent on fake GPUs ------------------------------------------------------------------------


class Recorder:
    """Records what the agent's signaller returns, tick by tick (the signaller itself runs unchanged)."""

    def __init__(self, signaller: NodeSignaller) -> None:
        self.signaller = signaller
        self.events: list[RunbookEvent] = []
        self.alerts: list[Alert] = []

    def on_alerts(self, alerts: list[Alert], now_ms: int) -> list[RunbookEvent]:
        events = self.signaller.on_alerts(alerts, now_ms)
        self.events += events
        self.alerts = list(alerts)
        return events


def agent_on_fake_gpus(tmp_path: Path, nvml: FakeNvml, kubernetes: dict[str, Any],
                       clock: list[float]) -> Agent:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [str(ROOT / "rules" / "*.yaml")]},
        "runbooks": {"paths": [str(ROOT / "runbooks")]},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}}, "kubernetes": kubernetes}))
    return Agent(load_settings(config_path), config_path=config_path, clock=lambda: clock[0],
                 context=CollectorContext(nvml=nvml))


def test_a_lost_gpu_yields_exactly_one_condition_and_taint_suggestion_for_its_own_node(tmp_path: Path) -> None:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    clock = [START_MS / 1000]
    agent = agent_on_fake_gpus(tmp_path, nvml, {"node_name": NODE}, clock)
    try:
        assert agent.node == NODE  # the Kubernetes node name is the agent's node name
        assert agent.node_signals is not None
        recorder = Recorder(agent.node_signals)
        agent.node_signals = recorder  # type: ignore[assignment]
        for _ in range(3):
            agent.tick()
            clock[0] += 1
        assert recorder.events == []  # healthy GPUs: nothing to say, and nothing known to take back
        nvml.set(3, lost=True)
        for _ in range(20):
            agent.tick()
            clock[0] += 1
        unfit = [a for a in recorder.alerts if a.state is AlertState.FIRING and a.name in
                 ("GpuFallenOffBus", "GpuRecoveryRequired", "GpuXidFatal", "GpuMissing")]
        assert {a.name for a in unfit} >= {"GpuFallenOffBus"}
        assert {a.labels.get("gpu") for a in unfit} == {"3"}
        assert len(recorder.events) == 1
        event = recorder.events[0]
        lead = next(a for a in unfit if a.name == "GpuFallenOffBus")
        assert (event.kind, event.alertname, event.fingerprint, event.runbook) == (
            "suggestion", "GpuFallenOffBus", lead.fingerprint, "gpu-fallen-off-bus")
        commands = [shlex.split(line) for line in event.text.splitlines() if line.startswith("kubectl ")]
        signal = NodeSignal(True, "GpuFallenOffBus", "")
        expected = kubectl_argv(NODE, signal, condition_type="GpuUnhealthy", taint_key=TAINT, now_ms=event.at_ms)
        assert len(commands) == 2
        assert commands[1] == list(expected[1]) == ["kubectl", "taint", "node", NODE,
                                                    f"{TAINT}=GpuFallenOffBus:NoSchedule", "--overwrite"]
        assert commands[0][:6] == list(expected[0][:6])
        cond = json.loads(commands[0][6].removeprefix("--patch="))["status"]["conditions"]
        assert [(c["type"], c["status"], c["reason"]) for c in cond] == [("GpuUnhealthy", "True", "GpuFallenOffBus")]
        assert "GPU 3" in cond[0]["message"]
        rows = audit_rows(agent.db)
        assert [(r["decision"], r["alertname"], r["action_key"]) for r in rows] == [
            ("suggested", "GpuFallenOffBus", f"kubernetes:node:{NODE}")]
        assert rows[0]["action"] == event.text.split("\n", 1)[1].rsplit("\n", 1)[0]
    finally:
        agent.close()


def test_in_execute_mode_a_lost_gpu_changes_its_own_node_once(tmp_path: Path) -> None:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    clock = [START_MS / 1000]
    agent = agent_on_fake_gpus(tmp_path, nvml, {"node_name": NODE, "node_actions": "execute"}, clock)
    api = FakeApiServer(TOKEN, {NODE: make_node(NODE), "gpu-node-8": make_node("gpu-node-8")})
    token = tmp_path / "token"
    token.write_text(TOKEN)
    try:
        with serving(api) as url:
            assert agent.node_signals is not None and agent.node_signals.api is None  # not in a pod here
            agent.node_signals.api = NodeApi(ApiEndpoint(url, str(token), None), NODE, timeout=5)
            for _ in range(3):
                agent.tick()
                clock[0] += 1
            assert api.seen == []
            nvml.set(3, lost=True)
            for _ in range(20):
                agent.tick()
                clock[0] += 1
        assert [(s.method, s.path) for s in api.seen] == [("GET", f"/api/v1/nodes/{NODE}"),
                                                          ("PATCH", f"/api/v1/nodes/{NODE}"),
                                                          ("PATCH", f"/api/v1/nodes/{NODE}/status")]
        assert api.nodes[NODE]["spec"]["taints"] == [{"key": TAINT, "value": "GpuFallenOffBus", "effect": "NoSchedule"}]
        (condition,) = [c for c in api.nodes[NODE]["status"]["conditions"] if c["type"] == "GpuUnhealthy"]
        assert (condition["status"], condition["reason"]) == ("True", "GpuFallenOffBus")
        assert "GPU 3" in condition["message"]
        assert api.nodes["gpu-node-8"]["metadata"]["resourceVersion"] == "1000"
        assert [r["decision"] for r in audit_rows(agent.db)] == ["started", "ran"]
    finally:
        agent.close()


def test_outside_kubernetes_nothing_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    clock = [START_MS / 1000]
    agent = agent_on_fake_gpus(tmp_path, FakeNvml.from_profile("h100-sxm-8"), {}, clock)
    try:
        assert agent.node_signals is None  # a systemd host gets no kubectl suggestions
    finally:
        agent.close()
    settings = load_settings(None)
    db = StateDB(tmp_path / "other.db")
    assert build_node_signaller(settings, db, START_MS, {"NODE_NAME": NODE}) is not None
    off = settings.__class__(**{**settings.__dict__, "kubernetes": kube_settings(node_actions="off")})
    assert build_node_signaller(off, db, START_MS, {"NODE_NAME": NODE}) is None
    named = settings.__class__(**{**settings.__dict__, "kubernetes": kube_settings()})  # node_name: gpu-node-7
    assert build_node_signaller(named, db, START_MS, {}) is not None
    assert build_node_signaller(named, db, START_MS, {"NODE_NAME": NODE}) is not None
    # The pod runs on gpu-node-8: a config naming gpu-node-7 must not make it signal gpu-node-7.
    assert build_node_signaller(named, db, START_MS, {"NODE_NAME": "gpu-node-8"}) is None
    db.close()


# -- execute mode against a loopback API server ------------------------------------------------------------


def kube_settings(**overrides: Any) -> KubernetesSettings:
    return section_settings(KubernetesSettings, "kubernetes", {"node_name": NODE, **overrides})


def fault(name: str = "GpuXidFatal", state: AlertState = AlertState.FIRING, gpu: str = "3") -> Alert:
    return Alert(name, {"alertname": name, "gpu": gpu, "uuid": f"GPU-{gpu}", "severity": "critical"},
                 {"summary": f"GPU {gpu}: {name}", "runbook": "gpu-xid"}, state, 1.0, f"fp-{name}-{gpu}",
                 active_at_ms=START_MS, fired_at_ms=START_MS if state is AlertState.FIRING else 0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeApiServer, NodeSignaller, StateDB]]:
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    api = FakeApiServer(TOKEN, {NODE: make_node(NODE, taints=[other]), "gpu-node-8": make_node("gpu-node-8")})
    token = tmp_path / "token"
    token.write_text(TOKEN)
    db = StateDB(tmp_path / "state.db")
    with serving(api) as url:
        client = NodeApi(ApiEndpoint(url, str(token), None), NODE, timeout=5)
        yield api, NodeSignaller(kube_settings(node_actions="execute"), NODE, RunbookState(db),
                                 started_ms=START_MS, api=client), db
    db.close()


def test_execute_sets_then_clears_with_exactly_these_requests(
        cluster: tuple[FakeApiServer, NodeSignaller, StateDB]) -> None:
    api, signaller, db = cluster
    events = signaller.on_alerts([fault()], START_MS)
    assert [(s.method, s.path, s.content_type) for s in api.seen] == [
        ("GET", f"/api/v1/nodes/{NODE}", ""),
        ("PATCH", f"/api/v1/nodes/{NODE}", "application/json-patch+json"),
        ("PATCH", f"/api/v1/nodes/{NODE}/status", "application/strategic-merge-patch+json"),
    ]
    assert api.seen[2].body == {"status": {"conditions": [{
        "type": "GpuUnhealthy", "status": "True", "reason": "GpuXidFatal", "message": "GpuXidFatal: GPU 3: GpuXidFatal",
        "lastHeartbeatTime": "2026-11-30T00:53:20Z", "lastTransitionTime": "2026-11-30T00:53:20Z"}]}}
    nvidia = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ours = {"key": TAINT, "value": "GpuXidFatal", "effect": "NoSchedule"}
    assert api.seen[1].body == [{"op": "test", "path": "/metadata/resourceVersion", "value": "1000"},
                                {"op": "add", "path": "/spec/taints", "value": [nvidia, ours]}]
    assert all(s.path.startswith(f"/api/v1/nodes/{NODE}") for s in api.seen)
    assert api.nodes["gpu-node-8"]["metadata"]["resourceVersion"] == "1000"  # another node: untouched
    assert [(e.kind, e.fingerprint) for e in events] == [("decision", "fp-GpuXidFatal-3")]

    # Still firing, a second GPU joins: same reason, no change, no request.
    seen = len(api.seen)
    assert signaller.on_alerts([fault(), fault(gpu="5")], START_MS + 1000) == []
    assert len(api.seen) == seen

    # Resolved: nothing until clear_after_seconds of quiet, then the condition goes False and our taint only.
    assert signaller.on_alerts([fault(state=AlertState.INACTIVE)], START_MS + 2000) == []
    assert signaller.on_alerts([], START_MS + 2000 + 3 * MINUTE - 1000) == []
    assert len(api.seen) == seen
    events = signaller.on_alerts([], START_MS + 2000 + 3 * MINUTE)
    clear = api.seen[seen:]
    assert [(s.method, s.path) for s in clear] == [("GET", f"/api/v1/nodes/{NODE}"),
                                                   ("PATCH", f"/api/v1/nodes/{NODE}"),
                                                   ("PATCH", f"/api/v1/nodes/{NODE}/status")]
    condition = clear[2].body["status"]["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "NoGpuFault")
    assert clear[1].body[1] == {"op": "add", "path": "/spec/taints", "value": [nvidia]}
    assert api.nodes[NODE]["spec"]["taints"] == [nvidia]
    assert [c["type"] for c in api.nodes[NODE]["status"]["conditions"]] == ["Ready", "GpuUnhealthy"]
    assert [(e.kind, e.fingerprint) for e in events] == [("decision", "fp-GpuXidFatal-3")]
    assert [(r["decision"], r["fingerprint"]) for r in audit_rows(db)] == [
        ("started", "fp-GpuXidFatal-3"), ("ran", "fp-GpuXidFatal-3"),
        ("started", "fp-GpuXidFatal-3"), ("ran", "fp-GpuXidFatal-3")]


def test_a_taint_an_operator_removed_is_not_put_back_for_the_same_fault(
        cluster: tuple[FakeApiServer, NodeSignaller, StateDB]) -> None:
    api, signaller, _ = cluster
    signaller.on_alerts([fault()], START_MS)
    api.nodes[NODE]["spec"]["taints"] = []  # kubectl taint node gpu-node-7 ...:NoSchedule-
    seen = len(api.seen)
    for second in range(1, 30):
        assert signaller.on_alerts([fault()], START_MS + second * 1000) == []
    assert len(api.seen) == seen
    # A new, more fundamental fault is a change: the taint comes back with its reason.
    signaller.on_alerts([fault(), fault("GpuFallenOffBus", gpu="5")], START_MS + 31_000)
    assert api.nodes[NODE]["spec"]["taints"] == [{"key": TAINT, "value": "GpuFallenOffBus", "effect": "NoSchedule"}]


def test_changes_over_the_hourly_budget_wait_and_are_audited_once(tmp_path: Path) -> None:
    api = FakeApiServer(TOKEN, {NODE: make_node(NODE)})
    token = tmp_path / "token"
    token.write_text(TOKEN)
    db = StateDB(tmp_path / "state.db")
    with serving(api) as url:
        signaller = NodeSignaller(kube_settings(node_actions="execute", max_writes_per_hour=1, clear_after_seconds=0),
                                  NODE, RunbookState(db), started_ms=START_MS,
                                  api=NodeApi(ApiEndpoint(url, str(token), None), NODE))
        signaller.on_alerts([fault()], START_MS)
        assert len(api.writes()) == 2
        for second in range(1, 200):  # the fault clears; the clear is over budget until an hour has passed
            signaller.on_alerts([], START_MS + second * 1000)
        assert len(api.writes()) == 2
        gets = sum(1 for s in api.seen if s.method == "GET")
        assert gets <= 1 + 200 // 60 + 1  # a refused change is looked at again once a minute, not every tick
        refused = [r for r in audit_rows(db) if r["decision"] == "refused"]
        assert len(refused) == 1 and "max_writes_per_hour 1" in refused[0]["reason"]
        signaller.on_alerts([], START_MS + 3_600_000 + 1000)
        assert len(api.writes()) == 4
        assert api.nodes[NODE]["spec"]["taints"] == []
    db.close()


def test_a_failing_api_server_is_audited_and_retried_once_a_minute(
        cluster: tuple[FakeApiServer, NodeSignaller, StateDB]) -> None:
    api, signaller, db = cluster
    api.fail_next = [500]
    events = signaller.on_alerts([fault()], START_MS)
    assert [e.title for e in events] == [f"Kubernetes: could not update node {NODE}"]
    assert "HTTP 500" in events[0].text and TOKEN not in events[0].text
    for second in range(1, 60):
        assert signaller.on_alerts([fault()], START_MS + second * 1000) == []
    assert len(api.seen) == 1
    signaller.on_alerts([fault()], START_MS + 60_000)
    assert api.nodes[NODE]["spec"]["taints"][-1]["key"] == TAINT
    assert [r["decision"] for r in audit_rows(db)] == ["failed", "started", "ran"]


def test_execute_without_an_api_server_fails_visibly(tmp_path: Path) -> None:
    settings = load_settings(None)
    settings = settings.__class__(**{**settings.__dict__, "kubernetes": kube_settings(node_actions="execute")})
    db = StateDB(tmp_path / "state.db")
    signaller = build_node_signaller(settings, db, START_MS, environ={})
    assert signaller is not None and signaller.settings.node_actions is NodeActionsMode.EXECUTE
    events = signaller.on_alerts([fault()], START_MS)
    assert "KUBERNETES_SERVICE_HOST" in events[0].text
    assert [r["decision"] for r in audit_rows(db)] == ["failed"]
    db.close()


def test_a_signaller_for_a_malformed_node_name_is_refused(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    with pytest.raises(ValueError, match="not a Kubernetes node name"):
        NodeSignaller(kube_settings(), "gpu-node-7/../gpu-node-8", RunbookState(db), started_ms=START_MS)
    db.close()

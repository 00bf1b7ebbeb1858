"""Serving steps (drain, wait_idle, canary, readmit) and the sequences of the shipped runbooks, end to end:
the real manager over a real SQLite state file, a real series store fed like the collectors feed it, real
subprocesses for the reset/restart steps (a harmless program standing in for systemctl and nvidia-smi)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.config import load_config_text
from watchdog.config.settings import settings_document, settings_from_config
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState, metric
from watchdog.runbooks.catalogue import RunbookError, load_catalogue, parse_runbook
from watchdog.runbooks.events import RunbookEvent
from watchdog.runbooks.executors import CommandExecutor, SystemdExecutor, run_argv
from watchdog.runbooks.manager import RunbookManager
from watchdog.runbooks.planner import render_step
from watchdog.runbooks.serving_steps import CanaryProgress, DrainExecutor, ProbeReading, ReadmitExecutor
from watchdog.runbooks.steps import RenderedAction
from watchdog.runbooks.templating import TemplateContext
from watchdog.serving.manual import ManualStates
from watchdog.serving.model import ManualState, Verdict
from watchdog.store import Store

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
T0 = 1_700_000_000_000
MINUTE = 60_000
TRUE = "/bin/true"


# -- parsing ----------------------------------------------------------------------------------------


def runbook_text(*steps: str) -> str:
    body = "".join(f"  - {step}\n" for step in steps)
    return f"id: t\ntitle: T\nalerts: [A]\nremediate:\n{body}"


@pytest.mark.parametrize(("step", "key_path", "problem"), [
    ("{name: d, drain: {}}", "remediate[0].drain.job", "exactly one of job"),
    ('{name: d, drain: {job: x, gpu: "1"}}', "remediate[0].drain.job", "exactly one of job"),
    ("{name: d, drain: x}", "remediate[0].drain", "expected a mapping"),
    ("{name: d, drain: {job: x, unit: y}}", "remediate[0].drain.unit", "unknown key"),
    ("{name: d, drain: {job: x, for: 10d}}", "remediate[0].drain.for", "between 0 and 7d"),
    ('{name: d, drain: {job: "{{ labels.job"}}', "remediate[0].drain.job", "unbalanced"),
    ('{name: d, drain: {job: "{{ env.HOME }}"}}', "remediate[0].drain.job", "unknown reference"),
    ("{name: w, wait_idle: {job: x, on_timeout: ignore}}", "remediate[0].wait_idle.on_timeout",
     "escalate, continue"),
    ("{name: w, wait_idle: {job: x, timeout: soon}}", "remediate[0].wait_idle.timeout", "duration"),
    ("{name: w, wait_idle: {job: x}, timeout: 5m}", "remediate[0].timeout", "limit is wait_idle.timeout"),
    ("{name: c, canary: {job: x}, cooldown: 5m}", "remediate[0].cooldown", "only waits"),
    ("{name: c, canary: {job: x}, verify: 'up == 1'}", "remediate[0].verify", "only waits"),
    ("{name: c, canary: {job: x, passes: 0}}", "remediate[0].canary.passes", "from 1 to 100"),
    ("{name: c, canary: {job: x, passes: three}}", "remediate[0].canary.passes", "whole number"),
    ("{name: c, canary: {job: x, passes: true}}", "remediate[0].canary.passes", "whole number"),
    ("{name: r, readmit: {job: x, for: 1h}}", "remediate[0].readmit.for", "unknown key"),
    ("{name: r, readmit: {job: x}, notify: hi}", "remediate[0]", "exactly one action"),
])
def test_bad_serving_steps_are_named_by_file_line_and_key(step: str, key_path: str, problem: str) -> None:
    with pytest.raises(RunbookError) as caught:
        parse_runbook(runbook_text("{name: first, notify: hi}", step), "/rb/t.yaml")
    # the bad step is the second one: its index is 1
    err = caught.value
    assert err.key_path == key_path.replace("remediate[0]", "remediate[1]"), str(err)
    assert problem in err.problem, str(err)
    assert err.file == "/rb/t.yaml" and err.line == 6, str(err)


def test_serving_steps_are_not_diagnostics() -> None:
    with pytest.raises(RunbookError) as caught:
        parse_runbook("id: t\ntitle: T\nalerts: [A]\ndiagnose:\n  - {name: d, drain: {job: x}}\n", "/rb/t.yaml")
    assert caught.value.key_path == "diagnose[0].drain" and "read-only" in caught.value.problem


def test_a_hostile_job_label_is_refused_and_a_gpu_nobody_uses_is_skipped() -> None:
    rb = parse_runbook(runbook_text('{name: d, drain: {job: "{{ labels.job }}"}}',
                                    '{name: g, drain: {gpu: "{{ labels.gpu }}"}}'), "<test>")
    ctx = TemplateContext(labels={"alertname": "A", "job": "--all; reboot", "gpu": "3"})
    hostile = render_step(rb.remediate[0], ctx, runbook="t")
    assert hostile.action is None and hostile.refused and "starts with '-'" in hostile.error
    nobody = render_step(rb.remediate[1], ctx, runbook="t", engines_on_gpu=lambda gpu: ())
    assert nobody.action is None and not nobody.refused and "no engine is known to have a rank on GPU 3" in nobody.error
    # A job resolved from the store that is not a label value is refused, not executed.
    odd = render_step(rb.remediate[1], ctx, runbook="t", engines_on_gpu=lambda gpu: ("a b",))
    assert odd.action is None and odd.refused and "not an engine job name" in odd.error


# -- drain and readmit ownership --------------------------------------------------------------------


def drain_action(*jobs: str, owner: str = "runbook:engine-wedged") -> RenderedAction:
    return RenderedAction("drain", jobs=jobs, text="runbook engine-wedged step drain-engine for EngineWedged",
                          set_by=owner, until_s=None)


def test_a_runbook_never_clears_or_overrides_an_operators_state(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    states = ManualStates(db)
    now = T0 / 1000
    states.set(ManualState("vllm-a", Verdict.DRAIN, "disk swap", "alice", now - 60))
    states.set(ManualState("vllm-b", Verdict.ADMIT, "keep it in", "bob", now - 60))
    drain, readmit = DrainExecutor(states, lambda: now), ReadmitExecutor(states, lambda: now)

    kept = drain.execute(drain_action("vllm-a", "vllm-c"), 5, 4096)
    assert kept.ok and b"vllm-a: already drained by alice" in kept.output
    refused = drain.execute(drain_action("vllm-b"), 5, 4096)
    assert refused.exit_code is None and "a runbook does not override an operator" in refused.error
    readmitted = readmit.execute(RenderedAction("readmit", jobs=("vllm-a", "vllm-c"),
                                                set_by="runbook:engine-wedged"), 5, 4096)
    assert readmitted.ok and b"vllm-a: drain set by alice" in readmitted.output
    active = ManualStates(StateDB(tmp_path / "state.db")).active(now)  # read back through a second handle
    assert active["vllm-a"].set_by == "alice" and active["vllm-b"].verdict is Verdict.ADMIT
    assert "vllm-c" not in active  # its own drain was cleared
    # Another runbook's drain is left for that runbook to readmit.
    drain.execute(drain_action("vllm-d", owner="runbook:gpu-xid"), 5, 4096)
    readmit.execute(RenderedAction("readmit", jobs=("vllm-d",), set_by="runbook:engine-wedged"), 5, 4096)
    assert states.active(now)["vllm-d"].set_by == "runbook:gpu-xid"


def test_a_drain_for_a_duration_expires(tmp_path: Path) -> None:
    states = ManualStates(StateDB(tmp_path / "state.db"))
    now = T0 / 1000
    action = RenderedAction("drain", jobs=("vllm-a",), text="why", set_by="runbook:x", until_s=120)
    assert DrainExecutor(states, lambda: now).execute(action, 5, 4096).ok
    assert states.active(now + 119)["vllm-a"].until_seconds == now + 120
    assert states.active(now + 121) == {}


# -- canary counting --------------------------------------------------------------------------------


class FakeReadings:
    """Probe readings given directly (the counting rule alone; the store path is tested end to end below)."""

    def __init__(self) -> None:
        self.reading: ProbeReading | None = None

    def requests_running(self, job: str, now_ms: int) -> float | None:
        return None

    def probe(self, job: str, now_ms: int) -> ProbeReading | None:
        return self.reading

    def engines_on_gpu(self, gpu: str, now_ms: int) -> tuple[str, ...]:
        return ()


def probe(ok: float, failed: float = 0, ttft: float = 0.1, success: bool = True) -> ProbeReading:
    return ProbeReading(ok, failed, success, ttft, 0.01, 1.0, 0.2)


def test_canary_counts_new_passing_probes_in_a_row_only() -> None:
    readings, progress = FakeReadings(), CanaryProgress()
    action = RenderedAction("canary", jobs=("vllm-a",), passes=3, wait_s=600)

    def poll(reading: ProbeReading | None) -> tuple[bool, str]:
        readings.reading = reading
        status = progress.poll(action, readings, T0)
        return status.done, status.detail

    assert poll(probe(10)) == (False, "vllm-a: 0/3 in a row (no probe completed since the canary started)")
    assert poll(probe(10))[0] is False and "0/3" in poll(probe(10))[1]  # the same old probe: not new
    assert "1/3" in poll(probe(11))[1]
    assert "2/3" in poll(probe(12))[1]
    assert "0/3" in poll(probe(12, failed=1))[1]  # a failure starts over
    assert "1/3" in poll(probe(13, failed=1))[1]
    slow = poll(probe(14, failed=1, ttft=3.0))
    assert "0/3" in slow[1] and "TTFT over its 1s objective" in slow[1]
    assert "0/3" in poll(probe(15, failed=2))[1]  # both moved: the order is unknown, never a pass
    assert poll(None) == (False, "vllm-a: no fresh canary probe series (is engines[].probe configured?); "
                                 "0/3 in a row before")  # stale: no progress
    assert poll(probe(16, failed=2))[0] is False
    assert poll(probe(17, failed=2))[0] is False
    assert poll(probe(18, failed=2))[0] is True


# -- the manager: suggest and execute ---------------------------------------------------------------


ENGINES = [{"job": "vllm-a", "url": "http://127.0.0.1:8000/metrics", "unit": "vllm-a.service"},
           {"job": "vllm-b", "url": "http://127.0.0.1:8001/metrics", "unit": "vllm-b.service"}]


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> float:
        return self.ms / 1000


class Node:
    """A state file, a store fed like the collectors feed it, and a manager built as the agent builds it."""

    def __init__(self, tmp: Path, remediation: dict[str, Any], runbooks: list[Path] | None = None,
                 executors: dict[str, Any] | None = None) -> None:
        config = {"node": "node-1", "engines": ENGINES, "remediation": remediation}
        settings = settings_from_config(load_config_text(yaml.safe_dump(config)))
        self.db = StateDB(tmp / "state" / "state.db")
        self.store = Store()
        self.clock = Clock()
        self.manager = RunbookManager(settings.remediation, self.db, self.store, self.clock, executors,
                                      catalogue=load_catalogue(runbooks or [RUNBOOKS]),
                                      template_config=settings_document(settings), node="node-1")
        self.running = {"vllm-a": 2.0, "vllm-b": 5.0}
        self.probes: dict[str, dict[str, float]] = {j: {"ok": 40, "error": 0, "timeout": 0} for j in self.running}
        self.probe_ok = {"vllm-a": False, "vllm-b": True}
        self.ttft = {"vllm-a": 0.1, "vllm-b": 0.1}
        self.gpus = {"vllm-a": ("3",), "vllm-b": ("4",)}

    def complete_probe(self, job: str, ok: bool, ttft: float = 0.1) -> None:
        self.probes[job]["ok" if ok else "timeout"] += 1
        self.probe_ok[job] = ok
        self.ttft[job] = ttft

    def feed(self) -> None:
        t = self.clock.ms
        for job, running in self.running.items():
            base = {"job": job, "instance": f"127.0.0.1:{8000 + int(job == 'vllm-b')}"}
            self.store.append(metric("up", **base), t, 1.0)
            self.store.append(metric("engine:requests_running", **base), t, running)
            for gpu in self.gpus[job]:
                self.store.append(metric("watchdog_engine_gpu_info", **base, gpu=gpu, uuid=f"GPU-{gpu}"), t, 1.0)
            probe = {**base, "model": "llama"}
            for result, n in self.probes[job].items():
                self.store.append(metric("watchdog_engine_probe_requests_total", **probe, result=result), t, n)
            self.store.append(metric("watchdog_engine_probe_success", **probe), t, 1.0 if self.probe_ok[job] else 0.0)
            self.store.append(metric("watchdog_engine_probe_ttft_seconds", **probe), t, self.ttft[job])
            self.store.append(metric("watchdog_engine_probe_tpot_seconds", **probe), t, 0.02)
            self.store.append(metric("watchdog_engine_probe_slo_seconds", **probe, signal="ttft"), t, 1.0)
            self.store.append(metric("watchdog_engine_probe_slo_seconds", **probe, signal="tpot"), t, 0.2)

    def tick(self, alerts: list[Alert], advance_ms: int = 1000) -> list[RunbookEvent]:
        """Feed, evaluate; wait for the worker pool; evaluate again (collecting results), as two agent ticks."""
        self.clock.ms += advance_ms
        self.feed()
        events = self.manager.on_alerts(alerts, self.clock.ms)
        assert self.manager.wait_idle(60)
        self.clock.ms += 1000
        self.feed()
        return events + self.manager.on_alerts(alerts, self.clock.ms)

    def manual(self) -> dict[str, ManualState]:
        return ManualStates(self.db).active(self.clock())

    def audit(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.query("SELECT * FROM runbook_audit ORDER BY id")]

    def decisions(self, step: str) -> list[str]:
        return [r["decision"] for r in self.audit() if r["step"] == step]


def alert(name: str, **labels: str) -> Alert:
    all_labels = {"alertname": name, "severity": "critical", **labels}
    fingerprint = hashlib.sha256(repr(sorted(all_labels.items())).encode()).hexdigest()[:16]
    return Alert(name=name, labels=all_labels, annotations={"summary": "s"}, state=AlertState.FIRING, value=1.0,
                 fingerprint=fingerprint, active_at_ms=T0 - MINUTE, fired_at_ms=T0)


WEDGED = alert("EngineWedged", job="vllm-a", instance="127.0.0.1:8000", model="llama")
XID = alert("GpuXidFatal", gpu="3", uuid="GPU-3", xid="79")
RESET = alert("GpuRecoveryRequired", gpu="3", uuid="GPU-3", action="reset")


@pytest.mark.parametrize(("fired", "runbook", "lines"), [
    (WEDGED, "engine-wedged", [
        "2. drain-engine [drain] inference-watchdog engine drain vllm-a --reason "
        "'runbook engine-wedged step drain-engine for EngineWedged'",
        "3. wait-idle [wait_idle] wait until it shows 0: inference-watchdog query "
        "'sum(engine:requests_running{job=\"vllm-a\"})' (at most 30s, then go on)",
        "4. restart-engine [systemd] systemctl restart vllm-a.service",
        "5. canary [canary] wait for 3 consecutive fresh canary probes",
        "6. readmit [readmit] inference-watchdog engine admit vllm-a"]),
    (XID, "gpu-xid", [
        "2. drain-engines [drain] inference-watchdog engine drain vllm-a --reason "
        "'runbook gpu-xid step drain-engines for GpuXidFatal'",
        "4. reset-gpu [command] nvidia-smi --gpu-reset -i 3",
        "7. readmit [readmit] inference-watchdog engine admit vllm-a"]),
    (RESET, "gpu-fallen-off-bus", [
        "2. drain-engines [drain] inference-watchdog engine drain vllm-a --reason "
        "'runbook gpu-fallen-off-bus step drain-engines for GpuRecoveryRequired'",
        "4. reset-gpu [command] nvidia-smi --gpu-reset -i 3",
        "6. readmit [readmit] inference-watchdog engine admit vllm-a"]),
])
def test_suggest_mode_shows_the_whole_sequence_rendered_and_changes_nothing(
        tmp_path: Path, fired: Alert, runbook: str, lines: list[str]) -> None:
    node = Node(tmp_path, {})  # the default policy: suggest
    events = node.tick([fired]) + node.tick([fired])
    [suggestion] = [e for e in events if e.kind == "suggestion"]
    assert suggestion.runbook == runbook
    for line in lines:
        assert line in suggestion.text, suggestion.text
    rendered = [line for line in suggestion.text.splitlines() if line[:1].isdigit()]
    assert len(rendered) == len(node.manager.catalogue.get(runbook).remediate)  # type: ignore[union-attr]
    assert "{{" not in "\n".join(rendered)
    assert node.manual() == {}
    steps = node.manager.catalogue.get(runbook).remediate  # type: ignore[union-attr]
    for step in steps:
        assert node.decisions(step.name)[:1] in (["suggested"], ["skipped"]), step.name
    assert not [r for r in node.audit() if r["decision"] in ("started", "ran")]


def auto_policy(**extra: Any) -> dict[str, Any]:
    return {"mode": "auto", "approvers": ["U-ALICE"],
            "allow": {"engines": ["vllm-*"], "units": ["vllm-*.service"], "commands": [TRUE]}, **extra}


def test_auto_mode_runs_the_wedged_engine_sequence_and_readmits_after_the_canary(tmp_path: Path) -> None:
    # systemctl is replaced by /bin/true: a real program, run as the agent runs systemctl, that changes nothing.
    node = Node(tmp_path, auto_policy(), executors={"systemd": SystemdExecutor(run_argv, systemctl=TRUE)})
    node.tick([WEDGED])  # tell-oncall
    node.tick([WEDGED])  # drain-engine
    state = node.manual()["vllm-a"]
    assert state.verdict is Verdict.DRAIN and state.set_by == "runbook:engine-wedged"
    assert state.reason == "runbook engine-wedged step drain-engine for EngineWedged" and state.until_seconds is None
    assert "vllm-b" not in node.manual()
    node.tick([WEDGED])  # wait-idle starts: 2 requests still running
    assert node.decisions("wait-idle") == ["started"]
    node.running["vllm-a"] = 0
    node.tick([WEDGED])  # idle: wait-idle done; restart-engine (still wedged) runs, then its verify holds
    node.tick([WEDGED])
    assert node.decisions("wait-idle") == ["started", "ran"]
    assert node.decisions("restart-engine") == ["started", "ran", "verified"]
    restart = next(r for r in node.audit() if r["step"] == "restart-engine" and r["decision"] == "ran")
    assert restart["action"] == "systemctl restart vllm-a.service" and restart["exit_code"] == 0
    node.tick([WEDGED])  # canary starts: the old probes do not count
    assert node.decisions("canary") == ["started"]
    node.complete_probe("vllm-a", ok=True)
    events = node.tick([])  # the restarted engine answers: the alert resolves, the episode goes on
    assert "vllm-a" in node.manual(), "readmitted before the canary passed"
    node.complete_probe("vllm-a", ok=True)
    events += node.tick([])
    assert "vllm-a" in node.manual()
    node.complete_probe("vllm-a", ok=True)
    events += node.tick([])  # third passing probe in a row: canary done, readmit runs
    events += node.tick([])
    assert node.manual() == {}
    assert node.decisions("canary") == ["started", "ran"]
    assert node.decisions("readmit") == ["started", "ran"]
    for step in ("tell-oncall", "drain-engine", "wait-idle", "restart-engine", "canary", "readmit"):
        assert "started" in node.decisions(step) and "ran" in node.decisions(step), step
    canary = next(r for r in node.audit() if r["step"] == "canary" and r["decision"] == "ran")
    assert "3/3 in a row" in canary["reason"]
    assert any(e.title == "readmit: ran" and "readmitted" in e.text for e in events)
    episode = node.db.query("SELECT phase, ended_ms FROM runbook_episodes")[0]
    assert episode["phase"] == "resolved" and episode["ended_ms"] > 0
    assert not node.db.query("SELECT * FROM runbook_escalations")


def test_a_failing_canary_keeps_the_engine_drained_and_escalates(tmp_path: Path) -> None:
    node = Node(tmp_path, auto_policy(), executors={"systemd": SystemdExecutor(run_argv, systemctl=TRUE)})
    node.running["vllm-a"] = 0
    for _ in range(4):
        node.tick([WEDGED])  # tell, drain, wait-idle (idle at once) + restart, verify
    assert node.decisions("restart-engine") == ["started", "ran", "verified"]
    node.tick([WEDGED])
    assert node.decisions("canary") == ["started"]
    for ok, ttft in ((True, 0.1), (True, 0.1), (False, 0.0), (True, 4.0), (True, 0.1)):
        node.complete_probe("vllm-a", ok=ok, ttft=ttft)
        node.tick([WEDGED])
    assert node.decisions("canary") == ["started"]
    node.complete_probe("vllm-a", ok=True)
    events = node.tick([WEDGED], advance_ms=10 * MINUTE)  # past the canary's 10 minutes
    assert node.decisions("canary") == ["started", "failed", "escalated"]
    failed = next(r for r in node.audit() if r["step"] == "canary" and r["decision"] == "failed")
    assert "fewer than 3 passing probes in a row within 10m" in failed["reason"]
    assert any(e.title == "escalated to a human" and "stay drained" in e.text for e in events)
    assert node.manual()["vllm-a"].set_by == "runbook:engine-wedged"
    assert node.decisions("readmit") == []
    node.tick([])  # the alert resolves: the escalated episode ends, the engine stays drained for a human
    assert node.manual()["vllm-a"].verdict is Verdict.DRAIN
    assert node.decisions("readmit") == []


def test_a_stale_probe_never_passes_the_canary(tmp_path: Path) -> None:
    node = Node(tmp_path, auto_policy(), executors={"systemd": SystemdExecutor(run_argv, systemctl=TRUE)})
    node.running["vllm-a"] = 0
    for _ in range(5):
        node.tick([WEDGED])
    assert node.decisions("canary") == ["started"]
    # The probe's series stop (the collector died) after one last good-looking value: nothing is fresh.
    node.complete_probe("vllm-a", ok=True)
    node.tick([WEDGED])
    node.feed = lambda: None  # type: ignore[method-assign]
    for _ in range(3):
        node.tick([WEDGED], advance_ms=2 * MINUTE)
    node.tick([WEDGED], advance_ms=5 * MINUTE)
    assert node.decisions("canary") == ["started", "failed", "escalated"]
    failed = next(r for r in node.audit() if r["step"] == "canary" and r["decision"] == "failed")
    assert "no fresh canary probe series" in failed["reason"] and "1/3 in a row before" in failed["reason"]
    assert "vllm-a" in node.manual()


def test_auto_mode_runs_a_gpu_sequence_on_the_engines_of_that_gpu(tmp_path: Path) -> None:
    """drain → wait_idle → reset (a harmless allowed command) → canary → readmit, the engines found through
    watchdog_engine_gpu_info; the engine on another GPU is never touched."""
    rb_dir = tmp_path / "runbooks"
    rb_dir.mkdir()
    (rb_dir / "gpu-reset.yaml").write_text(f"""
id: gpu-reset
title: GPU needs a reset
alerts: [GpuRecoveryRequired]
remediate:
  - {{name: drain-engines, drain: {{gpu: "{{{{ labels.gpu }}}}"}}, auto: true, max_per_day: 6}}
  - {{name: wait-idle, wait_idle: {{gpu: "{{{{ labels.gpu }}}}", timeout: 5m}}, auto: true}}
  - {{name: reset-gpu, command: [{TRUE}, --gpu-reset, -i, "{{{{ labels.gpu }}}}"], auto: true, max_per_day: 2,
     requires: 'sum(engine:requests_running and on (job, instance)
       watchdog_engine_gpu_info{{gpu="{{{{ labels.gpu }}}}"}}) == 0'}}
  - {{name: canary, canary: {{gpu: "{{{{ labels.gpu }}}}", passes: 2, timeout: 5m}}, auto: true}}
  - {{name: readmit, readmit: {{gpu: "{{{{ labels.gpu }}}}"}}, auto: true}}
""")
    node = Node(tmp_path, auto_policy(), runbooks=[rb_dir], executors={"command": CommandExecutor()})
    node.tick([RESET])  # drain
    assert set(node.manual()) == {"vllm-a"}
    node.tick([RESET])  # wait-idle: 2 running
    assert node.decisions("reset-gpu") == []
    node.running["vllm-a"] = 0
    node.tick([RESET])  # idle → the reset runs (its requires holds now)
    node.tick([RESET])
    reset = next(r for r in node.audit() if r["step"] == "reset-gpu" and r["decision"] == "ran")
    assert reset["action"] == f"{TRUE} --gpu-reset -i 3" and reset["exit_code"] == 0
    for _ in range(2):
        node.complete_probe("vllm-a", ok=True)
        node.tick([RESET])
    node.tick([RESET])
    assert node.manual() == {}
    steps = ("drain-engines", "wait-idle", "reset-gpu", "canary", "readmit")
    assert [node.decisions(s)[-1] for s in steps] == ["ran"] * 5
    drain = next(r for r in node.audit() if r["step"] == "drain-engines" and r["decision"] == "started")
    assert drain["action"].startswith("inference-watchdog engine drain vllm-a --reason") and drain["actor"] == "agent"


def test_without_the_engine_allowlist_nothing_is_drained(tmp_path: Path) -> None:
    node = Node(tmp_path, {**auto_policy(), "allow": {"units": ["vllm-*.service"]}})
    node.tick([WEDGED])
    node.tick([WEDGED])
    assert node.manual() == {}
    [row] = [r for r in node.audit() if r["step"] == "drain-engine"]
    assert row["decision"] == "skipped" and "not in remediation.allow.engines" in row["reason"]
    assert node.decisions("restart-engine") == []  # the walk stops: no restart of an engine still in rotation


def test_dry_run_decides_and_audits_every_step_but_drains_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path, auto_policy(dry_run=True), executors={"systemd": SystemdExecutor(run_argv, systemctl=TRUE)})
    events = node.tick([WEDGED])
    assert node.manual() == {}
    for step in ("drain-engine", "wait-idle", "restart-engine", "canary", "readmit"):
        assert node.decisions(step) == ["dry_run"], step
    assert any(e.title == "drain-engine: dry run" and "inference-watchdog engine drain vllm-a" in e.text
               for e in events)


def test_wait_idle_escalates_on_timeout_and_the_engine_stays_drained(tmp_path: Path) -> None:
    rb_dir = tmp_path / "runbooks"
    rb_dir.mkdir()
    (rb_dir / "strict.yaml").write_text("""
id: strict
title: Strict wait
alerts: [EngineWedged]
remediate:
  - {name: drain, drain: {job: "{{ labels.job }}", for: 1h}, auto: true, max_per_day: 6}
  - {name: wait-idle, wait_idle: {job: "{{ labels.job }}", timeout: 1m}, auto: true}
  - {name: readmit, readmit: {job: "{{ labels.job }}"}, auto: true}
""")
    node = Node(tmp_path, auto_policy(), runbooks=[rb_dir])
    node.tick([WEDGED])
    node.tick([WEDGED])
    assert node.manual()["vllm-a"].until_seconds == pytest.approx(node.clock() - 3 + 3600, abs=3)
    events = node.tick([WEDGED], advance_ms=MINUTE)
    assert node.decisions("wait-idle") == ["started", "failed", "escalated"]
    failed = next(r for r in node.audit() if r["step"] == "wait-idle" and r["decision"] == "failed")
    assert failed["reason"] == "no idle reading within 1m: vllm-a: 2 running"
    assert any(e.title == "escalated to a human" for e in events)
    assert node.decisions("readmit") == [] and "vllm-a" in node.manual()


def test_a_canary_in_progress_survives_a_restart_of_the_agent_by_starting_its_count_over(tmp_path: Path) -> None:
    systemd = {"systemd": SystemdExecutor(run_argv, systemctl=TRUE)}
    node = Node(tmp_path, auto_policy(), executors=systemd)
    node.running["vllm-a"] = 0
    for _ in range(5):
        node.tick([WEDGED])
    node.complete_probe("vllm-a", ok=True)
    node.tick([WEDGED])
    node.complete_probe("vllm-a", ok=True)
    node.tick([WEDGED])  # 2 of 3
    node.manager.close()
    restarted = Node(tmp_path, auto_policy(), executors=systemd)  # the same state file
    restarted.clock.ms, restarted.probes, restarted.running = node.clock.ms, node.probes, node.running
    restarted.probe_ok["vllm-a"] = True
    restarted.tick([WEDGED])  # a new baseline: the two passes before the restart are not remembered
    restarted.complete_probe("vllm-a", ok=True)
    restarted.tick([WEDGED])
    assert "vllm-a" in restarted.manual()
    for _ in range(2):
        restarted.complete_probe("vllm-a", ok=True)
        restarted.tick([WEDGED])
    restarted.tick([WEDGED])
    assert restarted.manual() == {}
    assert restarted.decisions("canary") == ["started", "ran"] and restarted.decisions("readmit") == ["started", "ran"]


def test_approve_mode_runs_a_serving_step_only_when_an_approver_asks(tmp_path: Path) -> None:
    node = Node(tmp_path, {**auto_policy(), "mode": "approve"})
    node.tick([WEDGED])
    assert node.manual() == {} and node.decisions("drain-engine") == ["awaiting_approval"]
    refused = node.manager.approve(WEDGED.fingerprint, "drain-engine", "U-MALLORY")
    assert not refused.accepted
    assert node.manager.approve(WEDGED.fingerprint, "drain-engine", "U-ALICE").accepted
    node.tick([WEDGED])
    assert node.manual()["vllm-a"].set_by == "runbook:engine-wedged"
    started = next(r for r in node.audit() if r["step"] == "drain-engine" and r["decision"] == "started")
    assert started["actor"] == "U-ALICE"
    node.running["vllm-a"] = 0
    assert node.manager.approve(WEDGED.fingerprint, "wait-idle", "U-ALICE").accepted
    node.tick([WEDGED])
    assert node.decisions("wait-idle")[-2:] == ["started", "ran"]
    assert node.manager.approve(WEDGED.fingerprint, "readmit", "U-ALICE").accepted
    node.tick([WEDGED])
    assert node.manual() == {}


def test_runbooks_show_prints_the_sequence_for_an_alert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from watchdog.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "engines": ENGINES,
                                      "runbooks": {"paths": [str(RUNBOOKS)]},
                                      "remediation": {"allow": {"engines": ["vllm-a"]}}}))
    code = main(["runbooks", "show", "engine-wedged", "--config", str(config), "--json", "--alert", "EngineWedged",
                 "--labels", "job=vllm-a,instance=127.0.0.1:8000"])
    out = capsys.readouterr().out
    assert code == 0
    data = yaml.safe_load(out)
    assert [s["kind"] for s in data["remediate"]] == ["notify", "drain", "wait_idle", "systemd", "canary", "readmit"]
    assert data["remediate"][1]["action"] == "drain job=<labels.job>"
    steps = data["suggestions"][0]["steps"]
    assert [s["verdict"] for s in steps] == ["suggested"] * 6
    assert steps[1]["action"] == ("inference-watchdog engine drain vllm-a --reason "
                                  "'runbook engine-wedged step drain-engine for EngineWedged'")
    assert steps[5]["action"] == "inference-watchdog engine admit vllm-a"
    assert not any("{{" in s["action"] for s in steps)
    assert main(["runbooks", "list"]) == 0 and "engine-wedged" in capsys.readouterr().out

"""The runbook manager end to end: real subprocesses, a real SQLite file, the real config loader."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.loopback import serving
from watchdog.config import load_config_text
from watchdog.config.settings import settings_document, settings_from_config
from watchdog.infra.logs import register_secret
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState, metric
from watchdog.runbooks.catalogue import catalogue_from_settings, load_catalogue
from watchdog.runbooks.events import RunbookEvent
from watchdog.runbooks.executors import ExecResult, default_executors
from watchdog.runbooks.manager import RunbookManager
from watchdog.runbooks.planner import Condition
from watchdog.runbooks.steps import RenderedAction
from watchdog.store import Store

PY = sys.executable
T0 = 1_700_000_000_000
MINUTE = 60_000

RUNBOOK = {
    "id": "engine-down",
    "title": "Engine down",
    "alerts": ["EngineDown"],
    "diagnose": [{"name": "say-job", "command": ["/bin/echo", "diagnosing", "{{ labels.job }}"]}],
    "remediate": [
        {"name": "restart", "command": [PY, "-c", "print('restarted')", "{{ labels.job }}"],
         "auto": True, "cooldown": "30m", "max_per_day": 10},
    ],
}


class Recording:
    """A real executor that remembers what it was asked to run."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[RenderedAction] = []
        self.lock = threading.Lock()

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        with self.lock:
            self.calls.append(action)
        result: ExecResult = self.inner.execute(action, timeout_s, max_output_bytes)
        return result


class Clock:
    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def manager_for(config: dict[str, Any], db: StateDB, store: Store, *args: Any, **kw: Any) -> RunbookManager:
    """A manager as the agent builds it from a config document: its remediation section, the whole
    document for templates, the node name."""
    settings = settings_from_config(load_config_text(yaml.safe_dump(config)))  # validated and defaulted
    kw.setdefault("catalogue", catalogue_from_settings(settings.runbooks))
    return RunbookManager(settings.remediation, db, store, *args, template_config=settings_document(settings),
                          node=settings.node or None, **kw)


class Harness:
    """One manager over a runbook directory and a state file; ``restart()`` makes a fresh manager."""

    def __init__(self, tmp: Path, runbooks: list[dict[str, Any]], remediation: dict[str, Any],
                 conditions: Any = None, executors: dict[str, Any] | None = None) -> None:
        self.tmp = tmp
        self.rb_dir = tmp / "runbooks"
        self.rb_dir.mkdir(parents=True, exist_ok=True)
        for rb in runbooks:
            (self.rb_dir / f"{rb['id']}.yaml").write_text(yaml.safe_dump(rb, sort_keys=False))
        remediation = {"diagnostics": {"commands": ["/bin/echo", "/nonexistent/tool"]}, **remediation}
        self.config = load_config_text(yaml.safe_dump({"node": "node-1", "remediation": remediation}))
        self.db_path = tmp / "state" / "state.db"
        self.store = Store()
        self.clock = Clock()
        self.conditions = conditions
        real = default_executors()
        self.recorders = {kind: Recording(real[kind]) for kind in real}
        self.recorders.update(executors or {})
        self.manager = self._build()

    def _build(self) -> RunbookManager:
        self.db = StateDB(self.db_path)
        return manager_for(self.config, self.db, self.store, self.clock, self.recorders,
                           catalogue=load_catalogue([self.rb_dir]), conditions=self.conditions)

    def restart(self) -> None:
        self.manager.wait_idle()
        self.manager.close()
        self.db.close()
        self.manager = self._build()

    def tick(self, alerts: list[Alert], advance_ms: int = 1000) -> list[RunbookEvent]:
        """One tick, then wait for the pool and a second tick that collects the results."""
        self.clock.ms += advance_ms
        events = self.manager.on_alerts(alerts, self.clock.ms)
        assert self.manager.wait_idle(60)
        self.clock.ms += 1000
        events += self.manager.on_alerts(alerts, self.clock.ms)
        return events

    def calls(self, kind: str = "command") -> list[RenderedAction]:
        return self.recorders[kind].calls

    def remediation_calls(self) -> list[RenderedAction]:
        return [c for r in self.recorders.values() for c in r.calls
                if not (c.kind == "command" and c.argv[0] in ("/bin/echo", "/nonexistent/tool"))]

    def audit(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.query("SELECT * FROM runbook_audit ORDER BY id")]

    def decisions(self, step: str | None = None) -> list[str]:
        return [r["decision"] for r in self.audit() if step is None or r["step"] == step]


def make_alert(name: str = "EngineDown", fired_at: int = T0, state: AlertState = AlertState.FIRING,
               **labels: str) -> Alert:
    all_labels = {"alertname": name, "severity": "critical", "job": "vllm", **labels}
    fingerprint = hashlib.sha256(repr(sorted(all_labels.items())).encode()).hexdigest()[:16]
    return Alert(name=name, labels=all_labels, annotations={"summary": "s"}, state=state, value=1.0,
                 fingerprint=fingerprint, active_at_ms=fired_at - MINUTE, fired_at_ms=fired_at)


@pytest.fixture
def auto_policy() -> dict[str, Any]:
    return {"mode": "auto", "allow": {"commands": [PY], "units": ["vllm.service"]}, "approvers": ["U-ALICE"]}


# -- default policy ---------------------------------------------------------------------------------


def test_default_policy_suggests_and_never_executes_remediation(tmp_path: Path) -> None:
    h = Harness(tmp_path, [RUNBOOK], {})
    assert h.manager.policy.mode == "suggest"
    alert = make_alert()
    events = h.tick([alert]) + h.tick([alert]) + h.tick([alert], advance_ms=3_600_000)
    assert h.remediation_calls() == []
    # diagnostics (read-only) did run, in the pool, and arrived as an event
    assert [c.argv for c in h.calls()] == [("/bin/echo", "diagnosing", "vllm")]
    diag = [e for e in events if e.kind == "diagnostics"]
    assert len(diag) == 1 and "diagnosing vllm" in diag[0].text
    suggestion = [e for e in events if e.kind == "suggestion"]
    assert len(suggestion) == 1
    assert f"{PY} -c 'print('\"'\"'restarted'\"'\"')' vllm" in suggestion[0].text
    assert "suggested" in suggestion[0].text
    assert h.decisions("restart") == ["suggested"]
    result = h.manager.approve(alert.fingerprint, "restart", "U-ALICE")
    assert not result.accepted and "approvers" in result.reason
    assert h.decisions("restart")[-1] == "approve_refused"


def test_mode_off_decides_nothing_runs_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, [RUNBOOK], {"mode": "off", "allow": {"commands": [PY]}})
    h.tick([make_alert()])
    assert h.remediation_calls() == []
    rows = [r for r in h.audit() if r["step"] == "restart"]
    assert [(r["decision"], r["reason"]) for r in rows] == [("skipped", "remediation.mode is off")]


# -- auto mode --------------------------------------------------------------------------------------


def test_auto_mode_runs_an_allowlisted_auto_step_and_audits_it(tmp_path: Path,
                                                               auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], auto_policy)
    events = h.tick([make_alert()])
    assert [c.argv for c in h.remediation_calls()] == [(PY, "-c", "print('restarted')", "vllm")]
    assert h.decisions("restart") == ["started", "ran"]
    ran = next(r for r in h.audit() if r["decision"] == "ran")
    assert ran["exit_code"] == 0 and ran["duration_ms"] is not None
    assert ran["output_sha256"] == hashlib.sha256(b"restarted\n").hexdigest()
    assert ran["actor"] == "agent" and ran["alertname"] == "EngineDown" and ran["runbook"] == "engine-down"
    result = [e for e in events if e.kind == "result"]
    assert len(result) == 1 and "restarted" in result[0].text and "exit 0" in result[0].text
    samples = {dict(s.labels)["outcome"]: s.value for s in h.manager.self_samples()
               if dict(s.labels)["step"] == "restart"}
    assert samples == {"started": 1.0, "ran": 1.0}
    assert h.manager.self_samples()[0].labels[0] == ("__name__", "watchdog_remediation_runs_total")


def test_auto_mode_without_allowlist_entry_skips(tmp_path: Path) -> None:
    h = Harness(tmp_path, [RUNBOOK], {"mode": "auto"})
    events = h.tick([make_alert()])
    assert h.remediation_calls() == []
    rows = [r for r in h.audit() if r["step"] == "restart"]
    assert [r["decision"] for r in rows] == ["skipped"]
    assert "not in remediation.allow.commands" in rows[0]["reason"]
    assert any("not in remediation.allow.commands" in e.text for e in events if e.kind == "suggestion")


def test_dry_run_decides_and_audits_but_executes_nothing(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], {**auto_policy, "dry_run": True})
    events = h.tick([make_alert()])
    assert h.remediation_calls() == []
    assert h.decisions("restart") == ["dry_run"]
    assert [r["dry_run"] for r in h.audit() if r["step"] == "restart"] == [1]
    assert any(e.title == "restart: dry run" for e in events)


def test_a_hostile_label_is_refused_and_audited(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], auto_policy)
    for hostile in ("--help; rm -rf /", "$(reboot)"):
        h.tick([make_alert(job=hostile)])
    assert h.calls() == [] and h.remediation_calls() == []
    refused = [r for r in h.audit() if r["decision"] == "refused"]
    assert {r["step"] for r in refused} == {"say-job", "restart"}
    assert len(refused) == 4
    assert any("starts with '-'" in r["reason"] for r in refused)
    assert any("outside the allowed set" in r["reason"] for r in refused)


def test_requires_not_met_skips_and_the_walk_moves_on(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [
        {"name": "only-if-idle", "command": [PY, "-c", "print(1)"], "auto": True,
         "requires": 'engine_idle{job="{{ labels.job }}"} == 1'},
        {"name": "notify-team", "notify": "engine {{ labels.job }} on {{ node }} is down", "auto": True},
    ]}
    asked: list[str] = []

    def conditions(expr: str, now_ms: int) -> Condition:
        asked.append(expr)
        return Condition(False, "empty result")

    h = Harness(tmp_path, [runbook], auto_policy, conditions=conditions)
    events = h.tick([make_alert()])
    assert asked == ['engine_idle{job="vllm"} == 1']
    assert h.decisions("only-if-idle") == ["skipped"]
    assert h.decisions("notify-team") == ["started", "ran"]
    assert any(e.title == "notify-team" and e.text == "engine vllm on node-1 is down" for e in events)
    assert [c.argv for c in h.calls()] == [("/bin/echo", "diagnosing", "vllm")]


def test_a_failed_step_escalates(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [
        {"name": "restart", "command": [PY, "-c", "import sys; sys.exit(4)"], "auto": True},
        {"name": "after", "command": [PY, "-c", "print(2)"], "auto": True},
    ]}
    h = Harness(tmp_path, [runbook], auto_policy)
    alert = make_alert()
    events = h.tick([alert]) + h.tick([alert])
    assert h.decisions("restart") == ["started", "failed", "escalated"]
    assert h.decisions("after") == []
    assert any(e.title == "escalated to a human" and "exit 4" in e.text for e in events)


# -- verify and escalation --------------------------------------------------------------------------


VERIFIED = {**RUNBOOK, "remediate": [
    {"name": "restart", "command": [PY, "-c", "print('restarted')"], "auto": True,
     "verify": {"expr": 'up{job="{{ labels.job }}"} == 1', "timeout": "5m"}},
]}


def test_verify_that_holds_completes_the_episode(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    pytest.importorskip("watchdog.promql")
    h = Harness(tmp_path, [VERIFIED], auto_policy)
    alert = make_alert()
    h.store.append(metric("up", job="vllm"), h.clock.ms, 0.0)
    h.tick([alert])
    assert h.decisions("restart") == ["started", "ran"]
    h.tick([alert], advance_ms=30_000)
    assert "verified" not in h.decisions("restart")
    h.store.append(metric("up", job="vllm"), h.clock.ms + 500, 1.0)
    events = h.tick([alert])
    assert h.decisions("restart") == ["started", "ran", "verified"]
    assert any(e.title == "restart: verified" for e in events)
    assert len(h.remediation_calls()) == 1


def test_verify_timeout_escalates_and_stops_automatic_action(tmp_path: Path,
                                                              auto_policy: dict[str, Any]) -> None:
    pytest.importorskip("watchdog.promql")
    h = Harness(tmp_path, [VERIFIED], auto_policy)
    alert = make_alert()
    h.tick([alert])
    h.tick([alert], advance_ms=4 * MINUTE)
    assert "escalated" not in h.decisions()
    events = h.tick([alert], advance_ms=2 * MINUTE)
    assert h.decisions("restart")[-1] == "escalated"
    assert "verify did not hold" in h.audit()[-1]["reason"]
    assert any(e.title == "escalated to a human" for e in events)
    # the alert resolves and fires again: no automatic action, even after an agent restart
    h.tick([])
    h.restart()
    events = h.tick([make_alert(fired_at=h.clock.ms)])
    assert len(h.remediation_calls()) == 1
    assert any("ESCALATED" in e.text for e in events if e.kind == "suggestion")
    assert h.decisions("restart")[-1] == "awaiting_approval"


def test_a_remediation_loop_escalates_instead_of_looping(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [{"name": "restart", "command": [PY, "-c", "print(1)"], "auto": True}]}
    h = Harness(tmp_path, [runbook], auto_policy)
    for episode in range(5):
        alert = make_alert(fired_at=h.clock.ms)
        h.tick([alert])
        h.tick([])  # resolved: the remediation "worked", then the alert comes back
        if episode == 2:
            h.restart()  # the count survives a restart too
    assert len(h.remediation_calls()) == 3
    # 4th episode: escalated; 5th: still escalated - the step only awaits a human
    assert h.decisions("restart") == ["started", "ran"] * 3 + ["awaiting_approval"] * 2
    escalations = [r for r in h.audit() if r["decision"] == "escalated"]
    assert len(escalations) == 1 and "returned after 3 remediated episodes" in escalations[0]["reason"]
    # a human acknowledges: automatic remediation may run again
    fingerprint = make_alert().fingerprint
    assert not h.manager.acknowledge(fingerprint, "U-MALLORY").accepted
    assert h.manager.acknowledge(fingerprint, "U-ALICE").accepted
    h.tick([make_alert(fired_at=h.clock.ms)])
    assert len(h.remediation_calls()) == 4


# -- guards survive restarts ------------------------------------------------------------------------


def test_cooldown_survives_an_agent_restart(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], auto_policy)
    h.tick([make_alert()])
    h.tick([])
    assert len(h.remediation_calls()) == 1
    h.restart()
    h.tick([make_alert(fired_at=h.clock.ms)], advance_ms=10 * MINUTE)
    assert len(h.remediation_calls()) == 1
    last = [r for r in h.audit() if r["step"] == "restart"][-1]
    assert last["decision"] == "skipped" and "cooldown" in last["reason"]
    h.tick([])
    h.restart()
    h.tick([make_alert(fired_at=h.clock.ms)], advance_ms=30 * MINUTE)
    assert len(h.remediation_calls()) == 2


def test_max_per_day_survives_an_agent_restart(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [{"name": "restart", "command": [PY, "-c", "print(1)"], "auto": True,
                                         "max_per_day": 2}]}
    policy = {**auto_policy, "max_attempts_before_escalation": 10}
    h = Harness(tmp_path, [runbook], policy)
    for _ in range(3):
        h.tick([make_alert(fired_at=h.clock.ms)], advance_ms=MINUTE)
        h.tick([])
        h.restart()
    assert len(h.remediation_calls()) == 2
    last = [r for r in h.audit() if r["step"] == "restart"][-1]
    assert last["decision"] == "skipped" and "max_per_day" in last["reason"]
    h.tick([make_alert(fired_at=h.clock.ms)], advance_ms=25 * 3_600_000)
    assert len(h.remediation_calls()) == 3


def test_a_step_interrupted_by_a_restart_escalates(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    release = threading.Event()

    class Blocking:
        def execute(self, action: RenderedAction, timeout_s: float, cap: int) -> ExecResult:
            release.wait(30)
            return ExecResult(0, b"late")

    h = Harness(tmp_path, [RUNBOOK], auto_policy, executors={"command": Blocking()})
    alert = make_alert()
    h.clock.ms += 1000
    h.manager.on_alerts([alert], h.clock.ms)
    assert h.decisions("restart") == ["started"]
    h.manager.close()  # the agent dies with the step in flight
    fresh = manager_for(h.config, StateDB(h.db_path), h.store, h.clock, {"command": Blocking()},
                        catalogue=load_catalogue([h.rb_dir]))
    release.set()
    events = fresh.on_alerts([alert], h.clock.ms + 1000)
    assert h.decisions("restart") == ["started", "escalated"]
    assert any("outcome is unknown" in e.text for e in events)
    fresh.close()


# -- approvals --------------------------------------------------------------------------------------


def test_approve_mode_runs_only_after_an_allowlisted_approval(tmp_path: Path,
                                                              auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], {**auto_policy, "mode": "approve"})
    alert = make_alert()
    h.tick([alert])
    h.tick([alert])
    assert h.remediation_calls() == []
    assert h.decisions("restart") == ["awaiting_approval"]
    refused = h.manager.approve(alert.fingerprint, "restart", "U-MALLORY")
    assert not refused.accepted
    assert not h.manager.approve(alert.fingerprint, "no-such-step", "U-ALICE").accepted
    assert not h.manager.approve("0000", "restart", "U-ALICE").accepted
    h.tick([alert])
    assert h.remediation_calls() == []
    assert h.manager.approve(alert.fingerprint, "restart", "U-ALICE").accepted
    events = h.tick([alert])
    assert len(h.remediation_calls()) == 1
    rows = [r for r in h.audit() if r["step"] == "restart"]
    assert [(r["decision"], r["actor"]) for r in rows] == [
        ("awaiting_approval", "agent"), ("approve_refused", "U-MALLORY"), ("approve_refused", "U-ALICE"),
        ("approved", "U-ALICE"),
        ("started", "U-ALICE"), ("ran", "U-ALICE")]
    assert any(e.title == "restart: approved by U-ALICE" for e in events)
    # approval does not bypass the cooldown
    assert h.manager.approve(alert.fingerprint, "restart", "U-ALICE").accepted
    h.tick([alert])
    assert len(h.remediation_calls()) == 1
    assert h.decisions("restart")[-1] == "skipped"


def test_auto_walk_waits_at_a_manual_step_until_approved(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [
        {"name": "first", "command": [PY, "-c", "print('first')"], "auto": True},
        {"name": "manual", "command": [PY, "-c", "print('manual')"]},
        {"name": "last", "command": [PY, "-c", "print('last')"], "auto": True},
    ]}
    h = Harness(tmp_path, [runbook], auto_policy)
    alert = make_alert()
    h.tick([alert])
    h.tick([alert])
    assert [c.argv[2] for c in h.remediation_calls()] == ["print('first')"]
    assert h.decisions("manual") == ["awaiting_approval"]
    assert h.manager.approve(alert.fingerprint, "manual", "U-ALICE").accepted
    h.tick([alert])
    h.tick([alert])
    assert [c.argv[2] for c in h.remediation_calls()] == ["print('first')", "print('manual')",
                                                           "print('last')"]


def test_skip_moves_the_walk_past_a_step(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    runbook = {**RUNBOOK, "remediate": [
        {"name": "manual", "command": [PY, "-c", "print('manual')"]},
        {"name": "last", "command": [PY, "-c", "print('last')"], "auto": True},
    ]}
    h = Harness(tmp_path, [runbook], auto_policy)
    alert = make_alert()
    h.tick([alert])
    assert not h.manager.skip(alert.fingerprint, "manual", "U-MALLORY").accepted
    assert h.manager.skip(alert.fingerprint, "manual", "U-ALICE", "not needed").accepted
    h.tick([alert])
    assert [c.argv[2] for c in h.remediation_calls()] == ["print('last')"]
    assert ("skipped", "U-ALICE") in [(r["decision"], r["actor"]) for r in h.audit() if r["step"] == "manual"]


# -- diagnostics ------------------------------------------------------------------------------------


def test_diagnostics_report_a_missing_tool_and_cap_output(tmp_path: Path) -> None:
    runbook = {**RUNBOOK, "diagnose": [
        {"name": "missing", "command": ["/nonexistent/tool", "-q"]},
        {"name": "chatty", "command": ["/bin/echo", "x" * 5000]},
        {"name": "forbidden", "command": ["/bin/rm", "-rf", "/nonexistent"]},
    ]}
    h = Harness(tmp_path, [runbook], {"diagnostics": {"commands": ["/bin/echo", "/nonexistent/tool"],
                                                      "max_output_bytes": 1000}})
    events = h.tick([make_alert()])
    by_title = {e.title: e for e in events if e.kind == "diagnostics"}
    assert "command not found" in by_title["missing"].text
    command_line, status, output, capped = by_title["chatty"].text.split("\n")
    assert command_line.startswith("$ /bin/echo xxx") and status.startswith("(exit 0 in ")
    assert output == "x" * 1000 and capped == "… (output capped)"
    assert "not in remediation.diagnostics.commands" in by_title["forbidden: skipped"].text
    assert h.decisions("missing") == ["diagnose_failed"]
    assert h.decisions("chatty") == ["diagnosed"]
    assert sorted(c.argv[0] for c in h.calls()) == ["/bin/echo", "/nonexistent/tool"]
    # diagnostics run once per episode, not every tick
    h.tick([make_alert()])
    assert len(h.calls()) == 2


def test_diagnostics_do_not_block_the_tick(tmp_path: Path) -> None:
    release = threading.Event()

    class Slow:
        def execute(self, action: RenderedAction, timeout_s: float, cap: int) -> ExecResult:
            release.wait(30)
            return ExecResult(0, b"slow output")

    h = Harness(tmp_path, [RUNBOOK], {}, executors={"command": Slow()})
    alert = make_alert()
    first = h.manager.on_alerts([alert], T0)
    assert [e.kind for e in first] == ["suggestion"]  # returned while the diagnostic still runs
    release.set()
    assert h.manager.wait_idle(30)
    later = h.manager.on_alerts([alert], T0 + 1000)
    assert [e.kind for e in later] == ["diagnostics"] and "slow output" in later[0].text


# -- secrets ----------------------------------------------------------------------------------------


def test_secrets_never_reach_audit_or_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             auto_policy: dict[str, Any]) -> None:
    secret = "tok-3f9a8b7c6d5e4f3a2b1c"
    monkeypatch.setenv("GATEWAY_TOKEN", secret)
    runbook = {**RUNBOOK, "remediate": [
        {"name": "leaky", "auto": True,
         "command": [PY, "-c", "import sys; print('token', sys.argv[1])", "{{ vars.token }}"]},
    ]}
    h = Harness(tmp_path, [runbook], {**auto_policy, "secret_vars": {"token": {"env": "GATEWAY_TOKEN"}}})
    events = h.tick([make_alert()])
    assert h.remediation_calls()[0].argv[-1] == secret  # it was used...
    dump = repr(h.audit()) + repr(events)
    assert secret not in dump  # ...but never recorded or posted
    assert "<redacted>" in dump


def test_secret_vars_come_from_files_and_an_unreadable_file_is_left_out(tmp_path: Path,
                                                                        auto_policy: dict[str, Any]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-from-a-file-0123\n", encoding="utf-8")
    token_file.chmod(0o600)
    secret_vars = {"token": {"file": str(token_file)}, "gone": {"file": str(tmp_path / "missing")}}
    h = Harness(tmp_path, [RUNBOOK], {**auto_policy, "secret_vars": secret_vars})
    assert h.manager.vars["token"] == "tok-from-a-file-0123"
    assert "gone" not in h.manager.vars


def test_registered_secrets_in_output_are_redacted(tmp_path: Path) -> None:
    register_secret("hunter2-hunter2")
    runbook = {**RUNBOOK, "diagnose": [{"name": "say", "command": ["/bin/echo", "pw=hunter2-hunter2"]}]}
    h = Harness(tmp_path, [runbook], {})
    events = h.tick([make_alert()])
    texts = " ".join(e.text for e in events)
    assert "hunter2-hunter2" not in texts and "pw=<redacted>" in texts


# -- integration with the real catalogue and config -------------------------------------------------


def test_manager_builds_from_config_alone(tmp_path: Path) -> None:
    config = load_config_text(yaml.safe_dump({"runbooks": {"paths": [str(tmp_path)]}}))
    (tmp_path / "engine-down.yaml").write_text(yaml.safe_dump(RUNBOOK))
    manager = manager_for(config, StateDB(tmp_path / "s.db"), Store())
    try:
        assert manager.catalogue.for_alert("EngineDown") is not None
        resolved = make_alert(state=AlertState.INACTIVE)
        assert manager.on_alerts([resolved], T0) == []
    finally:
        manager.close()


def test_the_suggestion_text_offers_approve_buttons_for_waiting_steps(tmp_path: Path,
                                                                      auto_policy: dict[str, Any]) -> None:
    """The Slack side finds approvable steps in the suggestion text (watchdog.notify.channels.slack.approvals)."""
    approvals = pytest.importorskip("watchdog.notify.channels.slack.approvals")
    runbook = {**RUNBOOK, "remediate": [
        {"name": "tell", "notify": "hello", "auto": True},
        {"name": "restart", "command": [PY, "-c", "print(1)"]},
    ]}
    h = Harness(tmp_path, [runbook], {**auto_policy, "mode": "approve"})
    events = h.tick([make_alert()])
    suggestion = next(e for e in events if e.kind == "suggestion")
    assert approvals.approvable_steps(suggestion) == ("restart",)  # a notify step needs no button
    h = Harness(tmp_path / "suggest", [runbook], {})
    events = h.tick([make_alert()])
    assert approvals.approvable_steps(next(e for e in events if e.kind == "suggestion")) == ()


def test_ended_episodes_are_pruned_but_the_audit_stays(tmp_path: Path, auto_policy: dict[str, Any]) -> None:
    h = Harness(tmp_path, [RUNBOOK], auto_policy)
    h.tick([make_alert()])
    h.tick([])
    assert len(h.db.query("SELECT * FROM runbook_episodes")) == 1
    h.tick([], advance_ms=8 * 86_400_000)
    assert h.db.query("SELECT * FROM runbook_episodes") == []
    assert "ran" in h.decisions("restart")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        h.db.execute("DELETE FROM runbook_audit")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        h.db.execute("UPDATE runbook_audit SET decision = 'ran'")


def test_gateway_call_and_unit_restart_through_the_manager(tmp_path: Path) -> None:
    """An http step against a real loopback server, a systemd step through the injected runner."""
    import json as json_module
    from http.server import BaseHTTPRequestHandler

    received: list[tuple[str, dict[str, Any]]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, json_module.loads(body)))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    systemctl: list[list[str]] = []

    def runner(argv: Any, timeout_s: float, cap: int) -> ExecResult:
        systemctl.append(list(argv))
        return ExecResult(0, b"")

    runbook = {**RUNBOOK, "diagnose": [], "remediate": [
        {"name": "shed-load", "auto": True, "cooldown": "10m",
         "http": {"method": "POST", "url": "{{ vars.gateway_shed_url }}",
                  "body": {"action": "shed", "node": "{{ node }}", "job": "{{ labels.job }}", "limit": 5}}},
        {"name": "restart-engine", "auto": True, "systemd": {"unit": "{{ config.engines[job].unit }}"}},
    ]}
    with serving(Gateway) as base:
        h = Harness(tmp_path, [runbook], {"mode": "auto", "vars": {"gateway_shed_url": f"{base}/admin/shed"},
                                          "allow": {"urls": [f"{base}/admin/"], "units": ["vllm*.service"]}})
        h.config["engines"] = [{"job": "vllm", "url": "http://127.0.0.1:8000/metrics", "unit": "vllm.service"}]
        h.manager.close()
        executors = {kind: rec for kind, rec in h.recorders.items() if kind != "systemd"}
        h.manager = manager_for(h.config, h.db, h.store, h.clock, executors,
                                catalogue=load_catalogue([h.rb_dir]), runner=runner)
        alert = make_alert()
        h.tick([alert])
        h.tick([alert])
    assert received == [("/admin/shed", {"action": "shed", "node": "node-1", "job": "vllm", "limit": 5})]
    assert systemctl == [["systemctl", "--no-ask-password", "restart", "vllm.service"]]
    assert h.decisions("shed-load") == ["started", "ran"] and h.decisions("restart-engine") == ["started", "ran"]
    shed = next(r for r in h.audit() if r["step"] == "shed-load" and r["decision"] == "ran")
    assert shed["exit_code"] == 0 and shed["action"].startswith(f"POST {base}/admin/shed ")


def test_simulated_diagnostics_say_what_would_run_and_run_nothing(tmp_path: Path) -> None:
    runbook = {**RUNBOOK, "diagnose": [{"name": "chatty", "command": ["/bin/echo", "hello"]}]}
    h = Harness(tmp_path, [runbook], {"diagnostics": {"commands": ["/bin/echo"], "simulated": True}})
    events = h.tick([make_alert()])
    [event] = [e for e in events if e.kind == "diagnostics"]
    assert event.title == "chatty: would run (simulated node)" and "/bin/echo hello" in event.text
    assert h.calls() == []
    assert h.decisions("chatty") == ["skipped"]

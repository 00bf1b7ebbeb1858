"""``inference-watchdog runbooks list | show | check`` through the real command line."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.support.alert_names import (
    GPU_PRESENCE_ALERTS,
    ISSUE_5_ALERTS,
    ISSUE_15_ALERTS,
    SERVING_VERDICT_ALERTS,
)
from watchdog.cli import main
from watchdog.infra.state import StateDB
from watchdog.runbooks.audit import AuditRecord, Decision, RunbookState

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def write_config(tmp: Path, remediation: dict[str, Any]) -> Path:
    config = {
        "state_dir": str(tmp / "state"),
        "node": "gpu-node-1",
        "engines": [{"job": "vllm", "url": "http://127.0.0.1:8000/metrics", "unit": "vllm.service"}],
        "runbooks": {"paths": [str(RUNBOOKS)]},
        "remediation": remediation,
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_runbook(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "runbooks", "list", "--path", str(RUNBOOKS))
    assert code == 0
    assert "gpu-xid" in out and "alerts: GpuXidFatal, GpuXidBurst" in out
    code, out, _ = run(capsys, "runbooks", "list", "--path", str(RUNBOOKS), "--json")
    rows = json.loads(out)
    assert len(rows) == len(list(RUNBOOKS.glob("*.yaml")))
    assert {"id", "title", "summary", "alerts", "source", "markdown"} <= set(rows[0])
    assert next(r for r in rows if r["id"] == "engine-slo-burn")["alerts"] == ["EngineTtftSloBurn",
                                                                             "EngineTpotSloBurn"]


def test_show_renders_markdown_and_the_policy_verdict(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, {"mode": "auto", "allow": {"units": ["vllm.service"]}})
    code, out, _ = run(capsys, "runbooks", "show", "engine-down", "--config", str(config),
                       "--alert", "EngineDown", "--labels", "job=vllm,instance=127.0.0.1:8000")
    assert code == 0
    assert out.startswith("# Inference engine down")
    assert "## Root causes" in out
    assert "1. restart-engine [systemd] systemctl restart vllm.service" in out
    assert '→ run: auto; guards and policy allow it (if requires holds: up{job="vllm"} == 0)' in out
    assert "diagnose unit-status: systemctl status --no-pager --lines=30 vllm.service" in out


def test_show_default_policy_only_suggests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, {})
    _, out, _ = run(capsys, "runbooks", "show", "gpu-xid", "--config", str(config), "--no-markdown",
                    "--labels", "gpu=2,xid=79,job=vllm", "--json")
    data = json.loads(out)
    steps = {s["step"]: s for s in data["suggestions"][0]["steps"]}
    assert {n: s["verdict"] for n, s in steps.items()} == {
        "tell-oncall": "suggested", "restart-engine": "suggested", "reset-gpu": "suggested",
        "drain-node": "skipped"}  # no gateway configured: remediation.vars.gateway_drain_url
    assert "vars.gateway_drain_url" in steps["drain-node"]["reason"]
    assert steps["reset-gpu"]["action"] == "nvidia-smi --gpu-reset -i 2"
    assert "not in remediation.allow.commands" in steps["reset-gpu"]["reason"]
    assert data["suggestions"][0]["source"] == "cli"


def test_show_refuses_a_hostile_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, {"mode": "auto", "allow": {"commands": ["nvidia-smi"]}})
    _, out, _ = run(capsys, "runbooks", "show", "gpu-xid", "--config", str(config), "--json",
                    "--labels", "gpu=--help; rm -rf /,xid=79")
    steps = {s["step"]: s for s in json.loads(out)["suggestions"][0]["steps"]}
    assert steps["reset-gpu"]["verdict"] == "refused" and steps["reset-gpu"]["action"] == ""
    assert "starts with '-'" in steps["reset-gpu"]["reason"]


def test_show_uses_live_alerts_and_history(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from watchdog.cli import runbooks_cmd
    from watchdog.model import Alert, AlertState
    from watchdog.notify.delivery.state_store import AlertStateStore
    from watchdog.rules.alerting import fingerprint

    config = write_config(tmp_path, {"mode": "auto", "allow": {"units": ["vllm.service"]}})
    db = StateDB(tmp_path / "state" / "state.db")
    labels = {"alertname": "EngineDown", "job": "vllm", "instance": "127.0.0.1:8000", "severity": "critical"}
    fp = fingerprint(labels)
    now_ms = int(time.time() * 1000)
    # the command reads the clock once; pinned, so a slow machine cannot turn "5m" into "5m1s"
    monkeypatch.setattr(runbooks_cmd, "time", SimpleNamespace(time=lambda: now_ms / 1000))
    alert = Alert("EngineDown", labels, {"summary": "down"}, AlertState.FIRING, 0.0, fp,
                  active_at_ms=now_ms - 60_000, fired_at_ms=now_ms - 60_000)
    store = AlertStateStore(db)
    with db.transaction() as cur:
        store.upsert_alert(cur, alert, now_ms)
    RunbookState(db).record(AuditRecord(now_ms - 5 * 60_000, fp, "EngineDown", "engine-down",
                                        "restart-engine", Decision.STARTED, action_key="systemd:restart:vllm.service"))
    db.close()
    code, out, _ = run(capsys, "runbooks", "show", "engine-down", "--config", str(config), "--no-markdown")
    assert code == 0
    assert "(live; policy mode=auto)" in out
    assert "→ skipped: cooldown: last ran 5m ago, cooldown 15m" in out, out


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_show_never_writes_the_agents_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A database the agent created before any component registered its tables: the command reads it
    through the components' stores, yet adds no schema row, no table, not a byte."""
    config = write_config(tmp_path, {"mode": "auto", "allow": {"units": ["vllm.service"]}})
    StateDB(tmp_path / "state" / "state.db").close()
    before = _files(tmp_path / "state")
    code, out, _ = run(capsys, "runbooks", "show", "engine-down", "--config", str(config), "--no-markdown")
    assert code == 0 and "none firing here" in out
    code, out, _ = run(capsys, "runbooks", "show", "engine-down", "--config", str(config), "--no-markdown",
                       "--alert", "EngineDown", "--labels", "job=vllm,instance=127.0.0.1:8000")
    assert code == 0 and "→ " in out
    after = _files(tmp_path / "state")
    # SQLite's own WAL index may appear (an empty log and its shared memory): the data is untouched
    assert after["state.db"] == before["state.db"] and after.get("state.db-wal", b"") == b""


def test_read_only_state_db_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert StateDB.read_only(path) is None  # absent: nothing created
    assert not path.exists()
    StateDB(path).close()
    db = StateDB.read_only(path)
    assert db is not None
    RunbookState(db)  # registering a component's schema is a no-op on a read-only handle
    assert [r["component"] for r in db.query("SELECT component FROM schema_versions")] == []
    with pytest.raises(sqlite3.OperationalError, match="read-only"):
        db.execute("INSERT INTO schema_versions VALUES ('x', 1)")
    db.close()


def test_show_unknown_id(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "runbooks", "show", "nope", "--path", str(RUNBOOKS))
    assert code == 1 and "no runbook or alert named 'nope'" in err


def test_check_accepts_the_shipped_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "runbooks", "check", str(RUNBOOKS))
    runbooks = len(list(RUNBOOKS.glob("*.yaml")))
    alerts = (len(ISSUE_5_ALERTS) + len(GPU_PRESENCE_ALERTS) + len(ISSUE_15_ALERTS) + len(SERVING_VERDICT_ALERTS)
              + 1)  # + WatchdogNotifierFailing
    assert code == 0 and f"{runbooks} runbooks ok, serving {alerts} alerts" in out


def test_check_rejects_a_shell_string_and_bad_promql(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = {"id": "bad", "title": "Bad", "alerts": ["X"],
           "remediate": [{"name": "shell", "command": "systemctl restart vllm && reboot"}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    code, _, err = run(capsys, "runbooks", "check", str(tmp_path))
    assert code == 1 and "remediate[0].command" in err and "never a shell string" in err
    pytest.importorskip("watchdog.promql")
    bad["remediate"] = [{"name": "restart", "systemd": {"unit": "vllm.service"}, "verify": "up{job= == 1"}]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    code, _, err = run(capsys, "runbooks", "check", str(tmp_path))
    assert code == 1 and "verify" in err


def test_show_accepts_an_alert_name_and_suggests_on_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "runbooks", "show", "GpuXidFatal", "--path", str(RUNBOOKS), "--no-markdown")
    assert code == 0 and out.startswith("== gpu-xid:")
    code, _, err = run(capsys, "runbooks", "show", "GpuXidFatl", "--path", str(RUNBOOKS))
    assert code == 1 and "no runbook or alert named 'GpuXidFatl' (did you mean GpuXidFatal?)" in err
    code, _, err = run(capsys, "runbooks", "show", "gpu-xdi", "--path", str(RUNBOOKS))
    assert code == 1 and "(did you mean gpu-xid?)" in err

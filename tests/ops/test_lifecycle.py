"""The daemon's life as systemd drives it, on a real ``python -m watchdog run`` subprocess.

- SIGHUP with a broken rule file: the process keeps running, logs the file and line, exports
  ``watchdog_config_reload_success 0`` and keeps evaluating the old rules; fixed file + SIGHUP → 1 and the
  new rule runs.
- SIGTERM during a tick: the tick finishes, alert state and the outbox are flushed, exit 0 well within the
  unit's ``TimeoutStopSec``.
- ``Type=notify``: against a real AF_UNIX datagram socket, READY=1 only after the first completed tick,
  WATCHDOG=1 after every tick, RELOADING=1 + MONOTONIC_USEC then READY=1 on SIGHUP, STOPPING=1 on SIGTERM.

No engines or GPUs are needed: NVML is absent here ("no data"), the kernel log is a file in tmp, and an
"engine" is a loopback HTTP server of the test where one is needed.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.support.polling import wait_until

from .conftest import REPO, AgentProcess, http_get, start_agent

UNIT = REPO / "systemd" / "inference-watchdog.service"
# A hang guard on the agent's start (a Python process importing the whole agent): seconds normally, but a
# CI machine running the suite on parallel workers can take far longer; waiting longer weakens nothing.
STARTUP_GUARD_SECONDS = 120
RECORD_RULES = """\
groups:
  - name: lifecycle
    rules:
      - record: test:ticks_doubled
        expr: watchdog_ticks_total * 2
"""
BROKEN_RULES = """\
groups:
  - name: lifecycle
    rules:
      - record: test:ticks_doubled
        expr: watchdog_ticks_total * (2
"""
FIXED_RULES = RECORD_RULES + """\
      - record: test:ticks_tripled
        expr: watchdog_ticks_total * 3
"""


def unit_setting(key: str) -> str:
    """A ``Key=value`` of the shipped unit file."""
    for line in UNIT.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    raise KeyError(key)


def write_config(tmp_path: Path, rules_text: str, extra: dict[str, object] | None = None) -> Path:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir(exist_ok=True)
    (rules_dir / "test.yaml").write_text(rules_text)
    (tmp_path / "kmsg.log").touch()
    config = {
        "node": "lifecycle-test",
        "tick_interval_seconds": 0.5,
        "state_dir": str(tmp_path / "state"),
        "rules": {"paths": [str(rules_dir / "*.yaml")]},
        "kmsg": {"source": str(tmp_path / "kmsg.log")},
        **(extra or {}),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def log_records(agent: AgentProcess) -> list[dict[str, object]]:
    """The agent's JSON log lines, parsed (other lines skipped)."""
    out: list[dict[str, object]] = []
    for line in agent.log_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def wait_ready(agent: AgentProcess) -> None:
    def ready() -> bool:
        assert agent.process.poll() is None, f"agent exited early:\n{agent.log_text()}"
        try:
            return http_get(agent.url + "/-/ready", timeout=2).status == 200
        except OSError:
            return False
    wait_until(ready, STARTUP_GUARD_SECONDS, "the agent to become ready")


# -- SIGHUP ----------------------------------------------------------------------------------------


def test_sighup_with_broken_rule_keeps_old_rules(tmp_path: Path, agent_runner: list[AgentProcess]) -> None:
    config = write_config(tmp_path, RECORD_RULES)
    agent = start_agent(config, tmp_path)
    agent_runner.append(agent)
    wait_ready(agent)
    wait_until(lambda: "test:ticks_doubled" in agent.metrics(), 10, "the recording rule's output")
    first = agent.metrics()
    assert first["watchdog_config_reload_success"] == 1.0

    (tmp_path / "rules" / "test.yaml").write_text(BROKEN_RULES)
    agent.signal(signal.SIGHUP)
    wait_until(lambda: agent.metrics().get("watchdog_config_reload_success") == 0.0, 10, "reload_success 0")
    assert agent.process.poll() is None
    errors = [r for r in log_records(agent) if r.get("level") == "error" and "reload failed" in str(r.get("msg"))]
    assert errors, agent.log_text()
    assert errors[0]["file"] == str(tmp_path / "rules" / "test.yaml")
    assert errors[0]["line"] == 5
    assert f"{tmp_path / 'rules' / 'test.yaml'}:5" in str(errors[0]["error"])
    # The old rule set still runs: its output keeps following the tick counter.
    broken_at = agent.metrics()["test:ticks_doubled"]
    wait_until(lambda: agent.metrics()["test:ticks_doubled"] > broken_at, 10, "the old rule to keep evaluating")
    after = agent.metrics()
    assert "test:ticks_tripled" not in after
    last_reload = "watchdog_config_last_reload_timestamp_seconds"
    assert after[last_reload] == first[last_reload]

    (tmp_path / "rules" / "test.yaml").write_text(FIXED_RULES)
    agent.signal(signal.SIGHUP)
    wait_until(lambda: agent.metrics().get("watchdog_config_reload_success") == 1.0, 10, "reload_success 1")
    wait_until(lambda: "test:ticks_tripled" in agent.metrics(), 10, "the new rule's output")
    final = agent.metrics()
    assert final[last_reload] > first[last_reload]
    assert final["test:ticks_doubled"] > broken_at

    agent.signal(signal.SIGTERM)
    assert agent.process.wait(timeout=30) == 0


def test_sighup_with_broken_config_names_file_and_line(tmp_path: Path, agent_runner: list[AgentProcess]) -> None:
    config = write_config(tmp_path, RECORD_RULES)
    agent = start_agent(config, tmp_path)
    agent_runner.append(agent)
    wait_ready(agent)
    config.write_text(config.read_text() + "tick_interval_seconds: -1\n")  # a duplicate key, invalid value
    agent.signal(signal.SIGHUP)
    wait_until(lambda: agent.metrics().get("watchdog_config_reload_success") == 0.0, 10, "reload_success 0")
    errors = [r for r in log_records(agent) if "reload failed" in str(r.get("msg"))]
    assert errors and str(errors[0]["error"]).startswith(str(config)), agent.log_text()
    assert "tick_interval_seconds" in str(errors[0]["error"])
    assert agent.process.poll() is None
    agent.signal(signal.SIGTERM)
    assert agent.process.wait(timeout=30) == 0


# -- SIGTERM ---------------------------------------------------------------------------------------


class SlowEngine:
    """A loopback "engine" whose first scrape blocks until :meth:`release` (a tick in progress)."""

    BODY = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"

    def __init__(self) -> None:
        self.request_seen = threading.Event()
        self.released = threading.Event()
        self.answered = threading.Event()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                first = not engine.request_seen.is_set()
                engine.request_seen.set()
                if first:
                    engine.released.wait(20)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(engine.BODY)))
                self.end_headers()
                self.wfile.write(engine.BODY)
                if first:
                    engine.answered.set()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_engine() -> Iterator[SlowEngine]:
    engine = SlowEngine()
    yield engine
    engine.close()


ALERT_ON_ENGINE = """\
groups:
  - name: lifecycle
    rules:
      - alert: LifecycleEngineUp
        expr: up{job="slow"} == 1
        labels: {severity: info}
        annotations: {summary: "engine up", description: "test alert", runbook: engine-down}
"""


def test_sigterm_finishes_the_tick_flushes_and_exits_0(tmp_path: Path, agent_runner: list[AgentProcess],
                                                        slow_engine: SlowEngine) -> None:
    config = write_config(tmp_path, ALERT_ON_ENGINE, {"engines": [
        {"job": "slow", "url": slow_engine.url, "scrape_timeout_seconds": 20, "kind": "vllm"}]})
    agent = start_agent(config, tmp_path)
    agent_runner.append(agent)
    assert slow_engine.request_seen.wait(STARTUP_GUARD_SECONDS), agent.log_text()  # the first scrape hangs...
    time.sleep(1.0)  # ...in the background: ticks go on meanwhile (the scrape does not stretch them)
    assert agent.process.poll() is None
    slow_engine.release()
    assert slow_engine.answered.wait(10)

    def fired() -> bool:
        return any(r.get("event") == "alert_firing" and r.get("alertname") == "LifecycleEngineUp"
                   for r in log_records(agent))

    wait_until(fired, 30, "the late scrape to be taken by a later tick and its alert to fire")
    agent.signal(signal.SIGTERM)
    stop_timeout = float(unit_setting("TimeoutStopSec").rstrip("s"))
    assert agent.process.wait(timeout=stop_timeout) == 0, agent.log_text()

    records = log_records(agent)
    messages = [str(r.get("msg")) for r in records]
    assert any(m.startswith("stopping") for m in messages)
    db = sqlite3.connect(tmp_path / "state" / "state.db")
    try:
        alerts = db.execute("SELECT alertname, state FROM notify_alerts").fetchall()
        open_rows = db.execute("SELECT COUNT(*) FROM notify_outbox WHERE status IN ('pending', 'sending')").fetchone()
        saved = db.execute("SELECT data FROM notify_rule_engine_state").fetchall()
    finally:
        db.close()
    assert ("LifecycleEngineUp", "firing") in alerts
    assert open_rows == (0,), "the outbox was not flushed before exit"
    assert saved and "LifecycleEngineUp" in saved[0][0]


# -- Type=notify -----------------------------------------------------------------------------------


class NotifySocket:
    """What systemd listens on: an AF_UNIX datagram socket; collects the messages it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[dict[str, str]] = []

    def drain(self) -> list[dict[str, str]]:
        """Receive everything queued; returns (and remembers) the new messages as ``KEY: VALUE`` dicts."""
        new: list[dict[str, str]] = []
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                break
            new.append(dict(line.split("=", 1) for line in data.decode().splitlines()))
        self.messages.extend(new)
        return new

    def first_keys(self) -> list[str]:
        """The first key of every message so far (READY, WATCHDOG, RELOADING, STOPPING, STATUS)."""
        return [next(iter(m)) for m in self.messages]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.close()


def test_type_notify_protocol(tmp_path: Path, agent_runner: list[AgentProcess], slow_engine: SlowEngine,
                              notify_socket: NotifySocket) -> None:
    config = write_config(tmp_path, RECORD_RULES, {"engines": [
        {"job": "slow", "url": slow_engine.url, "scrape_timeout_seconds": 20, "kind": "vllm"}]})
    agent = start_agent(config, tmp_path, env={"NOTIFY_SOCKET": str(notify_socket.path),
                                               "WATCHDOG_USEC": "30000000"})
    agent_runner.append(agent)
    # The first scrape hangs, in the background: the first tick completes anyway, so READY=1 comes (a
    # slow engine cannot hold start-up past TimeoutStartSec).
    assert slow_engine.request_seen.wait(STARTUP_GUARD_SECONDS), agent.log_text()
    assert http_get(agent.url + "/-/healthy").status == 200
    wait_until(lambda: notify_socket.drain() is not None and "READY" in notify_socket.first_keys(), 15, "READY=1")
    assert not slow_engine.answered.is_set()
    assert http_get(agent.url + "/-/ready").status == 200
    slow_engine.release()
    ready = next(m for m in notify_socket.messages if "READY" in m)
    assert ready["READY"] == "1"
    assert ready["STATUS"].startswith("tick ")
    assert int(ready["STATUS"].split()[1].rstrip(",")) >= 1  # sent after a completed tick

    # WATCHDOG=1 after every tick: as many pings as ticks.
    ticks = agent.metrics()["watchdog_ticks_total"]
    assert ticks >= 1

    def pings() -> int:
        notify_socket.drain()
        return sum(1 for m in notify_socket.messages if m.get("WATCHDOG") == "1")

    wait_until(lambda: pings() >= ticks + 2, 15, "WATCHDOG=1 pings following the ticks")
    assert pings() <= agent.metrics()["watchdog_ticks_total"]

    # Reload: RELOADING=1 with MONOTONIC_USEC, then READY=1 again.
    before_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    seen = len(notify_socket.messages)
    agent.signal(signal.SIGHUP)
    wait_until(lambda: notify_socket.drain() is not None
             and any("READY" in m for m in notify_socket.messages[seen:]), 15, "READY=1 after the reload")
    after_reload = [m for m in notify_socket.messages[seen:] if "WATCHDOG" not in m]
    assert after_reload[0]["RELOADING"] == "1"
    assert before_usec <= int(after_reload[0]["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert after_reload[1]["READY"] == "1"
    assert after_reload[1]["STATUS"].startswith("reloaded;")

    # Stop: STOPPING=1, exit 0.
    seen = len(notify_socket.messages)
    agent.signal(signal.SIGTERM)
    assert agent.process.wait(timeout=30) == 0
    notify_socket.drain()
    assert [m for m in notify_socket.messages[seen:] if "WATCHDOG" not in m] == [{"STOPPING": "1"}]


# -- the exporter's settings follow the same lifecycle -----------------------------------------------


def test_sighup_rereads_the_exporter_password(tmp_path: Path, agent_runner: list[AgentProcess]) -> None:
    secret = tmp_path / "exporter-password"
    secret.write_text("first-password-1\n")
    secret.chmod(0o600)
    config = write_config(tmp_path, RECORD_RULES, {"exporter": {
        "basic_auth": {"username": "prom", "password_file": str(secret)}}})
    agent = start_agent(config, tmp_path)
    agent_runner.append(agent)
    wait_ready(agent)
    assert http_get(agent.url + "/metrics").status == 401
    assert http_get(agent.url + "/metrics", user="prom", password="first-password-1").status == 200
    secret.write_text("second-password-2\n")
    agent.signal(signal.SIGHUP)

    def rotated() -> bool:
        return http_get(agent.url + "/metrics", user="prom", password="second-password-2").status == 200

    wait_until(rotated, 10, "the new password to be accepted")
    assert http_get(agent.url + "/metrics", user="prom", password="first-password-1").status == 401
    assert "first-password-1" not in agent.log_text() and "second-password-2" not in agent.log_text()
    agent.signal(signal.SIGTERM)
    assert agent.process.wait(timeout=30) == 0


def test_unusable_exporter_section_fails_the_start_cleanly(tmp_path: Path, agent_runner: list[AgentProcess]) -> None:
    config = write_config(tmp_path, RECORD_RULES, {"exporter": {
        "tls": {"cert_file": str(tmp_path / "missing.crt"), "key_file": str(tmp_path / "missing.key")}}})
    agent = start_agent(config, tmp_path)
    agent_runner.append(agent)
    assert agent.process.wait(timeout=30) == 2
    # Refused by the start-up preflight (the same check `config check` runs), before anything starts.
    errors = [line for line in agent.log_text().splitlines() if line.startswith("error:")]
    assert errors and "exporter" in errors[0] and "missing.crt" in errors[0], agent.log_text()
    assert "Traceback" not in agent.log_text()

"""Executors against real subprocesses, a real loopback HTTP server and a real process to signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from tests.loopback import serving
from watchdog.runbooks.executors import (
    CommandExecutor,
    ExecResult,
    HttpExecutor,
    NotifyExecutor,
    SignalExecutor,
    SystemdExecutor,
    run_argv,
)
from watchdog.runbooks.steps import RenderedAction

PY = sys.executable


def test_echo_runs_as_argv_without_a_shell() -> None:
    result = CommandExecutor().execute(RenderedAction("command", argv=("/bin/echo", "$(reboot)", "a;b")),
                                       5, 1024)
    assert result.ok and result.output == b"$(reboot) a;b\n"


def test_exit_code_and_stderr_are_captured() -> None:
    code = "import sys; sys.stderr.write('boom'); sys.exit(3)"
    result = run_argv([PY, "-c", code], 10, 1024)
    assert result.exit_code == 3 and result.output == b"boom" and not result.ok


def test_output_is_capped_while_reading() -> None:
    result = run_argv([PY, "-c", "import sys; sys.stdout.write('x' * 300000)"], 10, 1000)
    assert result.ok and len(result.output) == 1000 and result.truncated


def test_a_command_past_its_timeout_is_killed_with_its_children() -> None:
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print('started', flush=True); time.sleep(60)")
    result = run_argv([PY, "-c", code], 1.0, 1024)
    assert result.exit_code is None and "timed out" in result.error
    assert result.output == b"started\n"


def test_a_missing_tool_is_reported_not_raised() -> None:
    result = run_argv(["/nonexistent/nvidia-smi", "-q"], 5, 1024)
    assert result.exit_code is None and "command not found" in result.error


def test_children_do_not_inherit_the_agents_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-very-secret")
    result = run_argv([PY, "-c", "import os; print(sorted(os.environ))"], 10, 4096)
    assert b"SLACK_BOT_TOKEN" not in result.output and b"PATH" in result.output


def test_systemd_builds_argv_and_uses_the_injected_runner() -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str], timeout: float, cap: int) -> ExecResult:
        calls.append(list(argv))
        return ExecResult(0, b"")

    result = SystemdExecutor(runner).execute(RenderedAction("systemd", unit="vllm.service", verb="restart"),
                                             90, 1024)
    assert result.ok
    assert calls == [["systemctl", "--no-ask-password", "restart", "vllm.service"]]


def test_signal_reaches_the_units_main_process() -> None:
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        def runner(argv: Sequence[str], timeout: float, cap: int) -> ExecResult:
            assert argv[:2] == ["systemctl", "show"] and argv[-1] == "vllm.service"
            return ExecResult(0, f"{child.pid}\n".encode())

        result = SignalExecutor(runner).execute(
            RenderedAction("signal", unit="vllm.service", signal="SIGTERM"), 5, 1024)
        assert result.ok, result
        assert child.wait(timeout=30) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# "self" is this process, whose pid differs per xdist worker: a fixed id keeps the collections identical
@pytest.mark.parametrize("main_pid", ["0", "1", pytest.param(str(os.getpid()), id="self"), "abc"])
def test_signal_refuses_init_self_and_garbage(main_pid: str) -> None:
    sent: list[tuple[int, int]] = []

    def runner(argv: Sequence[str], timeout: float, cap: int) -> ExecResult:
        return ExecResult(0, main_pid.encode())

    result = SignalExecutor(runner, kill=lambda pid, sig: sent.append((pid, sig))).execute(
        RenderedAction("signal", unit="vllm.service", signal="SIGKILL"), 5, 1024)
    assert result.exit_code is None and sent == []


def test_notify_executes_nothing() -> None:
    assert NotifyExecutor().execute(RenderedAction("notify", text="hello"), 1, 1024).output == b"hello"


# -- http -------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        _Handler.received.append({"method": self.command, "path": self.path, "body": body,
                                  "auth": self.headers.get("Authorization")})
        if self.path.startswith("/fail"):
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"overloaded")
        elif self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
        else:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok " * 10)

    do_GET = do_POST = _reply

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.received = []
    with serving(_Handler) as base:
        yield base


def test_http_post_sends_json_body_and_headers(server: str) -> None:
    action = RenderedAction("http", method="POST", url=f"{server}/shed", body=b'{"node": "n1"}',
                            headers=(("Authorization", "Bearer t0k3n"),))
    result = HttpExecutor().execute(action, 5, 8)
    assert result.ok and result.output == b"ok ok ok" and result.truncated
    assert _Handler.received == [{"method": "POST", "path": "/shed", "body": b'{"node": "n1"}',
                                  "auth": "Bearer t0k3n"}]
    assert json.loads(_Handler.received[0]["body"]) == {"node": "n1"}


def test_http_error_status_is_the_exit_code(server: str) -> None:
    result = HttpExecutor().execute(RenderedAction("http", method="GET", url=f"{server}/fail"), 5, 1024)
    assert result.exit_code == 503 and result.output == b"overloaded" and "HTTP 503" in result.error


def test_http_redirects_are_not_followed(server: str) -> None:
    result = HttpExecutor().execute(RenderedAction("http", method="POST", url=f"{server}/redirect"), 5, 1024)
    assert result.exit_code == 302
    assert [r["path"] for r in _Handler.received] == ["/redirect"]


def test_http_connection_refused_is_reported() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    action = RenderedAction("http", method="GET", url=f"http://127.0.0.1:{port}/")
    result = HttpExecutor().execute(action, 5, 10)
    assert result.exit_code is None and "failed" in result.error

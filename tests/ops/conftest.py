"""Shared helpers of the operations tests: certificates, HTTP fetches, free ports, agent subprocesses."""

from __future__ import annotations

import base64
import contextlib
import gzip
import os
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
SYSTEMD_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")


@dataclass(frozen=True)
class Cert:
    """A self-signed certificate for 127.0.0.1/localhost and its key (PEM files)."""

    cert: Path
    key: Path


def make_cert(directory: Path, name: str = "server") -> Cert:
    """A fresh self-signed EC certificate via ``openssl req`` (the `cryptography` package is not a dependency)."""
    if shutil.which("openssl") is None:
        pytest.skip("neither the cryptography package nor the openssl command is available to make a certificate")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return Cert(cert, key)


@dataclass
class Response:
    """What an HTTP GET returned."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        """The body as text (gunzipped when the server compressed it)."""
        data = gzip.decompress(self.body) if self.headers.get("content-encoding") == "gzip" else self.body
        return data.decode("utf-8")


def http_get(url: str, *, user: str = "", password: str = "", cafile: Path | None = None,
             client_cert: Cert | None = None, headers: dict[str, str] | None = None,
             timeout: float = 10.0) -> Response:
    """GET ``url`` (HTTP or HTTPS); 4xx/5xx are returned, not raised."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    if user:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        if client_cert is not None:
            context.load_cert_chain(str(client_cert.cert), str(client_cert.key))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Response(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → ``{'name{labels}': value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


@dataclass
class AgentProcess:
    """``python -m watchdog run`` as a real subprocess, with its stderr (JSON log lines) in a file."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """The exporter's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        """Everything the agent logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def metrics(self) -> dict[str, float]:
        """One scrape of ``/metrics``."""
        return parse_metrics(http_get(self.url + "/metrics").text)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the agent."""
        self.process.send_signal(signum)


def start_agent(config_path: Path, tmp_path: Path, env: dict[str, str] | None = None) -> AgentProcess:
    """Start the agent on a free loopback port; the caller stops it (see the ``agent_runner`` fixture)."""
    port = free_port()
    log_path = tmp_path / "agent.log"
    log_file = log_path.open("wb")
    inherited = {k: v for k, v in os.environ.items() if k not in SYSTEMD_ENV}  # the test runner's own systemd
    full_env = {**inherited, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        [PYTHON, "-m", "watchdog", "run", "--config", str(config_path), "--listen", f"127.0.0.1:{port}"],
        cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, env=full_env,
    )
    log_file.close()
    return AgentProcess(process, port, log_path)


@pytest.fixture
def agent_runner(tmp_path: Path) -> Iterator[list[AgentProcess]]:
    """A list to put started agents in; each is killed at teardown if the test left it running."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        if agent.process.poll() is None:
            agent.process.send_signal(signal.SIGKILL)
            agent.process.wait(timeout=10)


@dataclass(frozen=True)
class DemoProcess:
    """``inference-watchdog demo`` running as a subprocess on loopback."""

    process: subprocess.Popen[bytes]
    port: int
    url: str
    log: Path


@contextlib.contextmanager
def running_demo(workdir: Path, scenario: Path, duration_seconds: int) -> Iterator[DemoProcess]:
    """The demo of ``scenario`` on a free port, yielded once its ``/-/ready`` answers 200 (fails with the
    tail of its log if it exits first); on exit it is stopped with its process group, so with any engine
    simulator it could not stop itself. Its output goes to ``workdir/demo.log``."""
    from tests.support.polling import wait_until
    from tests.support.processes import stop_process

    port = free_port()
    log = workdir / "demo.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PYTHON, "-m", "watchdog", "demo", "--scenario", str(scenario), "--listen", f"127.0.0.1:{port}",
             "--duration", str(duration_seconds)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    demo = DemoProcess(process, port, f"http://127.0.0.1:{port}", log)
    try:
        def ready() -> bool:
            assert process.poll() is None, f"the demo exited:\n{log.read_text()[-3000:]}"
            try:
                return http_get(demo.url + "/-/ready", timeout=2).status == 200
            except OSError:
                return False

        wait_until(ready, 30, "the demo to become ready")
        yield demo
    finally:
        stop_process(process, group=True)

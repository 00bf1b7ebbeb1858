"""A real HAProxy (Debian's /usr/sbin/haproxy) in front of test engines, steered by the agent.

:class:`HAProxy` writes a config with one HTTP frontend on a loopback port and one backend whose servers
are the given engines, each checked by the agent: HAProxy's agent-check (``agent-send "JOB\\n"`` to the
agent-check port) and/or ``option httpchk`` against the agent's ``/api/v1/engines/<job>/health``, every
``inter`` (1 s by default, ``fall 1 rise 1``). :meth:`HAProxy.servers` reads each server's state, weight
and request count from the stats socket (``show stat``), which is how the tests see what HAProxy decided.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.processes import stop_process

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)

needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (scripts/test and .ci/run install Debian's haproxy)")
"""Mark for the tests that need a real HAProxy."""


@dataclass(frozen=True)
class Engine:
    """One server of the backend: the engine's job (also the HAProxy server name) and its OpenAI port."""

    job: str
    port: int


@dataclass(frozen=True)
class ServerState:
    """One server as HAProxy's stats show it."""

    status: str
    """``UP``, ``DOWN``, ``DRAIN``, ``MAINT`` (``(agent)`` when the agent set it), ``no check`` (up, with no
    health check of HAProxy's own) ..."""
    weight: int
    """The effective weight (0 while drained)."""
    sessions_total: int
    """Requests (sessions) HAProxy has sent it since start."""
    sessions_now: int
    retries: int
    """Connection retries to it (``wretr``): a request whose connection attempt failed is retried, and
    each attempt counts as a session, so a request sent before a server went out can still add to
    ``sessions_total`` afterwards."""
    agent_status: str
    """The last agent check's result (``L7OK``, ``L4CON`` ...)."""
    check_status: str

    @property
    def requests(self) -> int:
        """Requests HAProxy sent it: its sessions less the connection retries of earlier ones."""
        return self.sessions_total - self.retries

    @property
    def takes_new_requests(self) -> bool:
        """Whether HAProxy would send it a new request."""
        return (self.status.startswith("UP") or self.status == "no check") and self.weight > 0


class HAProxy:
    """HAProxy with its config, started by :meth:`start` and stopped by :meth:`stop` (a context manager).

    ``agent_check_port``: the agent-check port the servers' agent checks use (None: no agent check).
    ``health_port``: the exporter port serving ``/api/v1/engines/<job>/health`` for ``option httpchk``
    (None: a plain TCP check of the engine itself, unless ``own_check`` is False: then HAProxy runs no
    check of its own and only the agent moves the servers, so a measurement sees the agent's effect
    alone)."""

    def __init__(self, workdir: Path, engines: list[Engine], agent_check_port: int | None = None,
                 health_port: int | None = None, inter: str = "1s", balance: str = "roundrobin",
                 own_check: bool = True) -> None:
        assert HAPROXY is not None, "haproxy is not installed"
        self.workdir = workdir
        self.engines = engines
        self.agent_check_port = agent_check_port
        self.health_port = health_port
        self.inter = inter
        self.balance = balance
        self.own_check = own_check or health_port is not None
        self.socket_path = workdir / "haproxy.sock"
        self.config_path = workdir / "haproxy.cfg"
        self.log_path = workdir / "haproxy.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        """The HAProxy config text."""
        lines = [
            "global",
            f"    stats socket {self.socket_path} mode 600 level admin",
            "    stats timeout 10s",
            "",
            "defaults",
            "    mode http",
            "    timeout connect 2s",
            "    timeout client 30s",
            "    timeout server 30s",
            "    timeout queue 5s",
            "    timeout check 2s",
            "",
            "frontend llm",
            f"    bind 127.0.0.1:{self.port}",
            "    default_backend engines",
            "",
            "backend engines",
            f"    balance {self.balance}",
            "    option redispatch",  # a request whose connection to a server fails goes to another
        ]
        if self.health_port is not None:
            lines += ["    option httpchk",
                      "    http-check send meth GET uri-lf /api/v1/engines/%[srv_name]/health"]
        for engine in self.engines:
            server = f"    server {engine.job} 127.0.0.1:{engine.port} weight 100"
            if self.own_check:
                server += f" check inter {self.inter} fall 1 rise 1"
            if self.health_port is not None:
                server += f" addr 127.0.0.1 port {self.health_port}"
            if self.agent_check_port is not None:
                server += (f" agent-check agent-addr 127.0.0.1 agent-port {self.agent_check_port}"
                           f" agent-inter {self.inter} agent-send \"{engine.job}\\n\"")
            lines.append(server)
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 15.0) -> HAProxy:
        """Write the config, start HAProxy in the foreground and wait until it serves its stats socket."""
        self.port = free_port()
        self.config_path.write_text(self.config())
        check = subprocess.run([str(HAPROXY), "-c", "-f", str(self.config_path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        log = self.log_path.open("wb")
        self._process = subprocess.Popen([str(HAPROXY), "-db", "-f", str(self.config_path)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process.poll() is None, self.log_path.read_text()
            with contextlib.suppress(OSError):
                if self.command("show info").startswith("Name: HAProxy"):
                    return self
            time.sleep(0.05)
        raise AssertionError(f"haproxy did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        """Stop HAProxy (safe to call twice)."""
        if self._process is not None:
            stop_process(self._process, timeout=5, group=True)
            self._process = None

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The frontend's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def command(self, text: str) -> str:
        """One command on the stats socket; its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.socket_path))
            sock.sendall(text.encode() + b"\n")
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
        return out.decode()

    def servers(self) -> dict[str, ServerState]:
        """Each server of the backend as ``show stat`` reports it."""
        text = self.command("show stat").lstrip("# ")
        out = {}
        for row in csv.DictReader(io.StringIO(text)):
            if row["pxname"] != "engines" or row["svname"] in ("FRONTEND", "BACKEND"):
                continue
            out[row["svname"]] = ServerState(
                status=row["status"], weight=int(row["weight"] or 0), sessions_total=int(row["stot"] or 0),
                sessions_now=int(row["scur"] or 0), retries=int(row["wretr"] or 0),
                agent_status=row.get("agent_status", ""),
                check_status=row.get("check_status", ""))
        return out

    def wait_for(self, predicate: object, timeout: float, what: str) -> float:
        """Poll :meth:`servers` every 50 ms until ``predicate(servers)`` holds; returns the seconds it took
        (AssertionError naming ``what`` and the last states past ``timeout``)."""
        assert callable(predicate)
        started = time.monotonic()
        last: dict[str, ServerState] = {}
        while time.monotonic() - started < timeout:
            last = self.servers()
            if predicate(last):
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"haproxy: {what} not within {timeout} s; servers: {last}")

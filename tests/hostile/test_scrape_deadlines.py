"""Item 2: a scrape's deadline covers the whole exchange, and a slow engine cannot stretch the tick."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.hostile.conftest import QuietServer, drip, hostile_agent
from tests.loopback import serving
from watchdog.collectors.engines import ScrapeError, fetch
from watchdog.model import AlertState

PAGE = b"vllm:num_requests_running 1\n"


class DripEngine(BaseHTTPRequestHandler):
    """``/drip-headers``: one byte of the status line and headers every 0.5 s; ``/slow``: 1.2 s late."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(1.2)
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)
            return
        head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Drip-%d: x\r\n" % i for i in range(50))
        drip(self.wfile, head)


def test_a_header_drip_ends_at_the_deadline() -> None:
    with serving(DripEngine, QuietServer) as base:
        started = time.monotonic()
        with pytest.raises(ScrapeError, match="timed out"):
            fetch(base + "/drip-headers", 1.0, 1 << 20)
        assert time.monotonic() - started < 1.8


def test_a_drip_engine_is_up_0_and_engine_down_fires(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    with serving(DripEngine, QuietServer) as base:
        agent = hostile_agent(tmp_path, clock, {
            "engines": [{"url": base + "/drip-headers", "job": "drip", "scrape_timeout_seconds": 2.5}],
        })
        try:
            states: dict[str, AlertState] = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                started = time.monotonic()
                alerts = agent.tick()
                assert time.monotonic() - started < 2.0  # not the 3.5 s a waited-for scrape would take
                states.update({a.name: a.state for a in alerts})
                if states.get("EngineDown") is AlertState.FIRING:
                    break
                clock[0] += 16
                time.sleep(0.3)
            (up,) = agent.store.select([("__name__", "=", "up")])
            assert up.latest() is not None and up.latest()[1] == 0.0  # type: ignore[index]
            assert states.get("EngineDown") is AlertState.FIRING
        finally:
            agent.close()


def test_a_slow_engine_does_not_stretch_the_tick_and_its_scrape_is_used_later(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    with serving(DripEngine, QuietServer) as base:
        agent = hostile_agent(tmp_path, clock, {
            "engines": [{"url": base + "/slow", "job": "slow", "scrape_timeout_seconds": 3.0}],
        })
        try:
            started = time.monotonic()
            agent.tick()
            assert time.monotonic() - started < 1.2  # the engine answers after 1.2 s
            assert not list(agent.store.select([("__name__", "=", "up")]))
            time.sleep(1.0)
            clock[0] += 1
            agent.tick()
            (up,) = agent.store.select([("__name__", "=", "up")])
            assert up.latest() is not None and up.latest()[1] == 1.0  # type: ignore[index]
        finally:
            agent.close()

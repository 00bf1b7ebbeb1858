"""Item 3: the exporter cannot be used to blind the agent: idle and slowloris connections are capped
and cut, and a wrong-password flood is refused before the expensive hash."""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
import urllib.request
from pathlib import Path

from tests.support.polling import wait_until
from watchdog.exporter.security import BasicAuth, HashBudget
from watchdog.exporter.server import exporter_for_store
from watchdog.store import Store


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _connect(port: int, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def test_a_thousand_idle_connections_cannot_exhaust_descriptors_or_block_scrapes() -> None:
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True)
    server.max_connections_per_client = 16
    server.request_deadline_seconds = 1.0
    server.start()
    attackers: list[socket.socket] = []
    try:
        before = _open_fds()
        for batch in range(6):  # 300 from one address (a thousand would exceed this test's own fd limit)
            attackers.extend(_connect(server.port, "127.0.0.2") for _ in range(50))
            wait_until(lambda: server.stats.connections_rejected >= 50 * (batch + 1) - 16, 10,  # noqa: B023
                       "the excess connections closed at accept")
        server_side = _open_fds() - before - len(attackers)
        assert server_side <= 16 + 4  # only the admitted ones hold a descriptor on the agent's side
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:  # a scraper still gets in
            assert response.status == 200
    finally:
        for sock in attackers:
            sock.close()
        server.stop()


def test_a_slowloris_request_is_cut_at_the_deadline() -> None:
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True)
    server.request_deadline_seconds = 1.0
    server.start()
    try:
        sock = _connect(server.port, "127.0.0.1")
        sock.settimeout(0.2)
        started = time.monotonic()
        cut = False
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" * 10:
            try:
                sock.send(bytes([byte]))
                if sock.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                continue
            except OSError:
                cut = True
                break
        assert cut and time.monotonic() - started < 5
        sock.close()
    finally:
        server.stop()


def test_pending_requests_share_the_one_deadline_thread() -> None:
    """A request's deadline is kept by the process's shared deadline thread, not a timer thread each."""
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True)
    server.request_deadline_seconds = 1.0
    server.start()
    socks = [_connect(server.port, "127.0.0.1") for _ in range(4)]
    try:
        for sock in socks:
            sock.send(b"GET /metrics HTTP/1.1\r\n")  # headers never finish
        wait_until(lambda: any(t.name == "http-deadlines" for t in threading.enumerate()), 5,
                   "the shared deadline thread started")
        assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
        for sock in socks:  # and the deadline still cuts each of them
            sock.settimeout(5)
            assert sock.recv(1) == b""
    finally:
        for sock in socks:
            sock.close()
        server.stop()


def test_wrong_password_floods_are_refused_before_the_hash(tmp_path: Path) -> None:
    auth = BasicAuth.from_password("prometheus", "s3cret")
    # The budget's clock stands still during the flood: exactly its burst of 20 derivations runs, however
    # slowly a loaded machine gets through the loop (on the real clock a slow loop refilled the bucket).
    now = [0.0]
    auth.budget = HashBudget(clock=lambda: now[0])
    wrong = "Basic " + base64.b64encode(b"prometheus:guess").decode()
    for _ in range(2000):
        assert not auth.check(wrong)
    assert auth.budget.refused == 2000 - 20  # refused before the hash: no PBKDF2 derivation for these
    now[0] += 0.2  # the bucket refills: the right password gets through, and is cached from then on
    right = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
    assert auth.check(right)
    for _ in range(100):
        assert auth.check(right)

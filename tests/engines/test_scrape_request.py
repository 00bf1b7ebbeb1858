"""The scrape's request on the wire: a ``GET`` of the configured path with the scrape's headers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from watchdog.collectors.engines import ACCEPT, USER_AGENT, fetch


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that records each request's head and answers ``200`` with a one-line page."""
    heads: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5.0)
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                heads.append(head)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nm 1\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], heads
    done.set()
    thread.join(5.0)
    server.close()


def test_each_scrape_sends_a_get_with_the_scrape_headers(recorder: tuple[int, list[bytes]]) -> None:
    port, heads = recorder
    for timeout, path in ((2.5, "/metrics"), (2.5, "/metrics"), (10.0, "/metrics"), (2.5, "/m?a=1&b=2")):
        assert fetch(f"http://127.0.0.1:{port}{path}", timeout, 1 << 20) == "m 1\n"
        request_line, *lines = heads[-1].decode("ascii").split("\r\n")
        assert request_line == f"GET {path} HTTP/1.1"
        assert dict(line.split(": ", 1) for line in lines if line) == {
            "Host": f"127.0.0.1:{port}", "Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": USER_AGENT,
            "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout:g}"}
    assert b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n" in heads[2]
    assert len(heads) == 4

"""The scrape's request on the wire: the bytes ``http.client`` writes for it, though built once per URL."""

from __future__ import annotations

import http.client
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


def written_by_http_client(port: int, path: str, timeout: str) -> bytes:
    """The request ``http.client`` writes for a scrape (what every scrape sent before it was kept)."""
    sent: list[bytes] = []
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.send = sent.append  # type: ignore[method-assign]
    conn.request("GET", path, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": USER_AGENT,
                                       "X-Prometheus-Scrape-Timeout-Seconds": timeout})
    return b"".join(sent)


def test_each_scrape_sends_the_request_http_client_writes(recorder: tuple[int, list[bytes]]) -> None:
    port, heads = recorder
    for timeout, path in ((2.5, "/metrics"), (2.5, "/metrics"), (10.0, "/metrics"), (2.5, "/m?a=1&b=2")):
        assert fetch(f"http://127.0.0.1:{port}{path}", timeout, 1 << 20) == "m 1\n"
        assert heads[-1] == written_by_http_client(port, path, f"{timeout:g}")
    assert b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n" in heads[2]
    assert heads[0].startswith(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)
    assert len(heads) == 4

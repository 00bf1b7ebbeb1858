"""The exporter's HTTP server: ``/metrics`` (Prometheus text), ``/-/healthy``, ``/-/ready``.

Contract: serving never blocks the evaluation loop (its own threads); ``/-/ready`` answers 200 only
after the first completed tick (readiness is a callable injected by the agent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)


def parse_listen(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:9847``) to a (host, port) tuple; raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class ExporterServer:
    """A threaded HTTP server exposing ``registry``; ``start()`` / ``stop()``; ``port`` after start."""

    def __init__(self, registry: CollectorRegistry, address: str, ready: Callable[[], bool]) -> None:
        self.registry = registry
        self.host, self.port = parse_listen(address)
        self.ready = ready
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(exporter.registry), CONTENT_TYPE_LATEST)
                elif path == "/-/healthy":
                    self._send(200, b"inference-watchdog is healthy.\n", "text/plain")
                elif path == "/-/ready":
                    if exporter.ready():
                        self._send(200, b"inference-watchdog is ready.\n", "text/plain")
                    else:
                        self._send(503, b"inference-watchdog is starting.\n", "text/plain")
                elif path == "/":
                    body = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
                    self._send(200, body, "text/html")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("exporter request: " + format, *args)

        return Handler

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises OSError when the address is taken."""
        self._server = ThreadingHTTPServer((self.host, self.port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="exporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

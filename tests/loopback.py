"""A real HTTP server on loopback for tests: one place for the thread, port and shutdown boilerplate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], server_class: type[HTTPServer] = HTTPServer) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (ephemeral port) from a daemon thread; yields ``http://127.0.0.1:<port>``.

    On exit the server is shut down and its socket closed.
    """
    httpd = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def page_handler(body: bytes, content_type: str = "text/plain; version=0.0.4") -> type[BaseHTTPRequestHandler]:
    """A handler answering every GET with ``body`` (a fixed ``/metrics`` page), without access logs."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Page

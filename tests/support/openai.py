"""A streaming OpenAI-compatible completions server on loopback, for canary-probe tests.

It streams ``tokens`` (one server-sent event per token, ``TOKEN_GAP_SECONDS`` apart), or, when ``wedged``,
accepts and reads the request and never answers (until the test ends). Tests change both while it runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback import serving

TOKEN_GAP_SECONDS = 0.02


class OpenAIServer:
    """What the fake server answers; tests change it while it runs."""

    def __init__(self) -> None:
        self.tokens = [" Paris", ".", " It", " is"]
        self.wedged = False
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                if server.wedged:  # accept, read the request, never answer (until the test ends)
                    server.release.wait(30)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for token in server.tokens[: body["max_tokens"]]:
                    time.sleep(TOKEN_GAP_SECONDS)
                    event = {"choices": [{"index": 0, "text": token}], "model": body["model"]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler


@contextmanager
def openai_server() -> Iterator[tuple[OpenAIServer, str]]:
    fake = OpenAIServer()
    with serving(fake.handler(), ThreadingHTTPServer) as url:
        try:
            yield fake, url
        finally:
            fake.release.set()

"""The demo's simulated engine says nothing when a client hangs up mid-answer (a load test cut at its
timeout), and keeps serving."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
import urllib.request

from watchdog.demo.engine_sim import EngineServer
from watchdog.demo.scenario import parse_scenario


def test_a_client_that_hangs_up_leaves_no_traceback() -> None:
    scenario = parse_scenario({
        "name": "quiet", "description": "d", "interval": "1s", "duration": "60s",
        "engines": [{"job": "sim", "model": "m", "gpus": [0], "knobs": {"ttft": "0.05", "tpot": "0.05"}}],
    }, "test")
    server = EngineServer(scenario, scenario.engines[0], start=time.time())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:  # hangs up mid-request
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            for _ in range(3):
                body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 200, "stream": True}).encode()
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                    sock.recv(64)  # the first bytes of the stream, then hang up
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as answer:
                assert answer.status == 200  # still serving
            time.sleep(0.5)  # let the abandoned streams hit the closed sockets
    finally:
        server.stop()
    assert "Traceback" not in stderr.getvalue(), stderr.getvalue()

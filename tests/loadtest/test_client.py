"""The streaming OpenAI client against real loopback HTTP servers that stream SSE with known timing."""

from __future__ import annotations

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from tests.loopback import serving
from tests.support.ports import free_port
from tests.support.quiet import require_quiet_machine
from watchdog.loadtest.client import Api, CompletionRequest, OpenAIClient, percentile

FIRST_DELAY = 0.08
GAP = 0.03


def _chunk(wfile: object, payload: bytes) -> None:
    """Write one HTTP/1.1 chunk (uvicorn, behind vLLM and SGLang, streams with chunked encoding)."""
    wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")  # type: ignore[attr-defined]
    wfile.flush()  # type: ignore[attr-defined]


def scripted(mode: str, tokens: int = 5, usage: bool = True) -> type[BaseHTTPRequestHandler]:
    """A handler that streams ``tokens`` events FIRST_DELAY then GAP apart, or misbehaves per ``mode``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        seen: ClassVar[list[tuple[str, dict[str, object]]]] = []
        written: ClassVar[list[float]] = []  # perf_counter just before each token's chunk is written

        def do_POST(self) -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client may give up first
                self._answer()

        def _answer(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            Handler.seen.append((self.path, body))
            if mode == "429":
                payload = b'{"error": "busy"}'
                self.send_response(429)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chat = self.path.endswith("/chat/completions")
            if mode == "stall":
                time.sleep(1.0)
            time.sleep(FIRST_DELAY)
            for index in range(tokens):
                if index:
                    time.sleep(GAP)
                if mode == "trickle" and index == 1:
                    for _ in range(20):
                        _chunk(self.wfile, b": keep-alive\n\n")
                        time.sleep(0.05)
                choice = {"index": 0, "delta": {"content": f"t{index}"}} if chat else {"index": 0, "text": f"t{index}"}
                Handler.written.append(time.perf_counter())
                _chunk(self.wfile, f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            if mode == "error-event":
                _chunk(self.wfile, b'data: {"error": {"message": "engine died"}}\n\n')
            if usage:
                event = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": tokens}}
                _chunk(self.wfile, f"data: {json.dumps(event)}\n\n".encode())
            if mode != "no-done":
                _chunk(self.wfile, b"data: [DONE]\n\n")
            _chunk(self.wfile, b"")

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def test_completions_stream_timing_matches_when_the_server_wrote() -> None:
    """Each token is seen no earlier than the server wrote it, and soon after (the bound allows for a busy
    machine); TTFT is the first token, not the response headers; TPOT is (E2E - TTFT) / (tokens - 1)."""
    require_quiet_machine()
    handler = scripted("ok", tokens=5)
    with serving(handler, ThreadingHTTPServer) as url:
        result = OpenAIClient(url).send(CompletionRequest(prompt="hello", max_tokens=5, model="m"))
    assert result.ok, result.error
    assert result.status == 200
    assert result.output_tokens == 5
    assert result.prompt_tokens == 7
    written = handler.written  # type: ignore[attr-defined]
    assert result.ttft is not None and len(result.itl) == 4
    seen = [result.sent_at + result.ttft]
    for gap in result.itl:
        seen.append(seen[-1] + gap)
    for token, (wrote, saw) in enumerate(zip(written, seen, strict=True)):
        assert wrote <= saw < wrote + 0.25, (token, wrote, saw)
    assert result.ttft >= FIRST_DELAY
    assert all(gap > 0 for gap in result.itl)
    assert result.tpot == pytest.approx((result.e2e - result.ttft) / 4)
    assert result.e2e >= result.ttft + sum(result.itl)
    path, body = handler.seen[0]  # type: ignore[attr-defined]
    assert path == "/v1/completions"
    assert body["stream"] is True and body["prompt"] == "hello" and body["max_tokens"] == 5


def test_chat_stream_reads_delta_content_and_counts_events_without_usage() -> None:
    handler = scripted("ok", tokens=3, usage=False)
    with serving(handler, ThreadingHTTPServer) as url:
        result = OpenAIClient(url + "/v1").send(
            CompletionRequest(prompt="hi", max_tokens=3, api=Api.CHAT, prompt_tokens=2))
    assert result.ok, result.error
    assert result.output_tokens == 3
    assert result.prompt_tokens == 2
    path, body = handler.seen[0]  # type: ignore[attr-defined]
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("mode", "expected"), [
    ("429", "HTTP 429"),
    ("no-done", "before [DONE]"),
    ("error-event", "engine died"),
])
def test_server_faults_become_errors_not_exceptions(mode: str, expected: str) -> None:
    with serving(scripted(mode), ThreadingHTTPServer) as url:
        result = OpenAIClient(url).send(CompletionRequest(prompt="x", max_tokens=5))
    assert not result.ok and not result.timed_out
    assert result.error is not None and expected in result.error


def test_read_timeout_bounds_a_stalled_server() -> None:
    with serving(scripted("stall"), ThreadingHTTPServer) as url:
        started = time.perf_counter()
        result = OpenAIClient(url, read_timeout=0.3).send(CompletionRequest(prompt="x", max_tokens=5))
        assert time.perf_counter() - started < 0.9  # the server stalls for 1 s
    assert result.error is not None and "timed out" in result.error
    assert result.timed_out


def test_total_timeout_cuts_a_stalled_read_short() -> None:
    # Each read may wait 5 s, but the whole request only 0.3 s: the stall is cut at the total timeout.
    with serving(scripted("stall"), ThreadingHTTPServer) as url:
        started = time.perf_counter()
        client = OpenAIClient(url, read_timeout=5.0, total_timeout=0.3)
        result = client.send(CompletionRequest(prompt="x", max_tokens=5))
        assert time.perf_counter() - started < 0.9  # the server stalls for 1 s
    assert result.timed_out and result.error is not None and "total timeout" in result.error


def test_token_id_prompts_are_sent_as_a_list_of_ids() -> None:
    handler = scripted("ok", tokens=2)
    with serving(handler, ThreadingHTTPServer) as url:
        result = OpenAIClient(url).send(CompletionRequest(prompt=(5, 6, 7), max_tokens=2))
    assert result.ok, result.error
    _path, body = handler.seen[0]  # type: ignore[attr-defined]
    assert body["prompt"] == [5, 6, 7]
    with pytest.raises(ValueError, match="chat API"):
        CompletionRequest(prompt=(5, 6), max_tokens=1, api=Api.CHAT).body()


def test_total_timeout_bounds_a_server_that_trickles_keepalives() -> None:
    with serving(scripted("trickle"), ThreadingHTTPServer) as url:
        client = OpenAIClient(url, read_timeout=1.0, total_timeout=0.4)
        result = client.send(CompletionRequest(prompt="x", max_tokens=5))
    assert result.error is not None and "total timeout" in result.error
    assert result.timed_out
    assert result.e2e < 0.8


def test_connection_refused_is_an_error_result() -> None:
    result = OpenAIClient(f"http://127.0.0.1:{free_port()}", read_timeout=1.0).send(
        CompletionRequest(prompt="x", max_tokens=1))
    assert result.error is not None and "Connection" in result.error
    assert result.ttft is None and result.tpot is None


def test_base_url_must_be_plain_http() -> None:
    with pytest.raises(ValueError, match="http://host"):
        OpenAIClient("https://example.com")


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)

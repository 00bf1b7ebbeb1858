"""The real-engine lane's own parts that run without vLLM: log parsing, /metrics reading, prompts, the load
generator against a streaming OpenAI-style server on loopback, the result table."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scripts.real_engines.lane import Outcome, page_values, table
from scripts.real_engines.loadgen import LoadSpec, make_prompt, run_load
from scripts.real_engines.processes import parse_log_line


def test_log_notifier_lines_become_alert_events() -> None:
    line = json.dumps({"ts": "2026-12-01T17:00:00.000Z", "level": "warning", "logger": "watchdog.alerts",
                       "event": "alert_firing", "alertname": "EngineDown", "labels": {"job": "vllm"}})
    event = parse_log_line(line + "\n", 12.5)
    assert event is not None
    assert (event.at, event.kind, event.alertname, event.labels) == (12.5, "firing", "EngineDown", {"job": "vllm"})
    assert parse_log_line('{"event": "runbook_suggested", "alertname": "EngineDown"}', 0) is None
    assert parse_log_line("2026-12-01 INFO agent started", 0) is None
    assert parse_log_line("{not json", 0) is None


def test_page_values_reads_alert_states_and_watched_series() -> None:
    page = "\n".join([
        'ALERTS{alertname="EngineDown",alertstate="firing",job="vllm"} 1',
        'ALERTS{alertname="EngineKvCacheNearFull",alertstate="pending",job="vllm"} 1',
        'watchdog_engine_up{job="vllm",instance="127.0.0.1:8411"} 0',
        'watchdog_engine_up{job="other",instance="127.0.0.1:9"} 1',
        'engine:kv_cache_usage_ratio{job="vllm",engine="0"} 0.93',
        "",
    ])
    firing, pending, values = page_values(page)
    assert firing == {"EngineDown"} and pending == {"EngineKvCacheNearFull"}
    assert values == {'watchdog_engine_up{job="vllm"}': 0.0, "engine:kv_cache_usage_ratio": 0.93}


@pytest.mark.parametrize("mode", ["none", "shared", "unique"])
def test_prompts_have_exact_lengths_and_prefixes(mode: str) -> None:
    spec = LoadSpec(concurrency=1, prompt_tokens=40, max_tokens=1, duration_s=1, prefix=mode,  # type: ignore[arg-type]
                    prefix_tokens=32)
    shared = list(range(100, 132))
    rng = random.Random(3)
    a, b = make_prompt(spec, rng, shared, 500), make_prompt(spec, rng, shared, 500)
    assert len(a) == len(b) == 40
    assert all(3 <= t < 500 for t in a + b)
    assert (a[:32] == shared == b[:32]) == (mode == "shared")


class _Streaming(BaseHTTPRequestHandler):
    """/v1/completions streaming 3 chunks, 50 ms apart; requests for max_tokens 99 never finish."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = 1000 if body["max_tokens"] == 99 else 3
        try:
            for i in range(chunks):
                self.wfile.write(f'data: {{"choices": [{{"text": "t{i}"}}]}}\n\n'.encode())
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def test_load_generator_streams_to_done(server: int) -> None:
    result = run_load("127.0.0.1", server, "tiny", 500, LoadSpec(concurrency=2, prompt_tokens=8, max_tokens=3,
                                                                  duration_s=0.5))
    assert result.ok >= 2 and result.failed == 0 and result.timed_out == 0
    assert len(result.ttft_s) == result.ok and all(t < 1 for t in result.ttft_s)


def test_impatient_clients_give_up_and_retry(server: int) -> None:
    spec = LoadSpec(concurrency=2, prompt_tokens=8, max_tokens=99, duration_s=0.9, client_timeout_s=0.3)
    result = run_load("127.0.0.1", server, "tiny", 500, spec)
    assert result.ok == 0 and result.timed_out >= 4 and result.failed == 0


def test_table_lists_fired_alerts_and_failures() -> None:
    good = Outcome("burst", ("A", "B"), ("C",), 90, fired={"B": 30.0, "A": 20.0})
    bad = Outcome("steady", (), ("C",), 0, silent_fired=["C"], failures=["C fired but must stay silent"])
    text = table([good, bad])
    assert "A 20.0s, B 30.0s" in text
    assert "| ok" in text and "| FAIL" in text
    assert "steady: FAIL: C fired but must stay silent" in text

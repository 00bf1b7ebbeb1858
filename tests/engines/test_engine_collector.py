"""Engine collector against real HTTP servers on loopback: healthy, gzip, down, slow, garbage, huge."""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.loopback import serving
from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext, CollectorRunner
from watchdog.collectors.engines import (
    EngineCollector,
    ScrapeError,
    apply_target_labels,
    detect_kind,
    engine_collectors,
    fetch,
    scrape_instance,
)
from watchdog.config.settings import EngineSettings, section_settings
from watchdog.model import Sample, label_value, metric, metric_name

PAYLOAD = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama",engine="0"} 7.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="llama",engine="0"} 3.0
vllm:num_preemptions_created{model_name="llama",engine="0"} 1.7e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="27000"} 1.0
# TYPE clash gauge
clash{job="inner",instance="pod:1",exported_job="x"} 5
"""


class Handler(BaseHTTPRequestHandler):
    """Routes: /ok /gzip /slow /drip /garbage /binary /huge /huge-chunked /bomb /status500."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        if path == "/ok":
            self._send(PAYLOAD.encode())
        elif path == "/gzip":
            assert "gzip" in (self.headers.get("Accept-Encoding") or "")
            self._send(gzip.compress(PAYLOAD.encode()), headers={"Content-Encoding": "gzip"})
        elif path == "/slow":
            time.sleep(1.5)
            self._send(PAYLOAD.encode())
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            for _ in range(40):  # a byte every 0.1 s: each read is quick, the whole is not
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.1)
        elif path == "/garbage":
            self._send(b"this is { not the exposition format\n")
        elif path == "/binary":
            self._send(bytes(range(256)) * 4)
        elif path in ("/huge", "/huge-chunked"):
            line = b'vllm:num_requests_running{model_name="' + b"x" * 200 + b'"} 1\n'
            total = 50 * 1024 * 1024
            self.send_response(200)
            if path == "/huge":
                self.send_header("Content-Length", str(total))
            self.end_headers()
            sent = 0
            try:
                while sent < total:
                    self.wfile.write(line * 256)
                    sent += len(line) * 256
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif path == "/bomb":
            self._send(gzip.compress(b"#" * (20 * 1024 * 1024)), headers={"Content-Encoding": "gzip"})
        elif path == "/status500":
            self._send(b"engine is sad\n", status=500)
        else:
            self._send(b"not found\n", status=404)


class QuietServer(ThreadingHTTPServer):
    """Clients that hang up early (timeouts, size caps) are the point of these tests: no tracebacks."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(Handler, QuietServer) as base:
        yield base


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def by_name(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if metric_name(s.labels) == name]


def value_of(samples: list[Sample], name: str) -> float:
    (only,) = by_name(samples, name)
    return only.value


def endpoint(url: str, job: str, **kw: object) -> EngineSettings:
    return section_settings(EngineSettings, "engines[]", {"url": url, "job": job, **kw})


def collector(base: str, path: str, **kw: object) -> EngineCollector:
    return EngineCollector(endpoint(base + path, "vllm-a", **kw))


def test_healthy_scrape_adds_target_labels_and_scrape_series(server: str) -> None:
    c = collector(server, "/ok", labels={"cluster": "c1"})
    samples = c.collect()
    port = server.rsplit(":", 1)[1]
    running = by_name(samples, "vllm:num_requests_running")[0]
    assert running.labels == metric("vllm:num_requests_running", model_name="llama", engine="0",
                                    job="vllm-a", instance=f"127.0.0.1:{port}", cluster="c1")
    assert running.value == 7.0
    assert value_of(samples, "up") == value_of(samples, "watchdog_engine_up") == 1.0
    assert value_of(samples, "scrape_samples_scraped") == 4.0  # _created dropped
    assert value_of(samples, "watchdog_engine_scrape_samples_scraped") == 4.0
    assert value_of(samples, "scrape_duration_seconds") == value_of(samples, "watchdog_engine_scrape_duration_seconds")
    assert value_of(samples, "scrape_duration_seconds") >= 0.0
    assert by_name(samples, "vllm:num_preemptions_created") == []
    assert label_value(by_name(samples, "watchdog_engine_info")[0].labels, "kind") == "vllm"
    assert c.name == "engine:vllm-a"


def test_payload_labels_that_clash_with_target_labels_become_exported(server: str) -> None:
    samples = collector(server, "/ok").collect()
    (clash,) = by_name(samples, "clash")
    assert label_value(clash.labels, "job") == "vllm-a"
    assert label_value(clash.labels, "exported_job") == "x"  # already there: kept
    assert label_value(clash.labels, "exported_exported_job") == "inner"
    assert label_value(clash.labels, "exported_instance") == "pod:1"


def test_cache_config_info_labels_become_numeric_series(server: str) -> None:
    samples = collector(server, "/ok").collect()
    assert value_of(samples, "watchdog_engine_kv_cache_blocks") == 27000.0
    assert value_of(samples, "watchdog_engine_kv_cache_block_size_tokens") == 16.0
    assert value_of(samples, "watchdog_engine_gpu_memory_utilization_ratio") == 0.9
    blocks = by_name(samples, "watchdog_engine_kv_cache_blocks")[0]
    assert label_value(blocks.labels, "engine") == "0"
    assert label_value(blocks.labels, "num_gpu_blocks") == ""


def test_gzip_body_is_accepted(server: str) -> None:
    samples = collector(server, "/gzip").collect()
    assert value_of(samples, "up") == 1.0
    assert value_of(samples, "vllm:num_requests_running") == 7.0


@pytest.mark.parametrize(
    ("path", "kw"),
    [
        ("/slow", {"scrape_timeout_seconds": 0.5}),
        ("/drip", {"scrape_timeout_seconds": 0.8}),
        ("/garbage", {}),
        ("/binary", {}),
        ("/huge", {}),
        ("/huge-chunked", {}),
        ("/bomb", {"max_payload_bytes": 1024 * 1024}),
        ("/status500", {}),
        ("/nope", {}),
    ],
)
def test_failing_endpoint_is_up_zero_with_no_other_series(
    server: str, path: str, kw: dict[str, object]
) -> None:
    c = collector(server, path, **kw)
    samples = c.collect()
    names = sorted(metric_name(s.labels) for s in samples)
    assert names == ["scrape_duration_seconds", "scrape_samples_scraped", "up",
                     "watchdog_engine_scrape_duration_seconds", "watchdog_engine_scrape_samples_scraped",
                     "watchdog_engine_up"]
    assert value_of(samples, "up") == value_of(samples, "watchdog_engine_up") == 0.0
    assert value_of(samples, "scrape_samples_scraped") == 0.0
    assert value_of(samples, "watchdog_engine_scrape_samples_scraped") == 0.0
    assert c.last_error


def test_timeouts_bound_the_whole_scrape(server: str) -> None:
    started = time.monotonic()
    with pytest.raises(ScrapeError):
        fetch(server + "/drip", 0.5, 1 << 20)
    assert time.monotonic() - started < 3.0  # not 40 x 0.5 s: the deadline is for the whole scrape


def test_down_endpoint_is_up_zero() -> None:
    c = EngineCollector(endpoint(f"http://127.0.0.1:{closed_port()}/metrics", "gone"))
    samples = c.collect()
    assert value_of(samples, "up") == 0.0
    assert "Connection" in c.last_error or "refused" in c.last_error.lower()


def test_one_bad_endpoint_does_not_affect_the_others(server: str) -> None:
    config = settings_of({"engines": [
        {"url": server + "/ok", "job": "good"},
        {"url": server + "/slow", "job": "slow", "scrape_timeout_seconds": 0.3},
        {"url": f"http://127.0.0.1:{closed_port()}/metrics", "job": "down"},
        {"url": server + "/garbage", "job": "garbage"},
    ]})
    collectors = engine_collectors(config, CollectorContext())
    runner = CollectorRunner(collectors)
    try:
        results = {r.name: r for r in runner.run_once()}
    finally:
        runner.close()
    assert set(results) == {"engine:good", "engine:slow", "engine:down", "engine:garbage"}
    # A failed scrape is still data (up 0) and its call a failure with the reason: never success with an error.
    assert {name for name, r in results.items() if r.success} == {"engine:good"}
    assert results["engine:good"].error == ""
    assert results["engine:slow"].error == "timed out after 0.3s"
    assert results["engine:down"].error.startswith("connection refused: nothing listens on 127.0.0.1:")
    assert results["engine:garbage"].error
    ups = {label_value(s.labels, "job"): s.value
           for r in results.values() for s in r.samples if metric_name(s.labels) == "up"}
    assert ups == {"good": 1.0, "slow": 0.0, "down": 0.0, "garbage": 0.0}
    assert value_of(results["engine:good"].samples, "vllm:num_requests_running") == 7.0


def test_apply_target_labels_is_pure_and_sorted() -> None:
    labels = metric("m", job="a", zeta="z")
    out = apply_target_labels(labels, {"job": "j", "instance": "h:1"})
    assert out == metric("m", job="j", exported_job="a", instance="h:1", zeta="z")
    assert list(out) == sorted(out)


def test_detect_kind() -> None:
    assert detect_kind(["vllm:a", "vllm:b", "process_cpu_seconds_total"]) == "vllm"
    assert detect_kind(["sglang:token_usage", "vllm:x", "sglang:y"]) == "sglang"
    assert detect_kind(["python_info", "up"]) == "unknown"


def test_instance_defaults_the_port() -> None:
    assert scrape_instance("http://host/metrics") == "host:80"
    assert scrape_instance("https://host/metrics") == "host:443"
    assert scrape_instance("http://[::1]:8000/metrics") == "[::1]:8000"

"""A simulated inference engine: a real HTTP server serving vLLM V1 (or SGLang) `/metrics` and an OpenAI API.

The simulator turns a scenario's knob timelines (arrival rate, TTFT, KV usage, ...) into the series a
real engine exposes, with the engine's own metric names, labels and histogram buckets, rendered by
prometheus-client in the same exposition format the engines use (they use prometheus-client too).
Each simulated second it "finishes" ``arrival_rate`` requests, observes their TTFT/TPOT/E2E/queue time
(a fixed spread around the knob medians, so runs are reproducible), and advances the token counters.

It also answers streaming ``/v1/completions`` and ``/v1/chat/completions`` with latencies from a
load model with a known knee (:mod:`watchdog.demo.openai_sim`: ``max_num_seqs`` slots, the ``ttft`` knob
as prefill, the ``tpot`` knob per token), so ``inference-watchdog loadtest`` has something to measure.

Run one per engine as its own process (so the agent sees a real process tree listening on a port):
``python -m watchdog.demo.engine_sim --scenario PATH --job NAME --port PORT --start EPOCH``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from watchdog.demo.openai_sim import OPENAI_PATHS, LoadModel, RequestError, SimulatedOpenAI, write_chunked
from watchdog.demo.scenario import ENGINE_KNOBS, EngineSpec, Scenario, knob_value, load_scenario
from watchdog.engines.buckets import bounds_of, buckets_1_2_5

# Real bucket layouts, shared with the SLO rules (watchdog/engines/buckets.py).
TTFT_BUCKETS = bounds_of("ttft", "vLLM V1")
TPOT_BUCKETS = bounds_of("tpot", "vLLM V1")
LATENCY_BUCKETS = bounds_of("e2e", "vLLM V1")
SGLANG_TTFT_BUCKETS = bounds_of("ttft", "SGLang >= 0.5")
SGLANG_ITL_BUCKETS = bounds_of("tpot", "SGLang >= 0.5")
SGLANG_E2E_BUCKETS = bounds_of("e2e", "SGLang >= 0.5")

# Deterministic spread of per-request latencies around the median: 5 requests in 100 land past 2x.
SPREAD = (0.55, 0.7, 0.8, 0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.45, 1.6, 1.8, 2.2,
          0.75, 0.85, 1.0, 1.15, 1.35)


class EngineModel:
    """The series of one simulated engine, advanced one simulated step at a time."""

    def __init__(self, spec: EngineSpec, interval_seconds: float) -> None:
        self.spec = spec
        self.interval_seconds = interval_seconds
        self.registry = CollectorRegistry(auto_describe=True)
        self.step = -1
        self._carry = 0.0
        self._spread_index = 0
        self._make_metrics()

    def knob(self, name: str) -> float:
        """The knob's value at the current step."""
        return knob_value(self.spec.knobs.get(name, [None]), max(self.step, 0), ENGINE_KNOBS[name])

    def _make_metrics(self) -> None:
        r = self.registry
        if self.spec.kind == "sglang":
            labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
            self.labels: dict[str, str] = {"model_name": self.spec.model, "engine_type": "unified",
                                           "tp_rank": "0", "pp_rank": "0"}
            self.running = Gauge("sglang:num_running_reqs", "Running requests", labels, registry=r)
            self.waiting = Gauge("sglang:num_queue_reqs", "Queued requests", labels, registry=r)
            self.kv = Gauge("sglang:token_usage", "Token usage", labels, registry=r)
            self.max_tokens = Gauge("sglang:max_total_num_tokens", "KV pool tokens", labels, registry=r)
            self.gen_throughput = Gauge("sglang:gen_throughput", "Generation throughput", labels, registry=r)
            self.hit_rate = Gauge("sglang:cache_hit_rate", "Prefix cache hit rate (resets)", labels, registry=r)
            self.prompt = Counter("sglang:prompt_tokens", "Prompt tokens", labels, registry=r)
            self.generation = Counter("sglang:generation_tokens", "Generation tokens", labels, registry=r)
            self.cached = Counter("sglang:cached_tokens", "Cached prompt tokens", labels, registry=r)
            self.requests = Counter("sglang:num_requests", "Finished requests", labels, registry=r)
            self.aborted = Counter("sglang:num_aborted_requests", "Aborted requests", labels, registry=r)
            self.preempt = Counter("sglang:num_retracted_requests", "Retracted requests", labels, registry=r)
            self.ttft = Histogram("sglang:time_to_first_token_seconds", "TTFT", labels,
                                  buckets=SGLANG_TTFT_BUCKETS, registry=r)
            self.itl = Histogram("sglang:inter_token_latency_seconds", "ITL", labels,
                                 buckets=SGLANG_ITL_BUCKETS, registry=r)
            self.e2e = Histogram("sglang:e2e_request_latency_seconds", "E2E", labels,
                                 buckets=SGLANG_E2E_BUCKETS, registry=r)
            self.queue = Histogram("sglang:queue_time_seconds", "Queue time", labels,
                                   buckets=SGLANG_E2E_BUCKETS, registry=r)
            self.max_tokens.labels(**self.labels).set(500_000)
            return
        labels = ["model_name", "engine"]
        self.labels = {"model_name": self.spec.model, "engine": "0"}
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     ["block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                      "num_cpu_blocks", "num_gpu_blocks", "engine"], registry=r)
        info.labels(block_size="16", cache_dtype="auto", enable_prefix_caching="True",
                    gpu_memory_utilization="0.9", num_cpu_blocks="0", num_gpu_blocks="31250",
                    engine="0").set(1)
        self.running = Gauge("vllm:num_requests_running", "Running requests", labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting requests", labels, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                        registry=r)
        self.preempt = Counter("vllm:num_preemptions", "Cumulative number of preemptions", labels, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                  labels, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.",
                                      labels, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", labels,
                                   registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               [*labels, "finished_reason"], registry=r)
        self.prompt_hist = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                     labels, buckets=buckets_1_2_5(32768), registry=r)
        self.gen_hist = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                  labels, buckets=buckets_1_2_5(32768), registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             labels, buckets=TPOT_BUCKETS, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", labels,
                              buckets=TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             labels, buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase.",
                               labels, buckets=LATENCY_BUCKETS, registry=r)

    def _spread(self) -> float:
        factor = SPREAD[self._spread_index % len(SPREAD)]
        self._spread_index += 1
        return factor

    def advance_to(self, step: int) -> None:
        """Apply every simulated step up to ``step`` (idempotent for steps already applied)."""
        while self.step < step:
            self.step += 1
            self._apply_step()

    def _apply_step(self) -> None:
        dt = self.interval_seconds
        lab = self.labels
        stalled = self.knob("generation_stall") >= 0.5
        self.running.labels(**lab).set(self.knob("running"))
        self.waiting.labels(**lab).set(self.knob("waiting"))
        self.kv.labels(**lab).set(min(1.0, max(0.0, self.knob("kv_usage"))))
        self.preempt.labels(**lab).inc(self.knob("preemption_rate") * dt)
        if stalled:
            return
        self._carry += self.knob("arrival_rate") * dt
        finished = int(self._carry)
        self._carry -= finished
        prompt_mean, gen_mean = self.knob("prompt_tokens"), self.knob("generation_tokens")
        abort_ratio = min(1.0, max(0.0, self.knob("abort_ratio")))
        hit = min(1.0, max(0.0, self.knob("prefix_hit_ratio")))
        for index in range(finished):
            ttft = self.knob("ttft") * self._spread()
            tpot = self.knob("tpot") * self._spread()
            queue = self.knob("queue_time") * self._spread()
            prompt = max(1.0, round(prompt_mean * self._spread()))
            gen = max(1.0, round(gen_mean * self._spread()))
            aborted = index < round(finished * abort_ratio)
            self.ttft.labels(**lab).observe(ttft)
            self.itl.labels(**lab).observe(tpot)
            self.e2e.labels(**lab).observe(queue + ttft + gen * tpot)
            self.queue.labels(**lab).observe(queue)
            self.prompt.labels(**lab).inc(prompt)
            self.generation.labels(**lab).inc(gen)
            if self.spec.kind == "sglang":
                self.cached.labels(**lab).inc(prompt * hit)
                self.requests.labels(**lab).inc()
                if aborted:
                    self.aborted.labels(**lab).inc()
                continue
            self.tpot.labels(**lab).observe(tpot)
            self.prompt_hist.labels(**lab).observe(prompt)
            self.gen_hist.labels(**lab).observe(gen)
            self.prefix_queries.labels(**lab).inc(prompt)
            self.prefix_hits.labels(**lab).inc(prompt * hit)
            self.success.labels(**lab, finished_reason="abort" if aborted else "stop").inc()
        if self.spec.kind == "sglang":
            self.gen_throughput.labels(**lab).set(finished * gen_mean / dt)
            self.hit_rate.labels(**lab).set(hit)

    def exposition(self) -> bytes:
        """The engine's `/metrics` body now."""
        return generate_latest(self.registry)


class QuietHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that says nothing when a client goes away mid-answer (a load test cut at
    its timeout, a scrape given up): that is the client's choice, not the simulator's fault. Any other
    error keeps the standard report."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError,
                                          TimeoutError)):
            return
        super().handle_error(request, client_address)


class EngineServer:
    """Serves one :class:`EngineModel` over HTTP, advancing it with wall-clock time since ``start``."""

    def __init__(self, scenario: Scenario, spec: EngineSpec, start: float, port: int = 0,
                 host: str = "127.0.0.1", clock: Callable[[], float] = time.time) -> None:
        self.scenario = scenario
        self.model = EngineModel(spec, scenario.interval_seconds)
        self.start = start
        self.clock = clock
        self._lock = threading.Lock()
        # The OpenAI API's load model: slots, prefill (the ttft knob) and TPOT, as at the start.
        self.openai = SimulatedOpenAI(LoadModel(slots=max(1, int(self.model.knob("max_num_seqs"))),
                                                prefill_seconds=self.model.knob("ttft"),
                                                tpot_seconds=self.model.knob("tpot")))
        self.httpd = QuietHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def current_step(self) -> int:
        """The simulated step now."""
        return self.scenario.step_at(self.clock() - self.start)

    def body(self) -> bytes | None:
        """The exposition for the current step, or None when the `up` knob says the engine is down."""
        with self._lock:
            self.model.advance_to(self.current_step())
            if self.model.knob("up") < 0.5:
                return None
            return self.model.exposition()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked streaming of completions needs it

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0] not in OPENAI_PATHS:
                    self.send_error(404)
                    return
                try:
                    chat, model, prompt_tokens, max_tokens, usage = server.openai.parse(self.path, raw)
                except RequestError as exc:
                    body = json.dumps({"error": {"message": str(exc), "type": "BadRequestError"}}).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client hung up
                    write_chunked(self.wfile, server.openai.stream(chat, model, prompt_tokens, max_tokens, usage))

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = server.body()
                if body is None:
                    self.send_error(503, "engine unavailable")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler

    def serve_forever(self) -> None:
        """Serve until the process is stopped."""
        self.httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()


def file_clock(path: str) -> Callable[[], float]:
    """A clock that reads simulated epoch seconds from ``path`` (written by the scenario harness)."""

    def now() -> float:
        with open(path, encoding="utf-8") as handle:
            return float(handle.read().strip() or 0)

    return now


def main(argv: list[str] | None = None) -> int:
    """Entry point of the engine simulator process; prints ``PORT <n>`` once listening."""
    parser = argparse.ArgumentParser(description="Simulated inference engine (demo)")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--start", type=float, default=None)
    parser.add_argument("--clock-file", default=None,
                        help="read simulated time (epoch seconds) from this file instead of the wall clock")
    parser.add_argument("engine_args", nargs=argparse.REMAINDER,
                        help="after --: the real engine's flags it stands for (ignored; the config audit reads them)")
    args = parser.parse_args(argv)
    scenario = load_scenario(args.scenario)
    spec = next((e for e in scenario.engines if e.job == args.job), None)
    if spec is None:
        parser.error(f"scenario {scenario.name} has no engine {args.job!r}")
    clock = file_clock(args.clock_file) if args.clock_file else time.time
    start = args.start if args.start is not None else clock()
    server = EngineServer(scenario, spec, start, args.port, clock=clock)
    print(f"PORT {server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Engines and clients for the balancer tests: the demo's engine simulator as real processes, and a client
load of streaming completions through a balancer that records every request's start, end and outcome."""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.processes import stop_process

FAST_KNOBS = {"ttft": "0.02", "tpot": "0.005", "arrival_rate": "4", "running": "4", "kv_usage": "0.3"}
"""Knobs of an engine that answers a short completion in about 30 ms."""


def write_scenario(path: Path, jobs: list[str], knobs: dict[str, str] | None = None,
                   duration: str = "600s") -> Path:
    """A scenario file with one simulated vLLM engine per job (TP 1 on GPUs 0, 1, ...)."""
    doc = {"name": "balancer", "description": "engines behind a load balancer", "interval": "1s",
           "duration": duration, "profile": "h100-sxm-8",
           "engines": [{"job": job, "model": "demo/model", "gpus": [i], "knobs": dict(knobs or FAST_KNOBS)}
                       for i, job in enumerate(jobs)],
           "gpus": [], "faults": [], "expect": {"within": "30s", "alerts": []}}
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class SimEngine:
    """One engine simulator process."""

    job: str
    port: int
    process: subprocess.Popen[str]


@contextlib.contextmanager
def sim_engines(scenario: Path, jobs: list[str]) -> Iterator[dict[str, SimEngine]]:
    """Start one ``watchdog.demo.engine_sim`` process per job on ephemeral ports (each prints its port once
    listening, or exits); stop them all after."""
    engines: dict[str, SimEngine] = {}
    try:
        for job in jobs:
            process = subprocess.Popen([sys.executable, "-m", "watchdog.demo.engine_sim", "--scenario",
                                        str(scenario), "--job", job, "--port", "0"],
                                       stdout=subprocess.PIPE, text=True, start_new_session=True)
            engines[job] = SimEngine(job, 0, process)
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), f"engine {job} did not start: {line!r}"
            engines[job].port = int(line.split()[1])
        yield engines
    finally:
        for engine in engines.values():
            stop_process(engine.process, timeout=5, group=True)


@dataclass(frozen=True)
class Outcome:
    """One client request: when it started and ended (monotonic), HTTP status (0: no answer) and error."""

    started: float
    ended: float
    status: int
    error: str

    @property
    def ok(self) -> bool:
        """A complete 200 stream."""
        return self.status == 200 and not self.error


class ClientLoad:
    """``clients`` threads, each sending one streaming completion after another to ``host:port`` (a
    balancer) until :meth:`stop`; a request taking longer than ``timeout`` fails. ``model`` is the name the
    requests ask for (a real engine answers 404 to a name it does not serve; the simulator takes any);
    ``prompt`` gives each request's prompt (default: always ``hello there``); ``fields`` are added to each
    request's body (``{"ignore_eos": True}`` for a real vLLM's exact answer lengths)."""

    def __init__(self, port: int, clients: int = 4, max_tokens: int = 4, timeout: float = 10.0,
                 pause: float = 0.01, model: str = "demo/model", prompt: Callable[[], str] | None = None,
                 fields: dict[str, object] | None = None) -> None:
        self.port = port
        self.model = model
        self.prompt = prompt
        self.fields = dict(fields or {})
        self.clients = clients
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.pause = pause
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _one(self) -> Outcome:
        prompt = self.prompt() if self.prompt else "hello there"
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens,
                           "stream": True, **self.fields}).encode()
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            error = "" if response.status != 200 or b"[DONE]" in data else "stream cut"
            return Outcome(started, time.monotonic(), response.status, error)
        except (OSError, http.client.HTTPException) as exc:
            return Outcome(started, time.monotonic(), 0, type(exc).__name__)
        finally:
            conn.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            outcome = self._one()
            with self._lock:
                self.outcomes.append(outcome)
            self._stop.wait(self.pause)

    def start(self) -> ClientLoad:
        """Start the clients."""
        for i in range(self.clients):
            thread = threading.Thread(target=self._run, name=f"client-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Outcome]:
        """Stop the clients (each finishes its request) and return every outcome."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)
        with self._lock:
            return list(self.outcomes)

    def failed_since(self, moment: float) -> list[Outcome]:
        """Requests started at or after ``moment`` that failed."""
        with self._lock:
            return [o for o in self.outcomes if o.started >= moment and not o.ok]

    def __enter__(self) -> ClientLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

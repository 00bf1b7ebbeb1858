"""A small load generator: OpenAI completions API, streaming, N concurrent clients for a fixed time.

Prompts are lists of token ids (vLLM's completions API takes them), so prompt length and shared
prefixes are exact: ``prefix="shared"`` gives every request the same first ``prefix_tokens`` ids,
``prefix="unique"`` a fresh random prefix per request. ``ignore_eos`` makes every answer exactly
``max_tokens`` long. A client whose request outlives ``client_timeout_s`` closes its connection (the
engine aborts the request) and sends the next one at once: clients that time out and retry.

Standard library only (threads and ``http.client``), so it runs in any venv of the project.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

PrefixMode = Literal["none", "shared", "unique"]


@dataclass(frozen=True)
class LoadSpec:
    """One load phase: who sends what, for how long."""

    concurrency: int
    prompt_tokens: int
    max_tokens: int
    duration_s: float
    prefix: PrefixMode = "none"
    prefix_tokens: int = 0
    client_timeout_s: float | None = None
    seed: int = 1


@dataclass
class LoadResult:
    """What the clients saw (counts and first-token latencies in seconds)."""

    ok: int = 0
    timed_out: int = 0
    failed: int = 0
    ttft_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: counts and median TTFT."""
        ttft = sorted(self.ttft_s)
        median = f"{ttft[len(ttft) // 2]:.2f}s" if ttft else "-"
        return f"ok={self.ok} timed_out={self.timed_out} failed={self.failed} ttft_p50={median}"


def make_prompt(spec: LoadSpec, rng: random.Random, shared: list[int], vocab: int) -> list[int]:
    """Token ids of one prompt (pure given *rng*): prefix by ``spec.prefix``, then random ids."""
    low = 3  # ids 0..2 are <unk>, <s>, </s>
    if spec.prefix == "shared":
        head = shared[: spec.prefix_tokens]
    elif spec.prefix == "unique":
        head = [rng.randrange(low, vocab) for _ in range(spec.prefix_tokens)]
    else:
        head = []
    tail = [rng.randrange(low, vocab) for _ in range(max(spec.prompt_tokens - len(head), 1))]
    return head + tail


def stream_completion(
    host: str, port: int, body: dict[str, object], timeout_s: float | None, result: LoadResult, lock: threading.Lock
) -> None:
    """Send one streaming completion and read it to ``[DONE]``; give up (close) after *timeout_s*."""
    start = time.monotonic()
    deadline = start + timeout_s if timeout_s else start + 600.0
    conn = http.client.HTTPConnection(host, port, timeout=deadline - start)
    first: float | None = None
    outcome = "failed"
    error = ""
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            error = f"HTTP {resp.status}: {resp.read(200)!r}"
        else:
            while True:
                if time.monotonic() > deadline:
                    outcome = "timed_out"
                    break
                line = resp.readline()
                if not line:
                    error = "stream ended without [DONE]"
                    break
                if line.startswith(b"data: ") and first is None and line.strip() != b"data: [DONE]":
                    first = time.monotonic() - start
                if line.strip() == b"data: [DONE]":
                    outcome = "ok"
                    break
    except TimeoutError:
        outcome = "timed_out" if time.monotonic() >= deadline - 0.05 else "failed"
        error = "read timeout"
    except (OSError, http.client.HTTPException) as exc:  # boundary: one request of a load client
        error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    with lock:
        if outcome == "ok":
            result.ok += 1
        elif outcome == "timed_out":
            result.timed_out += 1
        else:
            result.failed += 1
            if len(result.errors) < 5 and error:
                result.errors.append(error)
        if first is not None:
            result.ttft_s.append(first)


def run_load(
    host: str, port: int, model: str, vocab: int, spec: LoadSpec, stop: threading.Event | None = None
) -> LoadResult:
    """Run *spec* against ``http://host:port`` until its duration ends (or *stop* is set); return the counts."""
    result = LoadResult()
    lock = threading.Lock()
    stop = stop or threading.Event()
    end = time.monotonic() + spec.duration_s
    shared_rng = random.Random(spec.seed)
    shared = [shared_rng.randrange(3, vocab) for _ in range(spec.prefix_tokens)]

    def client(index: int) -> None:
        rng = random.Random(spec.seed * 1000 + index)
        while time.monotonic() < end and not stop.is_set():
            body: dict[str, object] = {
                "model": model,
                "prompt": make_prompt(spec, rng, shared, vocab),
                "max_tokens": spec.max_tokens,
                "stream": True,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            remaining = end - time.monotonic()
            timeout = spec.client_timeout_s if spec.client_timeout_s else remaining + 30.0
            stream_completion(host, port, body, timeout, result, lock)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(spec.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=spec.duration_s + 120.0)
    return result

"""Running one step of a load test: open loop at scheduled send times, or closed loop at a fixed concurrency.

Open loop (a rate): request ``i`` is sent at ``start + offsets[i]`` whatever the server does, as real
users arrive; a slow server therefore sees requests pile up, which is what finds the knee. The client
holds at most ``max_in_flight`` requests; one that would exceed it is recorded as an error (the client,
not the server, was the limit) rather than sent late, so the arrival process stays honest.

Closed loop (a concurrency): ``concurrency`` workers each send the next request as soon as their
previous one finishes. Its requests may come from a generator (made as they are sent), and a ``stop``
event ends it early (a background load that another thread ends).

Both stop issuing after ``max_seconds`` and wait for what is in flight, which the client's own total
timeout bounds. Requests are sent on worker threads; ``on_result`` is called from them (it must be
thread-safe; the progress bar is).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from watchdog.loadtest.client import CompletionRequest, OpenAIClient, RequestResult


@dataclass(frozen=True)
class StepRun:
    """The results of one step and how long it took (first send to last completion)."""

    results: tuple[RequestResult, ...]
    duration_seconds: float
    not_sent: int  # requests left unsent when the step's time ran out


def _limited(request: CompletionRequest, limit: int, now: float) -> RequestResult:
    return RequestResult(sent_at=now, e2e=0.0, ttft=None, prompt_tokens=request.prompt_tokens,
                         error=f"client limit of {limit} requests in flight reached (not sent)")


def run_open_loop(client: OpenAIClient, requests: Sequence[CompletionRequest], offsets: Sequence[float],
                  max_seconds: float, max_in_flight: int = 256,
                  on_result: Callable[[RequestResult], None] | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> StepRun:
    """Send ``requests[i]`` at ``offsets[i]`` seconds after the start; see the module docstring."""
    results: list[RequestResult] = []
    lock = threading.Lock()
    slots = threading.BoundedSemaphore(max_in_flight)

    def record(result: RequestResult) -> None:
        with lock:
            results.append(result)
        if on_result is not None:
            on_result(result)

    def send(request: CompletionRequest) -> None:
        try:
            record(client.send(request))
        finally:
            slots.release()

    start = client.clock()
    sent = 0
    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="loadtest") as pool:
        for request, offset in zip(requests, offsets, strict=False):
            if offset > max_seconds:
                break
            delay = start + offset - client.clock()
            if delay > 0:
                sleep(delay)
            sent += 1
            if not slots.acquire(blocking=False):
                record(_limited(request, max_in_flight, client.clock()))
                continue
            pool.submit(send, request)
    duration = client.clock() - start  # the pool has waited for every request in flight
    return StepRun(results=tuple(results), duration_seconds=max(duration, 1e-9), not_sent=len(requests) - sent)


def run_closed_loop(client: OpenAIClient, requests: Iterable[CompletionRequest], concurrency: int,
                    max_seconds: float, on_result: Callable[[RequestResult], None] | None = None,
                    stop: threading.Event | None = None) -> StepRun:
    """``concurrency`` workers send ``requests`` back to back until they run out, ``max_seconds`` pass or
    ``stop`` is set (then the requests in flight finish). ``not_sent`` counts only for a sized ``requests``."""
    results: list[RequestResult] = []
    lock = threading.Lock()
    pending = iter(requests)
    taken = 0
    start = client.clock()

    def worker() -> None:
        nonlocal taken
        while True:
            with lock:
                if client.clock() - start > max_seconds or (stop is not None and stop.is_set()):
                    return
                request = next(pending, None)
                if request is None:
                    return
                taken += 1
            result = client.send(request)
            with lock:
                results.append(result)
            if on_result is not None:
                on_result(result)

    threads = [threading.Thread(target=worker, name=f"loadtest-{i}", daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    not_sent = len(requests) - taken if isinstance(requests, Sized) else 0
    return StepRun(results=tuple(results), duration_seconds=max(client.clock() - start, 1e-9), not_sent=not_sent)

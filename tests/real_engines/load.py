"""The lane's load phases on top of the package's streaming client (:mod:`watchdog.loadtest`).

A phase is N closed-loop clients sending streaming completions for a fixed time (or until a stop event).
Prompts are token ids, so prompt length and shared prefixes are exact: ``prefix="shared"`` gives every
request the same first ``prefix_tokens`` ids, ``prefix="unique"`` a fresh random prefix per request.
``ignore_eos`` makes every answer exactly ``max_tokens`` long. With ``client_timeout_s`` a request that
outlives it is closed (the engine aborts it) and the client sends the next at once: clients that time
out and retry. With ``ramp_s`` the clients join one by one, evenly over that time (a burst that builds up,
as real ones do), each with its own prompts.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from watchdog.loadtest.client import CompletionRequest, OpenAIClient, RequestResult, percentile
from watchdog.loadtest.runner import run_closed_loop

PrefixMode = Literal["none", "shared", "unique"]
FIRST_ID = 3  # ids 0..2 are <unk>, <s>, </s>


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
    ramp_s: float = 0.0


@dataclass(frozen=True)
class LoadResult:
    """What the clients saw."""

    results: tuple[RequestResult, ...]

    def summary(self) -> str:
        """One line: counts and median TTFT."""
        ok = sum(r.ok for r in self.results)
        timed_out = sum(r.timed_out for r in self.results)
        failed = len(self.results) - ok - timed_out
        p50 = percentile([r.ttft for r in self.results if r.ttft is not None], 50)
        median = f"{p50:.2f}s" if p50 is not None else "-"
        line = f"ok={ok} timed_out={timed_out} failed={failed} ttft_p50={median}"
        errors = sorted({r.error for r in self.results if r.error and not r.timed_out})[:3]
        return line + (f" errors: {'; '.join(errors)}" if errors else "")


def prompts(spec: LoadSpec, vocab: int) -> Iterator[tuple[int, ...]]:
    """Token ids of the phase's prompts, endless (pure given the seed): prefix by ``spec.prefix``, then random ids."""
    rng = random.Random(spec.seed)
    shared = tuple(rng.randrange(FIRST_ID, vocab) for _ in range(spec.prefix_tokens))
    while True:
        if spec.prefix == "shared":
            head = shared
        elif spec.prefix == "unique":
            head = tuple(rng.randrange(FIRST_ID, vocab) for _ in range(spec.prefix_tokens))
        else:
            head = ()
        tail = tuple(rng.randrange(FIRST_ID, vocab) for _ in range(max(spec.prompt_tokens - len(head), 1)))
        yield head + tail


def run_load(base_url: str, model: str, vocab: int, spec: LoadSpec, stop: threading.Event | None = None) -> LoadResult:
    """Run *spec* against *base_url* until its duration ends (or *stop* is set); requests in flight finish.
    With ``spec.ramp_s``, client ``i`` (of ``concurrency``) joins ``i * ramp_s / concurrency`` seconds in and
    sends ``prompts()`` of seed ``spec.seed + i``; the duration counts from the first client's start."""
    timeout = spec.client_timeout_s if spec.client_timeout_s else spec.duration_s + 30.0
    client = OpenAIClient(base_url, read_timeout=timeout, total_timeout=timeout)

    def requests(phase: LoadSpec) -> Iterator[CompletionRequest]:
        return (CompletionRequest(prompt=ids, max_tokens=phase.max_tokens, model=model, prompt_tokens=len(ids))
                for ids in prompts(phase, vocab))

    if not spec.ramp_s:
        return LoadResult(run_closed_loop(client, requests(spec), spec.concurrency, spec.duration_s, stop=stop).results)
    results: list[RequestResult] = []
    lock = threading.Lock()
    began = time.monotonic()
    quit_early = stop if stop is not None else threading.Event()

    def join(i: int) -> None:
        offset = i * spec.ramp_s / spec.concurrency
        if quit_early.wait(offset) or offset >= spec.duration_s:
            return
        phase = dataclasses.replace(spec, seed=spec.seed + i)
        run = run_closed_loop(client, requests(phase), 1, spec.duration_s - (time.monotonic() - began),
                              stop=quit_early)
        with lock:
            results.extend(run.results)

    threads = [threading.Thread(target=join, args=(i,), name=f"ramp-{i}", daemon=True)
               for i in range(spec.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadResult(tuple(results))

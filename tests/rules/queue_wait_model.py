#!/usr/bin/env python3
"""Writes ``rules/tests/queue_wait.yaml``: the predicted queue wait against a FIFO queue simulated here.

The engine of the model: ``SLOTS`` requests run at once, each for ``SERVICE_SECONDS``, first come first
served; its service capacity is ``SLOTS / SERVICE_SECONDS`` requests per second. Each scenario gives the
arrivals per second (and, for a retry storm, how long a client waits in the queue before it gives up); the
simulation steps one second at a time (finish, arrive, abort, admit) and the engine's series are sampled
every ``SCRAPE_SECONDS`` as an agent (or Prometheus) scraping it would see them:

- ``vllm:num_requests_running`` / ``_waiting``, ``vllm:generation_tokens_total`` (``TOKENS_PER_SECOND`` per
  running request), ``vllm:request_success_total{finished_reason}`` (``stop``, and ``abort`` where the
  engine counts client aborts), ``vllm:e2e_request_latency_seconds_{sum,count}`` and
  ``vllm:request_queue_time_seconds_{sum,count}`` for every request that finished, and
  ``http_requests_total{status="2xx"}`` for every completion request answered (finished or aborted);
- ``test:true_queue_wait_seconds``: what a request arriving at that second really waits in the queue
  before its first schedule (known from the simulation, not an engine series). In the retry storm, where
  the arrivals of a second may give up, it is the mean queue time of the requests admitted in the last
  15 s, what the engine's own queue-time histogram shows.

The tests assert ``0.5 <= engine:predicted_queue_wait_seconds / test:true_queue_wait_seconds <= 2`` at
every checked time (15 s after a burst's onset and on), so they hold the rule to the model, not to a number
copied from a run.

Regenerate (from the repository root): ``python -m tests.rules.queue_wait_model > rules/tests/queue_wait.yaml``.
``tests/rules/test_queue_wait_model.py`` checks the file is what this module writes.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

SLOTS = 8
SERVICE_SECONDS = 4
SCRAPE_SECONDS = 5
TOKENS_PER_SECOND = 25
LABELS = 'instance="h:8000",model_name="m",engine="0"'


@dataclass
class Trace:
    """Per-second readings of one simulated engine (index = second)."""

    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    generation_tokens: list[int] = field(default_factory=list)
    finished_stop: list[int] = field(default_factory=list)
    finished_abort: list[int] = field(default_factory=list)
    e2e_sum: list[float] = field(default_factory=list)
    queue_sum: list[float] = field(default_factory=list)
    http_2xx: list[int] = field(default_factory=list)
    true_wait: list[float | None] = field(default_factory=list)


def simulate(arrivals: Callable[[int], int], seconds: int, patience: int | None = None) -> Trace:
    """Step the FIFO engine one second at a time; ``patience`` seconds in the queue before a client aborts."""
    queue: deque[int] = deque()  # arrival second of each waiting request
    running: list[tuple[int, int, int]] = []  # (finish second, admission second, arrival second)
    admitted_at: dict[int, list[int]] = {}  # second -> queue waits of the requests admitted then
    last_arrival_wait: dict[int, int] = {}  # second -> wait of the last request that arrived then
    pending_last: dict[int, int] = {}  # arrival second -> index among that second's arrivals
    trace = Trace()
    tokens = stop = abort = http = 0
    e2e = queued = 0.0
    for t in range(seconds):
        for request in [r for r in running if r[0] == t]:  # observed at the finish, as vLLM does
            running.remove(request)
            finish, admitted, arrived = request
            stop += 1
            http += 1
            e2e += finish - arrived
            queued += admitted - arrived
        n = arrivals(t)
        for _ in range(n):
            queue.append(t)
        if n:
            pending_last[t] = n
        if patience is not None:
            while queue and t - queue[0] >= patience:
                arrived = queue.popleft()
                abort += 1
                http += 1
        while queue and len(running) < SLOTS:
            arrived = queue.popleft()
            running.append((t + SERVICE_SECONDS, t, arrived))
            admitted_at.setdefault(t, []).append(t - arrived)
            if arrived in pending_last:  # the last of that second's arrivals is admitted last
                pending_last[arrived] -= 1
                if pending_last[arrived] == 0:
                    last_arrival_wait[arrived] = t - arrived
        tokens += TOKENS_PER_SECOND * len(running)
        trace.running.append(len(running))
        trace.waiting.append(len(queue))
        trace.generation_tokens.append(tokens)
        trace.finished_stop.append(stop)
        trace.finished_abort.append(abort)
        trace.e2e_sum.append(e2e)
        trace.queue_sum.append(queued)
        trace.http_2xx.append(http)
    for t in range(seconds):
        if patience is None:
            trace.true_wait.append(float(last_arrival_wait[t]) if t in last_arrival_wait else None)
        else:
            waits = [w for s in range(t - 14, t + 1) for w in admitted_at.get(s, [])]
            trace.true_wait.append(sum(waits) / len(waits) if waits else None)
    return trace


def fmt(value: float | None) -> str:
    """One input value in promtool's notation (``_`` for no sample)."""
    if value is None:
        return "_"
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def sampled(values: Sequence[float | None], missing: range = range(0)) -> str:
    """Every ``SCRAPE_SECONDS``-th value, ``_`` where a scrape was missed (seconds in ``missing``)."""
    return " ".join("_" if t in missing else fmt(values[t]) for t in range(0, len(values), SCRAPE_SECONDS))


def series(job: str, trace: Trace, missing: range = range(0), *, count_aborts: bool = True,
           http: bool = False) -> Iterator[tuple[str, str]]:
    """The input series of one engine ``job`` from ``trace``; engine scrapes in ``missing`` are lost."""
    lab = f'job="{job}",{LABELS}'
    yield f'up{{job="{job}",instance="h:8000"}}', sampled([1] * len(trace.running), missing)
    yield f"vllm:num_requests_running{{{lab}}}", sampled(trace.running, missing)
    yield f"vllm:num_requests_waiting{{{lab}}}", sampled(trace.waiting, missing)
    yield f"vllm:generation_tokens_total{{{lab}}}", sampled(trace.generation_tokens, missing)
    yield f'vllm:request_success_total{{{lab},finished_reason="stop"}}', sampled(trace.finished_stop, missing)
    aborts = trace.finished_abort if count_aborts else [0] * len(trace.finished_abort)
    yield f'vllm:request_success_total{{{lab},finished_reason="abort"}}', sampled(aborts, missing)
    yield f"vllm:e2e_request_latency_seconds_sum{{{lab}}}", sampled(trace.e2e_sum, missing)
    yield f"vllm:e2e_request_latency_seconds_count{{{lab}}}", sampled(trace.finished_stop, missing)
    yield f"vllm:request_queue_time_seconds_sum{{{lab}}}", sampled(trace.queue_sum, missing)
    yield f"vllm:request_queue_time_seconds_count{{{lab}}}", sampled(trace.finished_stop, missing)
    if http:
        http_lab = f'job="{job}",instance="h:8000",handler="/v1/completions",method="POST",status="2xx"'
        yield f"http_requests_total{{{http_lab}}}", sampled(trace.http_2xx, missing)
    yield f'test:true_queue_wait_seconds{{job="{job}",instance="h:8000"}}', sampled(trace.true_wait)


def within_factor_two(job: str, times: Sequence[int]) -> list[str]:
    """promql_expr_test entries: the predicted wait is within a factor of two of the true one at ``times``."""
    ratio = (f'engine:predicted_queue_wait_seconds{{job="{job}"}}'
             f' / on (job, instance) test:true_queue_wait_seconds{{job="{job}"}}')
    out = []
    for t in times:
        out += [f"      - expr: count(({ratio}) >= 0.5 <= 2)",
                f"        eval_time: {t}s",
                "        exp_samples:",
                "          - labels: '{}'",
                "            value: 1"]
    return out


def unknown(job: str, times: Sequence[int]) -> list[str]:
    """promql_expr_test entries: the predicted wait is absent (unknown) at ``times``."""
    out = []
    for t in times:
        out += [f'      - expr: engine:predicted_queue_wait_seconds{{job="{job}"}}',
                f"        eval_time: {t}s",
                "        exp_samples: []"]
    return out


def test_block(name: str, comment: Sequence[str], engines: Sequence[tuple[str, Trace, dict[str, object]]],
               seconds: int, checks: Sequence[str]) -> list[str]:
    out = [f"  # {line}" if line else "  #" for line in comment]
    out += [f"  - name: {name}", f"    interval: {SCRAPE_SECONDS}s", "    input_series:"]
    for job, trace, options in engines:
        for s, values in series(job, trace, **options):  # type: ignore[arg-type]
            out += [f"      - series: '{s}'", f"        values: '{values}'"]
    out += ["    promql_expr_test:", *checks]
    del seconds
    return out


BURST_START, BURST_END = 240, 330


def burst_arrivals(t: int) -> int:
    """1/s for 3 minutes (half the capacity), an idle minute, then 4/s (twice the capacity) for 90 s."""
    if t < 180:
        return 1
    if BURST_START <= t < BURST_END:
        return 4
    return 0


STORM_START = 120


def storm_arrivals(t: int) -> int:
    """1/s, then from ``STORM_START`` 10/s: five times the capacity, clients giving up after 5 s."""
    return 1 if t < STORM_START else 10


HEADER = """\
# GENERATED by `python -m tests.rules.queue_wait_model > rules/tests/queue_wait.yaml` from
# tests/rules/queue_wait_model.py (a FIFO engine of 8 slots, 4 s per request, 2 requests/s of capacity,
# scraped every 5 s): edit that. engine:predicted_queue_wait_seconds must stay within a factor of two of the
# wait the model gives (test:true_queue_wait_seconds) from 15 s after a burst's onset. Both promtool and
# `inference-watchdog rules test` run this file.
rule_files:
  - ../engines.yaml
evaluation_interval: 5s
group_eval_order:
  - engines

tests:
"""


def render() -> str:
    """The whole ``rules/tests/queue_wait.yaml``."""
    seconds = 450
    burst = simulate(burst_arrivals, seconds)
    storm = simulate(storm_arrivals, 300, patience=5)
    burst_checks = [BURST_START + s for s in (15, 20, 30, 45, 60, 75, 90)]
    lines: list[str] = []
    lines += test_block(
        "burst after an idle minute",
        ["A burst at twice the capacity after an idle minute. A 1-minute completion rate still holds the idle",
         "minute 15 s into the burst (the wait read 5x too short); the shortest window with samples, and the",
         "running batch over the mean service time, do not."],
        [("burst", burst, {})], seconds, within_factor_two("burst", burst_checks))
    lines.append("")
    lines += test_block(
        "retry storm, aborts leave the queue",
        ["Five times the capacity; clients give up after 5 s in the queue, so the queue moves at the arrival",
         "rate and no admitted request waits over 5 s. Counting only finished requests as leaving read 25 s.",
         "'storm' counts aborts as finished_reason=\"abort\"; 'storm-http' is vLLM 0.32, whose engine never sees",
         "them: its HTTP server's answered requests minus the finished ones are the aborts."],
        [("storm", storm, {}), ("storm-http", storm, {"count_aborts": False, "http": True})], 300,
        within_factor_two("storm", [STORM_START + s for s in (15, 30, 60, 120, 175)])
        + within_factor_two("storm-http", [STORM_START + s for s in (15, 30, 60, 120, 175)]))
    lines.append("")
    gap = range(BURST_START + 20, BURST_START + 45)
    lines += test_block(
        "missing samples in a burst",
        ["The same burst with 25 s of engine scrapes lost from 20 s into it (a saturated host). While the",
         "latest sample is over 2.5 scrape intervals old, and until the last minute again holds 3/4 of its",
         "scrapes, the wait is unknown (absent): the recorded engine:* series hold their last value through",
         "the gap, so a short window read across it is flat, and one that starts in it counts the whole gap's",
         "departures as its own. Then it is within a factor of two again."],
        [("gap", burst, {"missing": gap})], seconds,
        within_factor_two("gap", [gap.start - 5])
        + unknown("gap", [gap.start + 15, gap.stop - 5, gap.stop, gap.stop + 15, gap.stop + 40])
        + within_factor_two("gap", [gap.stop + 45, gap.stop + 60, BURST_END]))
    return HEADER + "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())

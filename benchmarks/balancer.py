#!/usr/bin/env python3
"""Fault → HAProxy stops sending the engine new requests: the real agent (1 s tick) steering a real HAProxy.

Guards the routing target: a lost GPU takes its engine out of HAProxy's rotation within one tick plus one
agent check (HAProxy ``agent-inter 1s``) plus 0.5 s (2.5 s); a wedged engine within the scrape timeout
plus the N-of-M confirmation plus one agent check.

    .venv/bin/python benchmarks/balancer.py [--trials 6] [--faults wedged,gpu_lost,manual] [--clients 4]

Each trial, with client load running through HAProxy (``--clients`` threads of streaming completions),
waits a random part of a tick, injects the fault into engine ``vllm-a`` and polls HAProxy's stats socket
every 20 ms until the server is out of rotation. Reported per fault: fault → agent verdict, verdict →
HAProxy out, and fault → HAProxy out (p50 and p90), the requests HAProxy sent the engine after the
agent's verdict changed, and the client requests that failed. Faults:

- ``wedged``: SIGSTOP the engine simulator (it answers nothing; its scrapes time out); then SIGCONT and
  wait for its readmission before the next trial. One node for every trial.
- ``gpu_lost``: the fake NVML reports GPU 1 (in vllm-a's TP group) lost. A new node each trial (the GPU
  stays flagged as needing a reset).
- ``manual``: an operator's ``engine drain`` (the state database), then ``engine admit``: the path every
  verdict takes from the agent's tick to HAProxy, without detection.

Needs haproxy (``/usr/sbin/haproxy``; scripts/test installs it). HAProxy runs no health check of its own
here, so what it does is the agent's doing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.balancer_agent import Node, node_behind_haproxy  # noqa: E402
from tests.support.haproxy import HAPROXY  # noqa: E402
from tests.support.llm import ClientLoad  # noqa: E402
from watchdog.serving.model import ManualState, Verdict  # noqa: E402

OUT = {Verdict.DRAIN, Verdict.DOWN, Verdict.SHED}
JOB = "vllm-a"
QUIET = {"notifiers": {"log": {"enabled": False}}}
"""The demo config's log notifier would print every alert between the figures."""


@dataclass(frozen=True)
class Trial:
    """One fault's timings (seconds) and counts."""

    to_verdict: float
    verdict_to_out: float
    to_out: float
    sent_after_verdict: int
    failed: int


def _taken(node: Node) -> int:
    return node.haproxy.servers()[JOB].requests


def _settle(node: Node) -> None:
    node.wait_verdict(JOB, {Verdict.ADMIT}, 60)
    node.wait_verdict("vllm-b", {Verdict.ADMIT}, 60)
    node.haproxy.wait_for(lambda s: all(v.takes_new_requests for v in s.values()), 60, "both servers in")


def _measure(node: Node, load: ClientLoad, fault: str) -> Trial:
    time.sleep(random.uniform(0.0, node.agent.settings.tick_interval_seconds))
    started = time.monotonic()
    if fault == "wedged":
        node.freeze(JOB)
    elif fault == "gpu_lost":
        node.lose_gpu(1)
    else:
        now = time.time()
        node.agent.manual_states.set(ManualState(JOB, Verdict.DRAIN, "benchmark", "balancer.py", now))
    verdict_at = started + node.wait_verdict(JOB, OUT, 60)
    at_verdict = _taken(node)
    node.haproxy.wait_for(lambda s: not s[JOB].takes_new_requests, 10, "out of rotation")
    out_at = time.monotonic()
    sent_after = _taken(node) - at_verdict
    return Trial(verdict_at - started, out_at - verdict_at, out_at - started, sent_after,
                 len(load.failed_since(started)))


def _recover(node: Node, fault: str) -> None:
    if fault == "wedged":
        node.thaw(JOB)
    elif fault == "manual":
        node.agent.manual_states.clear(JOB)
    node.haproxy.wait_for(lambda s: s[JOB].takes_new_requests, 90, "readmitted")


def run_fault(fault: str, trials: int, clients: int) -> list[Trial]:
    """``trials`` measurements of one fault."""
    out: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="balancer-bench-") as tmp:
        if fault == "gpu_lost":
            for index in range(trials):
                workdir = Path(tmp) / f"trial-{index}"
                workdir.mkdir()
                with node_behind_haproxy(workdir, extra=QUIET) as node, \
                        ClientLoad(node.haproxy.port, clients=clients) as load:
                    _settle(node)
                    time.sleep(2)
                    out.append(_measure(node, load, fault))
            return out
        with node_behind_haproxy(Path(tmp), extra=QUIET) as node, \
                ClientLoad(node.haproxy.port, clients=clients) as load:
            _settle(node)
            for _ in range(trials):
                time.sleep(2)
                out.append(_measure(node, load, fault))
                _recover(node, fault)
                _settle(node)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between the closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def report(fault: str, results: list[Trial]) -> None:
    """Print one fault's line: p50/p90 of each interval, and the counts."""
    def pair(values: list[float]) -> str:
        return f"p50 {percentile(values, 0.5):.2f} s, p90 {percentile(values, 0.9):.2f} s"

    print(f"{fault:9s} trials={len(results)}")
    print(f"  fault -> verdict        {pair([r.to_verdict for r in results])}")
    print(f"  verdict -> HAProxy out  {pair([r.verdict_to_out for r in results])}")
    print(f"  fault -> HAProxy out    {pair([r.to_out for r in results])}  "
          f"(max {max(r.to_out for r in results):.2f} s)")
    print(f"  requests sent after the verdict: {[r.sent_after_verdict for r in results]}; "
          f"failed client requests: {[r.failed for r in results]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--faults", default="wedged,gpu_lost,manual")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if HAPROXY is None:
        print("haproxy is not installed (apt-get install haproxy)", file=sys.stderr)
        return 2
    random.seed(26)
    for fault in args.faults.split(","):
        if fault not in ("wedged", "gpu_lost", "manual"):
            parser.error(f"unknown fault {fault!r}")
        report(fault, run_fault(fault, args.trials, args.clients))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""End to end: the real agent (demo config, default rule pack, fake NVML, 1 s ticks on the wall clock) in
front of which a real HAProxy balances two engine simulator processes, client load through HAProxy.
Faults: an engine wedged (SIGSTOP), a GPU of an engine's TP group lost (fake NVML), an engine's KV pool
filled (its gauges). For each: how long until HAProxy stops sending the engine new requests, how many
requests reached it after the agent said so, how many client requests failed, and its readmission after
recovery. Then the agent losing its own data: HAProxy keeps every engine (fail open)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.balancer_agent import Node, node_behind_haproxy, scenario_doc
from tests.support.haproxy import ServerState, needs_haproxy
from tests.support.llm import ClientLoad
from watchdog.serving.model import Verdict

pytestmark = [needs_haproxy, pytest.mark.slow]

CLIENTS = 4
INTER_SECONDS = 1.0
OUT = {Verdict.DRAIN, Verdict.DOWN, Verdict.SHED}


def serving(servers: dict[str, ServerState]) -> bool:
    return all(s.takes_new_requests for s in servers.values())


def settle(node: Node) -> None:
    """Both engines admitted by the agent and taking requests through HAProxy."""
    node.wait_verdict("vllm-a", {Verdict.ADMIT}, 30)
    node.wait_verdict("vllm-b", {Verdict.ADMIT}, 30)
    node.haproxy.wait_for(serving, 10, "both servers up")
    before = node.haproxy.servers()
    node.haproxy.wait_for(lambda s: all(s[j].requests > before[j].requests for j in s), 10,
                          "both servers taking requests")


def taken(node: Node, job: str) -> int:
    return node.haproxy.servers()[job].requests


def out_of_rotation(node: Node, fault_at: float, verdict_within: float) -> tuple[float, int, float, float]:
    """Wait for the agent's verdict and HAProxy's obedience. Returns the seconds from the fault to HAProxy
    taking vllm-a out, the requests HAProxy sent vllm-a after the agent's verdict changed, the most it
    could have sent in that time (vllm-a's request rate before the fault over HAProxy's check interval
    plus a second, and one per client), and the moment HAProxy took it out (monotonic)."""
    rate_from = (time.monotonic(), taken(node, "vllm-a"))
    node.wait_verdict("vllm-a", OUT, verdict_within)
    said = time.monotonic()
    at_verdict = taken(node, "vllm-a")
    lag = node.haproxy.wait_for(lambda s: not s["vllm-a"].takes_new_requests, INTER_SECONDS + 2,
                                "HAProxy obeying the verdict")
    out_at = time.monotonic()
    at_obey = taken(node, "vllm-a")
    other = taken(node, "vllm-b")
    time.sleep(3)
    assert taken(node, "vllm-a") == at_obey, "HAProxy sent the engine new requests after taking it out"
    # The other engine takes the load (once clients held by a frozen engine have given up).
    node.haproxy.wait_for(lambda s: s["vllm-b"].requests > other, 15, "vllm-b taking the load")
    rate = (at_verdict - rate_from[1]) / max(said - rate_from[0], 1.0)
    return out_at - fault_at, at_obey - at_verdict, rate * (lag + 1.0) + CLIENTS, out_at


def test_a_wedged_engine_is_taken_out_and_readmitted_when_it_answers_again(tmp_path: Path) -> None:
    # Clients give up after 3 s: a frozen engine holds the requests it was sent.
    with node_behind_haproxy(tmp_path) as node, \
            ClientLoad(node.haproxy.port, clients=CLIENTS, timeout=3) as load:
        settle(node)
        fault_at = time.monotonic()
        node.freeze("vllm-a")
        # The scrape times out (2 s), N-of-M (3 of 5 readings) confirms it, then HAProxy's next check.
        seconds, after_verdict, _, out_at = out_of_rotation(node, fault_at, verdict_within=20)
        assert seconds < 20
        assert after_verdict <= CLIENTS  # a frozen engine holds each client's request: one per client at most
        assert load.failed_since(out_at) == []  # once out, every request goes to vllm-b and succeeds
        node.thaw("vllm-a")
        back = node.haproxy.wait_for(lambda s: s["vllm-a"].takes_new_requests, 40, "vllm-a readmitted")
        assert node.verdict("vllm-a") is Verdict.ADMIT
        at_back = taken(node, "vllm-a")
        node.haproxy.wait_for(lambda s: s["vllm-a"].requests > at_back, 5, "vllm-a taking requests")
        assert back > 5  # not at the first answer: hysteresis holds the engine out for a while
        assert load.failed_since(out_at) == []


def test_a_lost_gpu_drains_its_engine_at_once(tmp_path: Path) -> None:
    with node_behind_haproxy(tmp_path) as node, ClientLoad(node.haproxy.port, clients=CLIENTS) as load:
        settle(node)
        fault_at = time.monotonic()
        node.lose_gpu(1)  # in vllm-a's TP group (GPUs 0-1)
        seconds, after_verdict, most, _ = out_of_rotation(node, fault_at, verdict_within=5)
        assert seconds < 1 + INTER_SECONDS + 2  # the next tick, HAProxy's next check, slack for a loaded machine
        assert after_verdict <= most
        current = node.agent.serving.verdict("vllm-a")
        assert current is not None and "gpu_lost" in {r.code for r in current.reasons}
        assert "engines/vllm-a enters drain state" in node.haproxy.log_path.read_text()
        assert load.failed_since(fault_at) == []  # the engine itself still answers: nothing is cut
        assert node.verdict("vllm-b") is Verdict.ADMIT


def test_a_lost_gpu_takes_the_engine_out_through_httpchk_too(tmp_path: Path) -> None:
    with node_behind_haproxy(tmp_path, httpchk=True) as node, \
            ClientLoad(node.haproxy.port, clients=CLIENTS) as load:
        settle(node)
        fault_at = time.monotonic()
        node.lose_gpu(1)
        seconds, after_verdict, most, _ = out_of_rotation(node, fault_at, verdict_within=5)
        assert seconds < 1 + INTER_SECONDS + 2
        assert after_verdict <= most
        assert "engines/vllm-a is DOWN" in node.haproxy.log_path.read_text()
        assert "code: 503" in node.haproxy.log_path.read_text()
        assert load.failed_since(fault_at) == []


def test_a_full_kv_pool_is_shed_and_readmitted_when_it_frees(tmp_path: Path) -> None:
    doc = scenario_doc(kv_usage_a="0.3x24 0.97x20 0.3x900")  # full from 25 s to 45 s after the start
    with node_behind_haproxy(tmp_path, doc) as node, ClientLoad(node.haproxy.port, clients=CLIENTS) as load:
        settle(node)
        fault_at = node.start + 25
        time.sleep(max(0.0, fault_at - time.time()))
        fault_mono = time.monotonic()
        seconds, after_verdict, most, _ = out_of_rotation(node, fault_mono, verdict_within=15)
        assert node.verdict("vllm-a") is Verdict.SHED
        assert seconds < 10
        assert after_verdict <= most
        node.haproxy.wait_for(lambda s: s["vllm-a"].takes_new_requests, 45, "vllm-a readmitted")
        assert time.time() > node.start + 45  # not before the pool freed
        assert load.failed_since(fault_mono) == []


def test_an_agent_that_loses_its_data_fails_open(tmp_path: Path) -> None:
    with node_behind_haproxy(tmp_path) as node, ClientLoad(node.haproxy.port, clients=CLIENTS) as load:
        settle(node)
        node.freeze("vllm-b")
        node.wait_verdict("vllm-b", OUT, 15)
        node.haproxy.wait_for(lambda s: not s["vllm-b"].takes_new_requests, 3, "vllm-b out")
        node.thaw("vllm-b")
        # The agent stops ticking (hung, or its collectors all failing): its verdicts go stale and it says
        # it is untrusted; HAProxy gets "up ready" for every engine and never loses both.
        stalled = time.monotonic()
        release = threading.Event()
        node.agent.before_tick.append(lambda now: release.wait(120))
        try:
            node.haproxy.wait_for(serving, 20, "every engine back in rotation (fail open)")
            assert not node.agent.serving.trusted()
            for _ in range(30):
                assert serving(node.haproxy.servers())
                time.sleep(0.1)
            assert len(load.failed_since(stalled)) <= CLIENTS
        finally:
            release.set()

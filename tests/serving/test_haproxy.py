"""A real HAProxy in front of two simulated engines obeys the agent's verdicts, read from a verdict
source the test sets by hand: through the agent-check port and through ``option httpchk`` on the
exporter's health endpoint. Client load runs through HAProxy the whole time; HAProxy's stats socket says
which server took each request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.haproxy import Engine as Server
from tests.support.haproxy import HAProxy, ServerState, needs_haproxy
from tests.support.llm import ClientLoad, SimEngine, sim_engines, write_scenario
from tests.support.verdicts import SettableVerdicts
from watchdog.exporter.server import ExporterServer, exporter_for_store
from watchdog.serving.agentcheck import AgentCheckServer
from watchdog.serving.model import Verdict
from watchdog.store import Store

pytestmark = [needs_haproxy, pytest.mark.slow]

JOBS = ["vllm-a", "vllm-b"]
INTER_SECONDS = 1.0
OBEY_WITHIN_SECONDS = INTER_SECONDS + 2.0
"""A verdict reaches HAProxy at its next check (at most ``inter``) plus its own scheduling; 2 s of slack
for a loaded CI machine."""


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SimEngine]]:
    scenario = write_scenario(tmp_path_factory.mktemp("scenario") / "balancer.yaml", JOBS)
    with sim_engines(scenario, JOBS) as started:
        yield started


@pytest.fixture
def source() -> SettableVerdicts:
    return SettableVerdicts(JOBS)


@pytest.fixture
def agent_check(source: SettableVerdicts) -> Iterator[AgentCheckServer]:
    server = AgentCheckServer(lambda: source, "127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def exporter(source: SettableVerdicts) -> Iterator[ExporterServer]:
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True)
    server.verdicts = lambda: source
    server.start()
    yield server
    server.stop()


def balancer(tmp_path: Path, engines: dict[str, SimEngine], agent_check: AgentCheckServer | None = None,
             exporter: ExporterServer | None = None) -> HAProxy:
    return HAProxy(tmp_path, [Server(job, engines[job].port) for job in JOBS],
                   agent_check_port=agent_check.port if agent_check else None,
                   health_port=exporter.port if exporter else None, inter=f"{INTER_SECONDS:g}s")


def both_serving(servers: dict[str, ServerState]) -> bool:
    return all(servers[job].takes_new_requests for job in JOBS)


def taken(haproxy: HAProxy, job: str) -> int:
    return haproxy.servers()[job].requests


def wait_until_both_take_requests(haproxy: HAProxy) -> None:
    haproxy.wait_for(both_serving, 10, "both servers up")
    before = {job: taken(haproxy, job) for job in JOBS}
    haproxy.wait_for(lambda s: all(s[job].requests > before[job] for job in JOBS), 10,
                     "both servers taking requests")


def assert_drain_cycle(haproxy: HAProxy, source: SettableVerdicts, load: ClientLoad, verdict: Verdict) -> None:
    """``verdict`` on vllm-a: HAProxy stops sending it new requests within the bound, sends it none after,
    clients see no failure (vllm-b takes the load); ``admit`` readmits it."""
    wait_until_both_take_requests(haproxy)
    said = time.monotonic()
    source.set("vllm-a", verdict)
    obeyed = haproxy.wait_for(lambda s: not s["vllm-a"].takes_new_requests, OBEY_WITHIN_SECONDS,
                              f"vllm-a out of rotation on {verdict.value}")
    assert obeyed <= OBEY_WITHIN_SECONDS
    at_obey = taken(haproxy, "vllm-a")
    other = taken(haproxy, "vllm-b")
    time.sleep(2 * INTER_SECONDS + 0.5)
    assert taken(haproxy, "vllm-a") == at_obey, "HAProxy sent the drained server new requests"
    assert taken(haproxy, "vllm-b") > other
    assert load.failed_since(said) == []
    source.set("vllm-a", Verdict.ADMIT)
    haproxy.wait_for(lambda s: s["vllm-a"].takes_new_requests, OBEY_WITHIN_SECONDS, "vllm-a readmitted")
    haproxy.wait_for(lambda s: s["vllm-a"].requests > at_obey, 5, "vllm-a taking requests again")
    assert load.failed_since(said) == []


@pytest.mark.parametrize("verdict", [Verdict.DRAIN, Verdict.SHED, Verdict.DOWN])
def test_agent_check_takes_the_engine_out_and_readmits_it(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts, agent_check: AgentCheckServer,
        verdict: Verdict) -> None:
    with balancer(tmp_path, engines, agent_check=agent_check) as haproxy, ClientLoad(haproxy.port) as load:
        assert_drain_cycle(haproxy, source, load, verdict)
        expected = "engines/vllm-a is DOWN" if verdict is Verdict.DOWN else "engines/vllm-a enters drain state"
        assert expected in haproxy.log_path.read_text()


@pytest.mark.parametrize("verdict", [Verdict.DRAIN, Verdict.SHED, Verdict.DOWN])
def test_httpchk_on_the_health_endpoint_takes_the_engine_out_and_readmits_it(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts, exporter: ExporterServer,
        verdict: Verdict) -> None:
    with balancer(tmp_path, engines, exporter=exporter) as haproxy, ClientLoad(haproxy.port) as load:
        assert_drain_cycle(haproxy, source, load, verdict)
        code = "429" if verdict is Verdict.SHED else "503"
        assert f"code: {code}" in haproxy.log_path.read_text()


def test_short_only_gets_a_smaller_share_through_agent_check(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts,
        agent_check: AgentCheckServer) -> None:
    with balancer(tmp_path, engines, agent_check=agent_check) as haproxy, ClientLoad(haproxy.port) as load:
        wait_until_both_take_requests(haproxy)
        source.set("vllm-a", Verdict.SHORT_ONLY, weight_percent=50)
        haproxy.wait_for(lambda s: s["vllm-a"].weight == 50, OBEY_WITHIN_SECONDS, "vllm-a at weight 50")
        before = {job: taken(haproxy, job) for job in JOBS}
        time.sleep(3)
        got = {job: taken(haproxy, job) - before[job] for job in JOBS}
        assert got["vllm-a"] > 0, "short-only still serves"
        assert got["vllm-a"] / (got["vllm-a"] + got["vllm-b"]) < 0.45, got  # 1/3 with weights 50:100
        assert load.failed_since(0) == []


def test_an_untrusted_agent_fails_open_and_never_drains_both(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts, agent_check: AgentCheckServer,
        exporter: ExporterServer) -> None:
    with balancer(tmp_path, engines, agent_check=agent_check, exporter=exporter) as haproxy, \
            ClientLoad(haproxy.port) as load:
        wait_until_both_take_requests(haproxy)
        source.set("vllm-a", Verdict.DRAIN)
        haproxy.wait_for(lambda s: not s["vllm-a"].takes_new_requests, OBEY_WITHIN_SECONDS, "vllm-a drained")
        # The agent loses its data: every verdict says drain, but it is not trusted. Both interfaces fail
        # open: the drained server comes back and nothing else goes out.
        source.set_trusted(False)
        source.set("vllm-b", Verdict.DRAIN)
        lost = time.monotonic()
        haproxy.wait_for(both_serving, OBEY_WITHIN_SECONDS, "both servers back (fail open)")
        for _ in range(int(3 * INTER_SECONDS / 0.1)):
            assert both_serving(haproxy.servers())
            time.sleep(0.1)
        assert load.failed_since(lost) == []


def test_an_agent_check_port_that_goes_away_changes_nothing(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts,
        agent_check: AgentCheckServer) -> None:
    with balancer(tmp_path, engines, agent_check=agent_check) as haproxy, ClientLoad(haproxy.port) as load:
        wait_until_both_take_requests(haproxy)
        agent_check.stop()  # the agent died: HAProxy cannot reach it
        stopped = time.monotonic()
        haproxy.wait_for(lambda s: s["vllm-a"].agent_status.startswith("L4"), 5 * INTER_SECONDS,
                         "an agent check that could not connect")
        for _ in range(int(2 * INTER_SECONDS / 0.1)):
            assert both_serving(haproxy.servers())
            time.sleep(0.1)
        assert load.failed_since(stopped) == []


def test_an_unknown_verdict_changes_nothing_in_either_direction(
        tmp_path: Path, engines: dict[str, SimEngine], source: SettableVerdicts,
        agent_check: AgentCheckServer) -> None:
    with balancer(tmp_path, engines, agent_check=agent_check) as haproxy, ClientLoad(haproxy.port) as load:
        wait_until_both_take_requests(haproxy)
        source.set("vllm-a", Verdict.UNKNOWN)  # stale data about a serving engine: it keeps serving
        time.sleep(2 * INTER_SECONDS + 0.5)
        assert both_serving(haproxy.servers())
        assert haproxy.servers()["vllm-a"].agent_status == "CHECKED"  # answered, without a state word
        source.set("vllm-a", Verdict.DOWN)
        haproxy.wait_for(lambda s: not s["vllm-a"].takes_new_requests, OBEY_WITHIN_SECONDS, "vllm-a down")
        at_down = taken(haproxy, "vllm-a")
        source.set("vllm-a", Verdict.UNKNOWN)  # stale data about a down engine: it stays out
        time.sleep(2 * INTER_SECONDS + 0.5)
        assert not haproxy.servers()["vllm-a"].takes_new_requests
        assert taken(haproxy, "vllm-a") == at_down
        source.set("vllm-a", Verdict.ADMIT)
        haproxy.wait_for(lambda s: s["vllm-a"].takes_new_requests, OBEY_WITHIN_SECONDS, "vllm-a readmitted")
        assert load.failed_since(0) == []

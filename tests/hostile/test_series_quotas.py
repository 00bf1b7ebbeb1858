"""Item 1: no source can starve another. An engine inventing series cannot crowd out the kernel log,
and a page over its quota is ``up 0`` with the reason, never an absent ``up``."""

from __future__ import annotations

import itertools
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.hostile.conftest import hostile_agent
from tests.loopback import serving
from watchdog.collectors.engines import CACHE_SLACK, ScrapeCaches, parse_payload
from watchdog.model import AlertState, Sample, label_value, metric, metric_name
from watchdog.store import LabelValuesExceeded, SeriesQuotaExceeded, SeriesQuotas, Store

XID79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
_request_ids = itertools.count()


class ChurningEngine(BaseHTTPRequestHandler):
    """Every scrape invents 1500 new series (a ``request_id`` label); ``/wide`` is one 3000-series page."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/wide":
            lines = [f'vllm:wide{{i="{i}"}} 1' for i in range(3000)]
        else:
            lines = [f'vllm:request_latency{{request_id="{next(_request_ids)}"}} 1' for _ in range(1500)]
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_store_refuses_a_source_over_quota_and_keeps_the_reserve_for_the_fault_path() -> None:
    store = Store(max_series=1000, quotas=SeriesQuotas(per_source=10_000, reserved=200))
    store.ingest("collector:engine:a", [Sample(metric("m", i=str(i)), 1) for i in range(800)], 1000)
    try:
        store.ingest("collector:engine:b", [Sample(metric("n", i=str(i)), 1) for i in range(100)], 1000)
        raise AssertionError("engine b should not fit the engines' share")
    except SeriesQuotaExceeded as exc:
        assert "shared by engines" in exc.reason
    # the kernel log still finds room in the reserve
    assert store.ingest("collector:kmsg", [Sample(metric("watchdog_gpu_xid_errors_total", xid="79"), 1)],
                        1000) == 1


def test_a_churning_engine_evicts_only_its_own_series() -> None:
    store = Store(max_series=1000, quotas=SeriesQuotas(per_source=300, reserved=100))
    store.ingest("collector:nvml", [Sample(metric("watchdog_gpu_temperature_celsius"), 50)], 0)
    for t in range(10):
        batch = [Sample(metric("m", request_id=f"{t}-{i}"), 1) for i in range(200)]
        assert store.ingest("collector:engine:a", batch, t * 1000) == 200
    assert len(store) <= 301
    assert store.evicted_series_total > 0
    assert [metric_name(s.labels) for s in store.select([("__name__", "=", "watchdog_gpu_temperature_celsius")])]


def test_series_churn_cannot_silence_an_xid_79(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    clock = [1_800_000_000.0]
    with serving(ChurningEngine, ThreadingHTTPServer) as base:
        agent = hostile_agent(tmp_path, clock, {
            "max_series": 6000, "reserved_series": 1500, "max_series_per_source": 100_000,
            "kmsg": {"source": str(kern)},
            "engines": [{"url": base + "/metrics", "job": "churn"}],
        })
        try:
            for _ in range(8):  # 12000 invented series: twice the whole store
                agent.tick()
                clock[0] += 1
            assert len(agent.store) <= 6000
            kern.write_text(XID79.format(bus="18"))
            fired: set[str] = set()
            for _ in range(3):
                fired |= {a.name for a in agent.tick() if a.state is AlertState.FIRING}
                clock[0] += 1
            assert "GpuFallenOffBus" in fired
            ups = [s for s in agent.store.select([("__name__", "=", "up")])]
            assert ups and ups[0].latest() is not None and ups[0].latest()[1] == 1.0  # type: ignore[index]
        finally:
            agent.close()


def test_a_page_over_the_per_source_quota_is_up_0_with_its_reason(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    with serving(ChurningEngine, ThreadingHTTPServer) as base:
        agent = hostile_agent(tmp_path, clock, {
            "max_series_per_source": 2000,
            "engines": [{"url": base + "/wide", "job": "wide"}],
        })
        try:
            agent.tick()
            (up,) = agent.store.select([("__name__", "=", "up")])
            assert up.latest() is not None and up.latest()[1] == 0.0  # type: ignore[index]
            success = {label_value(s.labels, "collector"): s.latest()[1]  # type: ignore[index]
                       for s in agent.store.select([("__name__", "=", "watchdog_collector_success")])}
            assert success["engine:wide"] == 0.0
            assert success["nvml"] == 1.0
            assert not list(agent.store.select([("__name__", "=", "vllm:wide")]))
        finally:
            agent.close()


def test_label_value_churn_drops_only_the_new_series_and_names_the_label() -> None:
    store = Store(max_series=100_000, quotas=SeriesQuotas(per_source=10_000, reserved=100, label_values=50))
    steady = [Sample(metric("vllm:num_requests_running", job="e"), 1), Sample(metric("up", job="e"), 1)]
    churn = [Sample(metric("vllm:request_latency", job="e", request_id=str(i)), 1) for i in range(80)]
    try:
        store.ingest("collector:engine:e", steady + churn, 1000)
        raise AssertionError("the 51st request_id should have been refused")
    except LabelValuesExceeded as exc:
        assert "'request_id' of vllm:request_latency" in exc.reason and "50" in exc.reason
        assert exc.dropped == 30
    assert len(list(store.select([("__name__", "=", "vllm:request_latency")]))) == 50
    assert len(list(store.select([("__name__", "=", "up")]))) == 1  # the rest of the page is stored
    # known series keep updating; new values stay out; the fault path has no such limit
    more = [Sample(metric("vllm:request_latency", job="e", request_id=f"new-{i}"), 1) for i in range(5)]
    try:
        store.ingest("collector:engine:e", steady + churn[:50] + more, 2000)
        raise AssertionError("new request_ids should still be refused")
    except LabelValuesExceeded as exc:
        assert exc.dropped == 5
    (running,) = store.select([("__name__", "=", "vllm:num_requests_running")])
    assert running.latest() == (2000, 1.0)
    xids = [Sample(metric("watchdog_gpu_xid_errors_total", xid=str(i)), 1) for i in range(80)]
    assert store.ingest("collector:kmsg", xids, 2000) == 80
    assert store.label_value_drops_total == 35


def test_a_churning_engine_is_marked_failed_with_its_reason_and_keeps_up(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    with serving(ChurningEngine, ThreadingHTTPServer) as base:
        agent = hostile_agent(tmp_path, clock, {"max_label_values_per_metric": 100,
                                                "engines": [{"url": base + "/metrics", "job": "churn"}]})
        try:
            for _ in range(3):
                agent.tick()
                clock[0] += 1
            assert len(list(agent.store.select([("__name__", "=", "vllm:request_latency")]))) == 100
            success = {label_value(s.labels, "collector"): s.latest()[1]  # type: ignore[index]
                       for s in agent.store.select([("__name__", "=", "watchdog_collector_success")])}
            assert success["engine:churn"] == 0.0 and success["nvml"] == 1.0
            (up,) = agent.store.select([("__name__", "=", "up")])
            assert up.latest() is not None and up.latest()[1] == 1.0  # type: ignore[index]
        finally:
            agent.close()


def test_scrape_caches_stay_bounded_under_label_churn_and_keep_sharing_pairs() -> None:
    steady = "".join(f'vllm:x_bucket{{le="{i}",model_name="m"}} {i}\n' for i in range(50))
    caches = ScrapeCaches()
    sizes = []
    for step in range(200):  # 100 new request_id values every scrape: 20 000 series seen in all
        churn = "".join(f'vllm:lat{{request_id="{step}-{k}"}} 1\n' for k in range(100))
        samples = parse_payload(steady + churn, {"job": "j", "instance": "h:1"}, caches)
        assert len(samples) == 150
        sizes.append(max(len(caches.series), len(caches.pairs)))
    assert max(sizes) <= 2 * 150 + CACHE_SLACK + 100
    first, second = (s.labels for s in samples[:2])
    assert dict(first)["job"] == "j" and first[2] is second[2]  # ("job", "j") held once
    assert [s.value for s in samples[:50]] == [float(i) for i in range(50)]

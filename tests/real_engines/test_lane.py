"""The real-engine lane's own parts that run without vLLM: log parsing, /metrics reading, the firing order,
prompts, the load phases (the package's streaming client) against an OpenAI-style server on loopback, the
result table, the fixture copy."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from pathlib import Path

import pytest

from tests.real_engines.balancer import (
    Sample,
    balancer_config,
    describe,
    flaps,
    held_proposals,
    kv_usage,
    parse_engines,
    raw_spread,
    requests_before,
    verdict_at,
    verdict_changes,
)
from tests.real_engines.forecast_trace import access_counts, compress
from tests.real_engines.lane import Outcome, Poll, copy_fixtures, forecast_verdict, out_of_order, page_values, table
from tests.real_engines.load import LoadSpec, prompts, run_load
from tests.real_engines.processes import agent_config, parse_log_line
from tests.support.haproxy import ServerState
from tests.support.llm import Outcome as Request
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config


def test_log_notifier_lines_become_alert_events() -> None:
    line = json.dumps({"ts": "2026-12-01T17:00:00.000Z", "level": "warning", "logger": "watchdog.alerts",
                       "event": "alert_firing", "alertname": "EngineDown", "labels": {"job": "vllm"}})
    event = parse_log_line(line + "\n", 12.5)
    assert event is not None
    assert (event.at, event.kind, event.alertname, event.labels) == (12.5, "firing", "EngineDown", {"job": "vllm"})
    assert event.evaluated_at == 12.5  # no fired_at in the line: when the lane read it
    stamped = parse_log_line(json.dumps({"event": "alert_firing", "alertname": "EngineDown",
                                         "fired_at": "2026-12-01T19:11:12.741Z"}), 99.0)
    assert stamped is not None and stamped.evaluated_at == pytest.approx(1796152272.741)
    assert parse_log_line('{"event": "runbook_suggested", "alertname": "EngineDown"}', 0) is None
    assert parse_log_line("2026-12-01 INFO agent started", 0) is None
    assert parse_log_line("{not json", 0) is None


def test_page_values_reads_alert_states_and_watched_series() -> None:
    page = "\n".join([
        'ALERTS{alertname="EngineDown",alertstate="firing",job="vllm"} 1',
        'ALERTS{alertname="EngineKvCacheNearFull",alertstate="pending",job="vllm"} 1',
        'watchdog_engine_up{job="vllm",instance="127.0.0.1:8411"} 0',
        'watchdog_engine_up{job="other",instance="127.0.0.1:9"} 1',
        'engine:kv_cache_usage_ratio{job="vllm",engine="0"} 0.93',
        'watchdog_engine_probe_output_info{job="vllm",model="tiny",digest="00ff00ff00ff00ff"} 1',
        "",
    ])
    firing, pending, values, digest = page_values(page)
    assert firing == {"EngineDown"} and pending == {"EngineKvCacheNearFull"}
    assert values == {'watchdog_engine_up{job="vllm"}': 0.0, "engine:kv_cache_usage_ratio": 0.93}
    assert digest == "00ff00ff00ff00ff"
    assert page_values("up 1\n")[3] is None


def test_alerts_of_one_evaluation_are_in_order_whichever_logged_first() -> None:
    expected = ("KvNearFull", "PreemptionStorm", "QueueBuildup")
    assert out_of_order(expected, {"PreemptionStorm": 38.3, "KvNearFull": 38.3, "QueueBuildup": 62.0}) is None
    assert out_of_order(expected, {"KvNearFull": 21.4, "PreemptionStorm": 27.6}) is None  # one still to come
    failure = out_of_order(expected, {"KvNearFull": 40.0, "PreemptionStorm": 38.3, "QueueBuildup": 62.0})
    assert failure == "fired out of order: PreemptionStorm, KvNearFull, QueueBuildup"


def _polls(rows: Sequence[tuple[float, float, float, bool]]) -> list[Poll]:
    """Polls from (at, requests in flight, preemptions, forecast firing)."""
    return [Poll(at, True, {"EngineKvExhaustionPredicted"} if warned else set(), set(),
                 {"engine:requests_in_flight": in_flight, "engine:preemptions_total": preempted})
            for at, in_flight, preempted, warned in rows]


def test_forecast_verdict_measures_the_lead_before_the_first_preemption() -> None:
    # 5 s scrapes: the burst shows at 103 s (16 in flight), the forecast with it, the first preemption at 108 s.
    rows = [(99.0, 0, 40, False), (101.0, 0, 40, False), (103.0, 16, 40, True), (106.0, 16, 40, True),
            (108.0, 16, 42, True)]
    verdict = forecast_verdict(_polls(rows), 100.0, 16)
    assert verdict.failures == [] and verdict.warned == 3.0
    assert verdict.note.endswith("first preemption 8.0s after the burst began (agent /metrics); "
                                 "EngineKvExhaustionPredicted at 3.0s: lead 5.0s")


def test_forecast_verdict_fails_only_where_a_scrape_showed_the_burst_first() -> None:
    late = [(99.0, 0, 40, False), (103.0, 16, 40, False), (108.0, 16, 42, True)]
    verdict = forecast_verdict(_polls(late), 100.0, 16)
    assert verdict.warned == 8.0
    assert verdict.failures == ["EngineKvExhaustionPredicted did not show before the first preemption, though the "
                                "agent saw the burst 5.0s before it"]
    same_scrape = [(99.0, 0, 40, False), (108.0, 16, 42, True)]  # a starved engine's first scrape held both
    verdict = forecast_verdict(_polls(same_scrape), 100.0, 16)
    assert verdict.failures == [] and "no forecast could lead it" in verdict.note
    quiet = forecast_verdict(_polls([(99.0, 0, 40, False), (103.0, 16, 40, False)]), 100.0, 16)
    assert quiet.failures == [] and quiet.warned is None and "no preemption seen" in quiet.note


@pytest.mark.parametrize("mode", ["none", "shared", "unique"])
def test_prompts_have_exact_lengths_and_prefixes(mode: str) -> None:
    spec = LoadSpec(concurrency=1, prompt_tokens=40, max_tokens=1, duration_s=1, prefix=mode,  # type: ignore[arg-type]
                    prefix_tokens=32)
    a, b = islice(prompts(spec, 500), 2)
    assert len(a) == len(b) == 40
    assert all(3 <= t < 500 for t in a + b)
    assert (a[:32] == b[:32]) == (mode == "shared")
    assert list(islice(prompts(spec, 500), 2)) == [a, b]  # seeded


class _Streaming(BaseHTTPRequestHandler):
    """/v1/completions streaming 3 chunks, 50 ms apart; requests for max_tokens 99 never finish."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = 1000 if body["max_tokens"] == 99 else 3
        try:
            for i in range(chunks):
                self.wfile.write(f'data: {{"choices": [{{"text": "t{i}"}}]}}\n\n'.encode())
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def test_load_phase_streams_to_done(server: int) -> None:
    result = run_load(f"http://127.0.0.1:{server}", "tiny", 500,
                      LoadSpec(concurrency=2, prompt_tokens=8, max_tokens=3, duration_s=0.5))
    assert len(result.results) >= 2 and all(r.ok for r in result.results), result.summary()
    assert all(r.ttft is not None and r.ttft < 1 for r in result.results)
    assert result.summary().startswith(f"ok={len(result.results)} timed_out=0 failed=0")


def test_impatient_clients_give_up_and_retry(server: int) -> None:
    spec = LoadSpec(concurrency=2, prompt_tokens=8, max_tokens=99, duration_s=0.9, client_timeout_s=0.3)
    result = run_load(f"http://127.0.0.1:{server}", "tiny", 500, spec)
    assert len(result.results) >= 4 and all(r.timed_out for r in result.results), result.summary()


def test_background_load_ends_on_its_stop_event(server: int) -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    result = run_load(f"http://127.0.0.1:{server}", "tiny", 500,
                      LoadSpec(concurrency=2, prompt_tokens=8, max_tokens=3, duration_s=60), stop)
    assert time.monotonic() - began < 5 and result.results


def test_ramped_clients_join_one_by_one(server: int) -> None:
    # 3 clients over 0.9 s: client i joins 0.3 i s in and sends back to back (each request streams ~0.15 s).
    result = run_load(f"http://127.0.0.1:{server}", "tiny", 500,
                      LoadSpec(concurrency=3, prompt_tokens=8, max_tokens=3, duration_s=1.2, ramp_s=0.9))
    assert result.results and all(r.ok for r in result.results), result.summary()
    first = min(r.sent_at for r in result.results)

    def in_flight(t: float) -> int:
        return sum(r.sent_at - first <= t < r.sent_at - first + r.e2e for r in result.results)

    grid = [i / 100 for i in range(150)]
    assert max(in_flight(t) for t in grid if t < 0.25) == 1  # one client alone at first
    assert max(in_flight(t) for t in grid) == 3  # all three once the ramp is done
    assert max(r.sent_at for r in result.results) - first <= 1.3  # the duration counts from the first start


def test_capture_copies_pages_into_the_fixtures_only_when_asked(tmp_path: Path) -> None:
    captured, fixtures = tmp_path / "captured", tmp_path / "fixtures"
    captured.mkdir()
    fixtures.mkdir()
    (captured / "vllm-0.32.0-cpu-idle.txt").write_text("# page\n")
    (captured / "notes.log").write_text("not a page")
    copy_fixtures(captured, fixtures)
    assert sorted(p.name for p in fixtures.iterdir()) == ["vllm-0.32.0-cpu-idle.txt"]


def test_table_lists_fired_alerts_and_failures() -> None:
    good = Outcome("burst", ("A", "B"), ("C",), 90, fired={"B": 30.0, "A": 20.0})
    bad = Outcome("steady", (), ("C",), 0, silent_fired=["C"], failures=["C fired but must stay silent"])
    text = table([good, bad])
    assert "A 20.0s, B 30.0s" in text
    assert "| ok" in text and "| FAIL" in text
    assert "steady: FAIL: C fired but must stay silent" in text


def test_forecast_trace_writes_promtool_notation_and_counts_requests_between_stats_lines(tmp_path: Path) -> None:
    assert compress([None, 1.0, 2.0, 3.0, 5.0, 5.0, None, None, 0.5]) == "_ 1+1x2 5 5 _x2 0.5"
    assert compress([4.0, 4.0, 4.0, 3.0, 2.0, 1.0]) == "4+0x2 3-1x2"
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([
        "(APIServer pid=1) INFO 12-02 01:22:43 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s",
        '(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK',
        '(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK',
        '(APIServer pid=1) INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK',
        "(APIServer pid=1) INFO 12-02 01:22:53 [loggers.py:335] Engine 000: Avg prompt throughput: 9.0 tokens/s",
    ]) + "\n")
    (start, end, count), = access_counts(log, 2026)
    assert (end - start, count) == (10.0, 2)


# -- the balancer scenario's bookkeeping -----------------------------------------------------------------


def sample(at: float, verdict: str | None, proposed: str | None = None, requests: int = 0) -> Sample:
    verdicts = {} if verdict is None else {"vllm": verdict}
    server = ServerState("UP", 100, requests, 0, 0, "L7OK", "")
    return Sample(at, True, verdicts, {"vllm": proposed}, {}, {"vllm": server})


def test_the_engines_list_gives_verdicts_proposals_and_since() -> None:
    body = json.dumps({"status": "success", "data": {"trusted": True, "engines": [
        {"job": "vllm", "verdict": "admit", "proposed": "shed", "since": 100.5,
         "scores": {"kv_free_ratio": 0.42, "predicted_wait_seconds": None}},
        {"job": "sim", "verdict": "down", "proposed": None, "since": None, "scores": None}]}})
    seen = parse_engines(body)
    assert (seen.trusted, seen.verdicts, seen.proposed, seen.since) == (
        True, {"vllm": "admit", "sim": "down"}, {"vllm": "shed", "sim": None}, {"vllm": 100.5})
    assert (seen.free, seen.wait) == ({"vllm": 0.42}, {})
    for nothing in (None, '{"status": "error", "errorType": "unavailable"}', "<html>"):
        assert parse_engines(nothing) == Sample(0.0, None, {}, {}, {}, {})


def test_the_raw_kv_gauge_is_read_from_vllm_s_page_and_summarised() -> None:
    page = 'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\nvllm:kv_cache_usage_perc{engine="0"} 0.75\n'
    assert kv_usage(page) == 0.75
    assert kv_usage("up 1\n") is None and kv_usage(None) is None
    samples = [dataclasses.replace(sample(t, "admit"), raw_kv=v) for t, v in ((1, 0.5), (2, 0.5), (3, 0.75), (4, 0.25))]
    assert raw_spread(samples, 0, 3.5) == "0.50..0.75 (mean 0.58, 3 reads, 1 changes between reads)"
    assert raw_spread(samples, 10, 20) == "-"


def test_verdict_changes_count_flaps_in_the_window_only_and_skip_unanswered_reads() -> None:
    samples = [sample(1, "admit"), sample(2, "short-only"), sample(3, None), sample(4, "short-only"),
               sample(5, "admit"), sample(6, "admit"), sample(9, "down")]
    assert verdict_changes(samples, "vllm", 0, 6) == [(2, "admit", "short-only"), (5, "short-only", "admit")]
    assert verdict_changes(samples, "vllm", 3, 8) == [(5, "short-only", "admit")]  # the one before 3 is out
    assert verdict_changes(samples, "vllm", 6, 10) == [(9, "admit", "down")]
    assert verdict_changes([sample(1, "admit"), sample(2, None), sample(3, "admit")], "vllm", 0, 9) == []
    assert verdict_changes(samples, "sim", 0, 10) == []


def test_held_proposals_and_request_counts() -> None:
    samples = [sample(1, "admit", "shed", 10), sample(2, "admit", None, 12), sample(3, "admit", "shed", 15),
               sample(4, "admit", "short-only", 20)]
    assert held_proposals(samples, "vllm", 0, 3.5) == {"shed": 2}
    assert held_proposals(samples, "vllm", 3.5, 9) == {"short-only": 1}
    assert requests_before(samples, "vllm", 2.5) == 12
    assert requests_before(samples, "vllm", 0.5) == 0


def test_describe_groups_failed_requests_by_reason() -> None:
    failed = [Request(0, 1, 0, "TimeoutError"), Request(0, 1, 0, "TimeoutError"), Request(0, 1, 503, "")]
    assert describe(failed) == "3 failed (HTTP 503 x1, TimeoutError x2)"
    assert describe([]) == "0 failed"


def test_the_balancer_config_is_a_valid_agent_config_with_the_simulator_and_the_agent_check(tmp_path: Path) -> None:
    base = agent_config("http://127.0.0.1:8411", "127.0.0.1:9851", tmp_path / "state", 8411, "tiny")
    text = balancer_config(base, "http://127.0.0.1:7001/metrics", "127.0.0.1:7002")
    settings = settings_from_config(load_config_text(text, "balancer.yaml"))
    assert [e.job for e in settings.engines] == ["vllm", "sim"]
    assert settings.engines[1].url == "http://127.0.0.1:7001/metrics"
    assert settings.serving.agent_check.enabled and settings.serving.agent_check.listen == "127.0.0.1:7002"
    assert settings.engines[0].probe is not None  # the lane's own engine keeps its canary probe


def test_a_verdict_that_settles_once_is_a_change_and_one_that_returns_is_a_flap() -> None:
    assert flaps([(5, "admit", "short-only")], "admit") == []
    assert flaps([(5, "admit", "short-only"), (20, "short-only", "admit")], "admit") == [(20, "short-only", "admit")]
    assert flaps([(5, "admit", "short-only"), (20, "short-only", "shed")], "admit") == []
    assert flaps([(5, "short-only", "admit")], "admit") == [(5, "short-only", "admit")]  # back to the start
    samples = [sample(1, "admit"), sample(2, None), sample(3, "shed")]
    assert verdict_at(samples, "vllm", 2.5) == "admit" and verdict_at(samples, "vllm", 0.5) is None

"""Canary probes against real loopback HTTP servers: a streaming OpenAI-compatible completions server, one
that accepts and never answers (wedged), one that changes its output; the baseline in a real SQLite state
database across a restart and a model change."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import serving
from tests.support.openai import TOKEN_GAP_SECONDS, openai_server
from tests.support.polling import wait_until
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.probe import (
    ProbeBaselines,
    ProbeCollector,
    ProbeError,
    ProbeSpec,
    parse_stream,
    probe_collectors,
    run_probe,
)
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.infra.state import StateDB
from watchdog.model import Sample, format_labels


def spec(url: str, **overrides: Any) -> ProbeSpec:
    fields: dict[str, Any] = {"url": url + "/v1/completions", "model": "m", "max_tokens": 4,
                              "targets": {"job": "vllm", "instance": "127.0.0.1:8000"},
                              "interval_seconds": 0.0, "timeout_seconds": 2.0}
    fields.update(overrides)
    return ProbeSpec(**fields)


def by_name(samples: list[Sample]) -> dict[str, float]:
    return {format_labels(s.labels): s.value for s in samples}


def value(samples: list[Sample], name: str) -> float | None:
    hits = [s.value for s in samples if dict(s.labels).get("__name__") == name]
    return hits[0] if hits else None


def harvest(collector: ProbeCollector) -> list[Sample]:
    """collect() until the probe started by the first call has finished; the samples then."""
    collector.collect()
    wait_until(lambda: collector._state.inflight is None or collector._state.inflight.done(), timeout=5)
    collector._state.last_start = float("inf")  # harvest without starting the next probe
    samples = collector.collect()
    collector._state.last_start = None
    return samples


# ------------------------------------------------------------------------------------------ pure parts


def test_parse_stream_times_tokens_and_joins_text() -> None:
    lines = [(10.3, 'data: {"choices":[{"text":" Paris"}]}\n'), (10.3, "\n"),
             (10.4, 'data: {"choices":[{"text":"."}]}\n'), (10.5, 'data: {"choices":[{"text":" It"}]}\n'),
             (10.5, "data: [DONE]\n")]
    outcome = parse_stream(lines, started=10.0)
    assert outcome.result == "ok" and outcome.text == " Paris. It" and outcome.tokens == 3
    assert outcome.ttft_seconds == pytest.approx(0.3) and outcome.tpot_seconds == pytest.approx(0.1)
    assert len(outcome.digest) == 16


@pytest.mark.parametrize("lines, problem", [
    ([(1.0, "data: [DONE]\n")], "without a token"),
    ([(1.0, "data: {not json\n")], "malformed"),
    ([(1.0, 'data: {"error": {"message": "CUDA error: an illegal memory access"}}\n')], "engine error"),
])
def test_parse_stream_rejects_empty_malformed_and_error_streams(lines: list[tuple[float, str]],
                                                                problem: str) -> None:
    with pytest.raises(ProbeError, match=problem):
        parse_stream(lines, started=0.0)


def test_request_is_fixed_and_greedy() -> None:
    body = json.loads(spec("http://x").request_body())
    assert body["temperature"] == 0 and body["seed"] == 1234 and body["stream"] is True
    assert spec("http://x").prompt_sha == spec("http://x").prompt_sha != spec("http://x", seed=1).prompt_sha


# ------------------------------------------------------------------------------------ real HTTP servers


def test_probe_against_a_streaming_server_measures_ttft_and_tpot() -> None:
    with openai_server() as (fake, url):
        outcome = run_probe(spec(url))
    assert outcome.result == "ok", outcome.error
    assert outcome.text == " Paris. It is" and outcome.tokens == 4
    assert TOKEN_GAP_SECONDS * 0.5 <= outcome.tpot_seconds < 1.0
    assert 0 < outcome.ttft_seconds < 1.0
    assert fake.requests[0]["temperature"] == 0 and fake.requests[0]["prompt"] == "The capital of France is"


def test_refused_and_http_errors_fail_the_probe() -> None:
    assert run_probe(spec("http://127.0.0.1:9")).result == "error"

    class NotFound(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.send_error(404)

    with serving(NotFound) as url:
        outcome = run_probe(spec(url))
    assert outcome.result == "error" and "404" in outcome.error


def test_wedged_server_fails_the_probe_without_holding_up_collection() -> None:
    with openai_server() as (fake, url):
        fake.wedged = True
        collector = ProbeCollector(spec(url, timeout_seconds=0.5), None)
        started = time.monotonic()
        first = collector.collect()
        assert time.monotonic() - started < 0.5  # the request runs on its own thread
        assert value(first, "watchdog_engine_probe_success") is None  # nothing completed yet
        wait_until(lambda: value(collector.collect(), "watchdog_engine_probe_success") == 0.0, timeout=5)
        counts = {dict(s.labels)["result"]: s.value for s in collector.samples()
                  if dict(s.labels)["__name__"] == "watchdog_engine_probe_requests_total"}
    assert counts == {"ok": 0.0, "error": 0.0, "timeout": 1.0}


def test_output_change_against_the_stored_baseline_survives_restart_and_resets_on_model_change(
        tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    with openai_server() as (fake, url):
        db = StateDB(db_path)
        collector = ProbeCollector(spec(url), ProbeBaselines(db))
        samples = harvest(collector)
        assert value(samples, "watchdog_engine_probe_success") == 1.0
        assert value(samples, "watchdog_engine_probe_output_changed") == 0.0
        baseline = ProbeBaselines(db).baseline("vllm")
        fake.tokens = [" Lyon", ".", " It", " is"]  # same model name, different greedy output
        samples = harvest(collector)
        assert value(samples, "watchdog_engine_probe_output_changed") == 1.0
        digests = [dict(s.labels)["digest"] for s in samples
                   if dict(s.labels)["__name__"] == "watchdog_engine_probe_output_info"]
        assert digests and digests[0] != baseline
        db.close()

        restarted = ProbeCollector(spec(url), ProbeBaselines(StateDB(db_path)))  # the agent restarts
        assert value(harvest(restarted), "watchdog_engine_probe_output_changed") == 1.0
        assert ProbeBaselines(StateDB(db_path)).baseline("vllm") == baseline

        swapped = ProbeCollector(spec(url, model="m2"), ProbeBaselines(StateDB(db_path)))  # new model
        assert value(harvest(swapped), "watchdog_engine_probe_output_changed") == 0.0
        assert ProbeBaselines(StateDB(db_path)).baseline("vllm") != baseline


def test_factory_builds_one_probe_per_engine_with_a_probe_section(tmp_path: Path) -> None:
    config = settings_from_config(load_config_text("""
engines:
  - job: a
    url: http://127.0.0.1:8000/metrics
    labels: {zone: z1}
    probe: {url: "http://127.0.0.1:8000/v1/completions", model: m, interval_seconds: 30}
  - {job: b, url: "http://127.0.0.1:8001/metrics"}
"""))
    context = CollectorContext(state_db=StateDB(tmp_path / "s.db"))
    collectors = probe_collectors(config, context)
    assert [c.name for c in collectors] == ["probe:a"]
    probe = collectors[0]
    assert isinstance(probe, ProbeCollector)
    assert probe.spec.targets == {"zone": "z1", "job": "a", "instance": "127.0.0.1:8000"}
    assert probe.spec.interval_seconds == 30 and probe.baselines is not None
    slo = {k: v for k, v in by_name(probe.samples()).items() if "slo_seconds" in k}
    assert sorted(slo.values()) == [0.2, 1.0]

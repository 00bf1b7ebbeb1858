"""loadtest against the demo's simulated engine (a real HTTP server with a known load model), and its parts."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.quiet import require_quiet_machine
from watchdog.cli import main
from watchdog.demo.engine_sim import EngineServer
from watchdog.demo.openai_sim import LoadModel
from watchdog.demo.scenario import parse_scenario
from watchdog.loadtest.analysis import Objectives, Zone, find_knee, summarize
from watchdog.loadtest.client import Api, CompletionRequest, OpenAIClient, RequestResult
from watchdog.loadtest.runner import run_closed_loop
from watchdog.loadtest.target import is_loopback
from watchdog.loadtest.workload import Arrival, Distribution, LengthSource, arrival_offsets

# Long enough that a busy CI machine's scheduling jitter (tens of ms) stays a small share of each figure.
PREFILL, TPOT, SLOTS, OUTPUT = 0.05, 0.05, 2, 4
MODEL = LoadModel(slots=SLOTS, prefill_seconds=PREFILL, tpot_seconds=TPOT)


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    """The demo engine simulator with 2 slots, 50 ms prefill and 50 ms per token: knee 10 requests/s at 4 tokens."""
    scenario = parse_scenario({
        "name": "loadtest", "description": "known load model", "interval": "1s", "duration": "60s",
        "engines": [{"job": "sim", "model": "sim-model", "gpus": [0],
                     "knobs": {"ttft": str(PREFILL), "tpot": str(TPOT), "max_num_seqs": str(SLOTS)}}],
    }, "test")
    server = EngineServer(scenario, scenario.engines[0], start=0.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_the_simulation_is_built_with_a_knee_of_10_per_second() -> None:
    assert MODEL.knee_rate(OUTPUT) == pytest.approx(10.0)


def test_timing_maths_match_the_known_prefill_and_tpot(engine: str) -> None:
    """One request at a time: TTFT is the prefill, TPOT the per-token time, E2E their sum. The simulator
    keeps deadlines from admission, so the lower bounds are exact; the upper ones allow a busy machine."""
    require_quiet_machine()
    client = OpenAIClient(engine, read_timeout=5)
    results = [client.send(CompletionRequest(prompt="a b c", max_tokens=OUTPUT, api=api))
               for api in (Api.COMPLETIONS, Api.CHAT, Api.COMPLETIONS)]
    for result in results:
        assert result.ok, result.error
        assert result.output_tokens == OUTPUT and result.prompt_tokens == 3
        assert result.ttft is not None and PREFILL <= result.ttft < PREFILL + 0.15
        assert len(result.itl) == OUTPUT - 1
        assert PREFILL + (OUTPUT - 1) * TPOT <= result.e2e < PREFILL + (OUTPUT - 1) * TPOT + 0.15
    tpots = [r.tpot for r in results if r.tpot is not None]
    assert sum(tpots) / len(tpots) == pytest.approx(TPOT, abs=0.02)


def test_closed_loop_takes_a_generator_and_ends_when_stopped(engine: str) -> None:
    """An endless generator of requests (the real-engine lane's background load) ends on the stop event."""
    client = OpenAIClient(engine, read_timeout=5)
    made: list[int] = []

    def endless() -> Iterator[CompletionRequest]:
        while True:
            made.append(1)
            yield CompletionRequest(prompt="x", max_tokens=OUTPUT)

    stop = threading.Event()
    threading.Timer(0.6, stop.set).start()
    run = run_closed_loop(client, endless(), concurrency=2, max_seconds=30, stop=stop)
    assert run.duration_seconds < 3.0  # not max_seconds: the stop event ended it
    assert run.not_sent == 0 and 2 <= len(run.results) == len(made)
    assert all(r.ok for r in run.results), [r.error for r in run.results]


def test_queueing_in_the_slots_shows_in_ttft_and_throughput(engine: str) -> None:
    """Closed loop at 4 with 2 slots: each request waits one service time (0.2 s); 2 slots x 4 tokens / 0.2 s."""
    require_quiet_machine()
    client = OpenAIClient(engine, read_timeout=5)
    requests = [CompletionRequest(prompt="x", max_tokens=OUTPUT) for _ in range(12)]
    run = run_closed_loop(client, requests, concurrency=4, max_seconds=10)
    step = summarize(4, run.results, run.duration_seconds, Objectives(1.0, 1.0))
    assert step.completed == 12
    service = MODEL.service_seconds(OUTPUT)
    capacity = SLOTS * OUTPUT / service  # tokens/s: the slots are the hard limit
    assert 0.6 * capacity <= step.throughput_tps <= 1.05 * capacity
    ttft_p50 = step.ttft["p50"]
    assert ttft_p50 is not None and service + PREFILL - 0.01 <= ttft_p50 < service + PREFILL + 0.15


def test_sweep_finds_the_knee_within_one_step_and_charts_it(engine: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Constant arrivals, 20 per step: below the knee no queue forms (a TTFT objective 0.25 s above the
    # prefill absorbs a busy machine's jitter); 25 % above it the queue grows 0.02 s per request, so
    # more than a third of the step misses the objective.
    require_quiet_machine()
    out = tmp_path / "out"
    code = main(["loadtest", engine, "--sweep", "7.5:15:2.5", "--arrival", "constant", "--requests", "20",
                 "--prompt-tokens", "8", "--output-tokens", str(OUTPUT), "--ttft", "0.3", "--tpot", "0.07",
                 "--attainment", "0.8", "--timeout", "10", "--out", str(out), "--json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["steps"]
    knee = doc["knee"]["load"]
    assert abs(knee - MODEL.knee_rate(OUTPUT)) <= 2.5, doc["steps"]
    zones = [s["zone"] for s in doc["steps"]]
    assert zones[0] == "safe" and zones[-1] != "safe"
    first = doc["steps"][0]
    assert first["goodput_tokens_per_second"] <= 7.5 * OUTPUT * 1.05
    assert first["goodput_tokens_per_second"] >= 0.8 * 0.6 * 7.5 * OUTPUT
    beyond = [s for s in doc["steps"] if s["load"] > knee]
    assert beyond and beyond[0]["goodput_tokens_per_second"] < beyond[0]["throughput_tokens_per_second"]
    assert (out / "result.json").is_file()
    rows = (out / "result.csv").read_text().splitlines()
    assert rows[0].startswith("load,requests") and len(rows) == len(doc["steps"]) + 1
    per_request = (out / "requests.csv").read_text().splitlines()
    assert per_request[0].startswith("load,sent_at_seconds,ttft_seconds")
    assert len(per_request) == 1 + sum(s["requests"] for s in doc["steps"])
    pytest.importorskip("matplotlib")
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    knee_file = out / "result.json"
    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--prompt-tokens", "8", "--output-tokens",
                 str(OUTPUT), "--rate", "100", "--knee", str(knee_file), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["generation_capacity"]["tokens_per_second_per_node"] == doc["knee"]["goodput_tokens_per_second"]


def test_refuses_a_remote_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loadtest", "http://10.1.2.3:8000", "--rate", "1"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert is_loopback("http://localhost:8000") and is_loopback("http://127.0.0.2:1") and is_loopback("http://[::1]:80")
    assert not is_loopback("http://example.com") and not is_loopback("http://192.168.0.1")


def test_bad_requests_get_400_from_the_simulator(engine: str) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(engine + "/v1/completions", data=b'{"max_tokens": 3}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 400
    assert "prompt" in caught.value.read().decode()


def test_poisson_arrivals_have_the_asked_rate_and_constant_ones_are_even() -> None:
    offsets = arrival_offsets(Arrival.POISSON, 50.0, 5000, random.Random(1))
    assert offsets[0] == 0.0
    assert len(offsets) / offsets[-1] == pytest.approx(50.0, rel=0.05)
    assert arrival_offsets(Arrival.CONSTANT, 4.0, 3, random.Random(1)) == [0.0, 0.25, 0.5]


def test_lengths_fixed_distributed_and_replayed() -> None:
    rng = random.Random(3)
    assert LengthSource(100, 10).sample(0, rng) == (100, 10)
    draws = [LengthSource(1000, 100, Distribution.LOGNORMAL, 0.5).sample(i, rng) for i in range(4000)]
    assert sum(p for p, _ in draws) / len(draws) == pytest.approx(1000, rel=0.05)
    uniform = [LengthSource(1000, 100, Distribution.UNIFORM, 0.2).sample(i, rng)[0] for i in range(500)]
    assert min(uniform) >= 800 and max(uniform) <= 1200
    replay = LengthSource(replay=((5, 6), (7, 8)))
    assert [replay.sample(i, rng) for i in range(3)] == [(5, 6), (7, 8), (5, 6)]


def _result(ttft: float | None, tpot: float, tokens: int = 10, error: str | None = None) -> RequestResult:
    e2e = (ttft or 0.0) + tpot * (tokens - 1)
    return RequestResult(sent_at=0.0, e2e=e2e, ttft=ttft, output_tokens=tokens, error=error)


def test_attainment_goodput_zone_and_knee_as_a_table() -> None:
    objectives = Objectives(ttft_seconds=0.5, tpot_seconds=0.05, attainment=0.9)
    good, slow_ttft, slow_tpot = _result(0.1, 0.02), _result(0.9, 0.02), _result(0.1, 0.08)
    failed = _result(None, 0.0, tokens=0, error="HTTP 503: busy")
    cases = [
        (1.0, [good] * 10, 1.0, Zone.SAFE),
        (2.0, [good] * 9 + [slow_ttft], 0.9, Zone.SAFE),
        (3.0, [good] * 6 + [slow_tpot] * 4, 0.6, Zone.DEGRADING),
        (4.0, [good] * 2 + [slow_ttft] * 4 + [failed] * 4, 0.2, Zone.COLLAPSED),
        (5.0, [good] * 10, 1.0, Zone.SAFE),  # passes again by luck: does not move the knee
    ]
    steps = []
    for load, results, attainment, zone in cases:
        step = summarize(load, results, 2.0, objectives)
        assert (step.attainment, step.zone) == (pytest.approx(attainment), zone)
        assert step.goodput_tps == pytest.approx(sum(r.output_tokens for r in results if objectives.met(r)) / 2.0)
        steps.append(step)
    assert steps[3].errors == 4 and steps[3].error_examples == ("HTTP 503: busy",)
    assert steps[3].throughput_tps == pytest.approx(6 * 10 / 2.0)
    knee = find_knee(steps)
    assert knee is not None and knee.load == 2.0
    assert find_knee(steps[2:]) is None


def test_open_loop_is_bounded_in_time_and_in_flight(engine: str) -> None:
    from watchdog.loadtest.runner import run_open_loop

    client = OpenAIClient(engine, read_timeout=5)
    requests = [CompletionRequest(prompt="x", max_tokens=OUTPUT) for _ in range(50)]
    offsets = arrival_offsets(Arrival.CONSTANT, 100.0, len(requests), random.Random(0))
    run = run_open_loop(client, requests, offsets, max_seconds=0.1, max_in_flight=3)
    assert run.not_sent == 50 - 11  # offsets 0.00 .. 0.10 are sent, the rest are not
    limited = [r for r in run.results if r.error and "client limit of 3" in r.error]
    assert len(run.results) == 11 and len(limited) >= 4  # 3 requests hold the client's slots for >= 0.2 s
    assert run.duration_seconds < 1.0


def test_progress_bar_draws_on_a_terminal() -> None:
    import io

    from watchdog.loadtest.report import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar(stream, width=10, force=True)
    bar.start_step(2.5, 4)
    bar.on_result(RequestResult(sent_at=0.0, e2e=0.1, ttft=0.05, output_tokens=3))
    bar.on_result(RequestResult(sent_at=0.0, e2e=0.1, ttft=None, error="HTTP 500"))
    bar.finish()
    assert stream.getvalue().endswith("\rload 2.5 [#####.....] 2/4 errors 1\n")
    silent = io.StringIO()
    ProgressBar(silent).start_step(1.0, 1)
    assert silent.getvalue() == ""


def test_a_dead_endpoint_fails_fast_with_the_preflight_error(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["loadtest", f"http://127.0.0.1:{port}", "--rate", "5", "--requests", "50", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "the preflight request to" in captured.err and "Connection refused" in captured.err
    assert captured.out == ""  # nothing was swept


def test_latency_figures_are_mean_and_percentiles_like_vllm_bench(engine: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["loadtest", engine, "--concurrency", "1", "--requests", "4", "--prompt-tokens", "8",
                 "--output-tokens", str(OUTPUT), "--ttft", "5", "--tpot", "5", "--timeout", "10", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    header = next(line for line in text.splitlines() if line.startswith("latency (ms)"))
    assert header.split()[-4:] == ["mean", "p50", "p90", "p99"]
    rows = {line.split()[1]: [float(v) for v in line.split()[2:]] for line in text.splitlines()
            if line.startswith(" " * 13) and len(line.split()) == 6}
    assert set(rows) == {"TTFT", "TPOT", "ITL", "E2E"}
    mean, p50, _p90, p99 = rows["TPOT"]
    assert TPOT * 1000 * 0.8 <= p50 <= p99 and abs(mean - p50) < TPOT * 1000  # one request at a time: ~50 ms
    assert rows["E2E"][0] > rows["TTFT"][0]


def test_a_prompt_dataset_jsonl_or_sharegpt(tmp_path: Path) -> None:
    from watchdog.loadtest.workload import DatasetError, make_requests, read_prompt_dataset

    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "Summarise the attached log.", "output_tokens": 64}\n\n{"prompt": "Hello"}\n')
    entries = read_prompt_dataset(jsonl)
    assert [(e.prompt, e.output_tokens) for e in entries] == [("Summarise the attached log.", 64), ("Hello", None)]
    requests = make_requests(LengthSource(output_tokens=32, prompts=entries), 3, random.Random(0), "m",
                             Api.COMPLETIONS)
    assert [(r.prompt, r.max_tokens) for r in requests] == [
        ("Summarise the attached log.", 64), ("Hello", 32), ("Summarise the attached log.", 64)]
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "What is KV cache?"},
                                      {"from": "gpt", "value": "x" * 400}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no question"}]}]))
    entries = read_prompt_dataset(sharegpt)
    assert [(e.prompt, e.output_tokens) for e in entries] == [("What is KV cache?", 100)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt key"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: expected"):
        read_prompt_dataset(bad)


def test_the_dataset_prompts_reach_the_server(engine: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "why is the sky blue", "output_tokens": 3}\n')
    code = main(["loadtest", engine, "--concurrency", "1", "--requests", "2", "--dataset", str(dataset),
                 "--ttft", "5", "--tpot", "5", "--timeout", "10", "--no-progress", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["steps"][0]["completed"] == 2

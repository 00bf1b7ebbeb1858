"""Issue 30: ``loadtest`` says "not reached" when attainment never fell below the objective (instead of calling
the highest load tried the knee), and flags a step whose achieved send rate fell short of the offered one
(the client could not keep up), in text and JSON. Against the demo's engine simulator on loopback
(knee 10 requests/s at 4 output tokens, see test_loadtest.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.loadtest.test_loadtest import OUTPUT, engine  # noqa: F401  (the module-scoped fixture)
from watchdog.cli import main
from watchdog.loadtest.analysis import Objectives, Zone, find_knee, knee_status, summarize
from watchdog.loadtest.client import CompletionRequest, OpenAIClient, RequestResult
from watchdog.loadtest.runner import run_open_loop
from watchdog.loadtest.workload import Arrival, arrival_offsets


def test_every_step_safe_is_not_reached_in_text_json_exit_code_and_plan(
        engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # 1 and 2 requests/s, far below the simulator's knee, with a lenient objective: every step is safe.
    argv = ["loadtest", engine, "--sweep", "1:2:1", "--arrival", "constant", "--requests", "4",
            "--prompt-tokens", "8", "--output-tokens", str(OUTPUT), "--ttft", "5", "--tpot", "1",
            "--attainment", "0.5", "--timeout", "10", "--no-progress"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["zone"] for s in doc["steps"]] == ["safe", "safe"]
    assert doc["knee"] is None and doc["knee_status"] == "not reached"
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "knee: not reached (every step met the attainment objective up to 2 rate/s" in text
    result = tmp_path / "result.json"
    result.write_text(json.dumps(doc))
    assert main(["plan", "--model", "llama-3.1-8b", "--prompt-tokens", "8", "--output-tokens", "4", "--rate", "1",
                 "--knee", str(result)]) == 2
    assert "knee: not reached" in capsys.readouterr().err


def test_knee_status_distinguishes_reached_not_reached_and_none() -> None:
    objectives = Objectives(ttft_seconds=0.5, tpot_seconds=0.05, attainment=0.9)
    good = RequestResult(sent_at=0.0, e2e=0.3, ttft=0.1, output_tokens=10)
    bad = RequestResult(sent_at=0.0, e2e=1.3, ttft=1.0, output_tokens=10)
    safe = [summarize(load, [good] * 10, 1.0, objectives) for load in (1.0, 2.0)]
    unsafe = summarize(3.0, [bad] * 10, 1.0, objectives)
    assert unsafe.zone is Zone.COLLAPSED
    assert (knee_status(safe), find_knee(safe)) == ("not reached", None)
    assert knee_status([*safe, unsafe]) == "reached" and find_knee([*safe, unsafe]) == safe[1]
    lowest_unsafe = summarize(0.5, [bad] * 10, 1.0, objectives)
    assert (knee_status([lowest_unsafe, *safe]), find_knee([lowest_unsafe, *safe])) == ("none", None)
    assert knee_status([]) == "none"


def test_a_client_that_cannot_keep_up_is_flagged(engine: str) -> None:  # noqa: F811
    """16 requests/s offered with one request in flight at most, against a server that holds each for
    about 0.2 s: the client refuses most sends, so it really sends about 5/s."""
    client = OpenAIClient(engine, read_timeout=5)
    requests = [CompletionRequest(prompt="x", max_tokens=OUTPUT) for _ in range(24)]
    offsets = arrival_offsets(Arrival.CONSTANT, 16.0, len(requests), random.Random(0))
    run = run_open_loop(client, requests, offsets, max_seconds=10, max_in_flight=1)
    step = summarize(16.0, run.results, run.duration_seconds, Objectives(5.0, 1.0), scheduled=offsets)
    assert step.offered_rate == pytest.approx(16.0)
    assert step.achieved_rate is not None and step.achieved_rate < 0.6 * 16.0
    assert step.shortfall
    # the same schedule with room to send: no shortfall
    run = run_open_loop(client, requests, offsets, max_seconds=10, max_in_flight=64)
    step = summarize(16.0, run.results, run.duration_seconds, Objectives(5.0, 1.0), scheduled=offsets)
    assert step.achieved_rate == pytest.approx(16.0, rel=0.05) and not step.shortfall


def test_shortfall_in_text_and_json(engine: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    argv = ["loadtest", engine, "--rate", "16", "--arrival", "constant", "--requests", "16",
            "--prompt-tokens", "8", "--output-tokens", str(OUTPUT), "--ttft", "5", "--tpot", "1",
            "--attainment", "0.01", "--max-in-flight", "1", "--timeout", "10",
            "--no-progress"]
    main([*argv, "--json"])
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["shortfall"] is True and step["offered_rate"] == pytest.approx(16.0)
    assert step["achieved_rate"] < 0.6 * 16
    main(argv)
    text = capsys.readouterr().out
    assert "shortfall: sent " in text and "of 16.0/s offered: the client could not keep up" in text

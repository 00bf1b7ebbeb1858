"""The sweep's control flow: order of loads, stopping after a collapse, the time budget, Ctrl-C."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from watchdog.loadtest import sweep
from watchdog.loadtest.analysis import Objectives
from watchdog.loadtest.client import CompletionRequest, OpenAIClient, RequestResult
from watchdog.loadtest.runner import StepRun


def fake_open_loop(good_below: float, interrupt_at: float | None = None):  # type: ignore[no-untyped-def]
    """A stand-in for run_open_loop: every request meets the SLO below ``good_below`` req/s, none above."""

    def run(client: OpenAIClient, requests: Sequence[CompletionRequest], offsets: Sequence[float],
            max_seconds: float, max_in_flight: int = 256, on_result: object = None) -> StepRun:
        rate = len(offsets) / (offsets[-1] or 1.0) if len(offsets) > 1 else 1.0
        load = round(rate)
        if interrupt_at is not None and load >= interrupt_at:
            raise KeyboardInterrupt
        ttft = 0.1 if load < good_below else 5.0
        results = tuple(RequestResult(sent_at=0.0, e2e=ttft + 0.1, ttft=ttft, output_tokens=2) for _ in requests)
        return StepRun(results=results, duration_seconds=1.0, not_sent=0)

    return run


def config(**kw: object) -> sweep.SweepConfig:
    base: dict[str, object] = {"target": "http://127.0.0.1:1", "objectives": Objectives(1.0, 1.0),
                               "rates": (4.0, 1.0, 3.0, 2.0), "requests": 40,
                               "arrival": sweep.Arrival.CONSTANT}
    return sweep.SweepConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "interrupt_at", "loads", "stopped", "knee"), [
    ({}, None, [1.0, 2.0, 3.0], "collapsed", 2.0),
    ({"keep_going": True}, None, [1.0, 2.0, 3.0, 4.0], "complete", 2.0),
    ({}, 2.0, [1.0], "interrupted", None),  # the one finished step was safe: the knee was not reached
    ({"max_total_seconds": -1.0}, None, [], "time budget", None),
])
def test_sweep_control_flow(monkeypatch: pytest.MonkeyPatch, kw: dict[str, object], interrupt_at: float | None,
                            loads: list[float], stopped: str, knee: float | None) -> None:
    monkeypatch.setattr(sweep, "run_open_loop", fake_open_loop(good_below=3.0, interrupt_at=interrupt_at))
    result = sweep.run_sweep(config(**kw), OpenAIClient("http://127.0.0.1:1"))
    assert [s.load for s in result.steps] == loads
    assert result.stopped == stopped
    assert (result.knee.load if result.knee else None) == knee

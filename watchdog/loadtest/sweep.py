"""A load test: one step per rate (open loop) or per concurrency (closed loop), bounded, with its knee.

:func:`run_sweep` runs the steps in increasing load. Bounds: each step sends at most ``requests`` and
stops issuing after ``step_seconds``; the whole run starts no step after ``max_total_seconds``; after a
collapsed step the sweep stops (unless ``keep_going``), since higher loads only collapse further. Ctrl-C
ends the run with the steps finished so far.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from watchdog.loadtest.analysis import Objectives, StepSummary, Zone, find_knee, knee_status, summarize
from watchdog.loadtest.client import Api, OpenAIClient, RequestResult
from watchdog.loadtest.runner import run_closed_loop, run_open_loop
from watchdog.loadtest.workload import Arrival, LengthSource, arrival_offsets, make_requests


@dataclass(frozen=True)
class SweepConfig:
    """What to send and how much. ``rates`` for open loop, else ``concurrencies`` for closed loop."""

    target: str
    objectives: Objectives
    rates: tuple[float, ...] = ()
    concurrencies: tuple[int, ...] = ()
    arrival: Arrival = Arrival.POISSON
    lengths: LengthSource = field(default_factory=LengthSource)
    requests: int = 100
    step_seconds: float = 60.0
    max_total_seconds: float = 600.0
    max_in_flight: int = 256
    model: str = "default"
    api: Api = Api.COMPLETIONS
    seed: int = 0
    keep_going: bool = False
    ignore_eos: bool = True

    @property
    def mode(self) -> str:
        """``rate`` (open loop) or ``concurrency`` (closed loop)."""
        return "rate" if self.rates else "concurrency"

    @property
    def loads(self) -> tuple[float, ...]:
        """The step loads in increasing order."""
        return tuple(sorted(self.rates)) if self.rates else tuple(float(c) for c in sorted(self.concurrencies))


@dataclass(frozen=True)
class SweepResult:
    """Every step's summary, the knee, and why the run stopped."""

    config: SweepConfig
    steps: tuple[StepSummary, ...]
    knee: StepSummary | None
    """The knee's step; None when the lowest load missed the objective or none did (``knee_status``)."""
    stopped: str  # "complete", "collapsed", "time budget" or "interrupted"
    elapsed_seconds: float
    requests: tuple[tuple[float, RequestResult], ...] = ()  # (load, result) of every request, step by step

    @property
    def knee_status(self) -> str:
        """``reached``, ``not reached`` (every step met the objective) or ``none``."""
        return knee_status(self.steps)


def run_sweep(config: SweepConfig, client: OpenAIClient,
              on_step_start: Callable[[float, int], None] | None = None,
              on_result: Callable[[RequestResult], None] | None = None) -> SweepResult:
    """Run every step of ``config`` against ``client``; see the module docstring for the bounds."""
    rng = random.Random(config.seed)
    steps: list[StepSummary] = []
    measured: list[tuple[float, RequestResult]] = []
    started = time.monotonic()
    stopped = "complete"
    for index, load in enumerate(config.loads):
        if time.monotonic() - started > config.max_total_seconds:
            stopped = "time budget"
            break
        requests = make_requests(config.lengths, config.requests, rng, config.model, config.api,
                                 first_index=index * config.requests, ignore_eos=config.ignore_eos)
        if on_step_start is not None:
            on_step_start(load, len(requests))
        scheduled: list[float] | None = None  # the send offsets asked for within the step (open loop)
        try:
            if config.mode == "rate":
                offsets = arrival_offsets(config.arrival, load, len(requests), rng)
                scheduled = [o for o in offsets[:len(requests)] if o <= config.step_seconds]
                run = run_open_loop(client, requests, offsets, config.step_seconds, config.max_in_flight, on_result)
            else:
                run = run_closed_loop(client, requests, int(load), config.step_seconds, on_result)
        except KeyboardInterrupt:  # Ctrl-C: keep the finished steps, drop the one cut short
            stopped = "interrupted"
            break
        steps.append(summarize(load, run.results, run.duration_seconds, config.objectives, scheduled))
        measured.extend((load, r) for r in sorted(run.results, key=lambda r: r.sent_at))
        if steps[-1].zone is Zone.COLLAPSED and not config.keep_going and index < len(config.loads) - 1:
            stopped = "collapsed"
            break
    return SweepResult(config=config, steps=tuple(steps), knee=find_knee(steps), stopped=stopped,
                       elapsed_seconds=time.monotonic() - started, requests=tuple(measured))

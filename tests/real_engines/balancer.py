"""The lane's balancer scenario (issue 26): a real HAProxy in front of the real vLLM and one engine simulator,
steered by the real agent through its agent-check port (``serving.agent_check``).

What it measures, each phase with client load through HAProxy (closed-loop streaming completions):

1. **steady**: ``--balancer-steady-s`` seconds of load. The real vLLM's KV gauge is noisy (a 16-block pool:
   one request is 3 blocks, 19 %). Its verdict must not flap (return to a verdict it left in the phase), and
   no client request may fail. The phase reports vLLM's raw gauge beside the agent's readings, so a run
   shows how close the load came to a band edge (docs/engines.md has the runs).
2. **freeze**: SIGSTOP the whole vLLM. From the fault: when the agent's verdict left ``admit``, when HAProxy's
   stats socket showed the server out (DOWN or DRAIN by the agent), how many requests HAProxy sent it after
   the agent's verdict and after it was out (must be 0), and the client requests that failed (the ones the
   frozen engine held, nothing after HAProxy took it out).
3. **thaw**: SIGCONT. When the verdict came back to ``admit``, when HAProxy took it back, when it served
   again; no client request may fail once it is back.

The agent's verdicts are read from its ``/api/v1/engines`` every 0.2 s (:class:`Watch`), HAProxy's from its
stats socket in the same loop, so both sides share one clock. The agent runs with the lane's config plus the
simulator engine and ``serving.agent_check`` (:func:`balancer_config`); HAProxy runs no health check of its own,
so what it does is the agent's doing (:class:`tests.support.haproxy.HAProxy` with ``own_check=False``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.real_engines.processes import Engine, http_get
from tests.support.haproxy import Engine as Server
from tests.support.haproxy import HAProxy, ServerState
from tests.support.llm import ClientLoad, Outcome
from watchdog.exposition import parse_exposition

REAL = "vllm"  # the lane's job for the real vLLM (tests/real_engines/processes.agent_config)
SIM = "sim"
OUT = frozenset({"drain", "down", "shed"})


@dataclass(frozen=True)
class Options:
    """The scenario's knobs (from the lane's command line)."""

    steady_s: float = 75.0
    clients: int = 4
    prompt_words: int = 200
    """Words of each prompt, drawn at random (about 1.1 tokens a word with the tiny model's tokenizer): no
    two prompts share a prefix, so vLLM's prefix cache does not shrink what they hold."""
    max_tokens: int = 128
    """Tokens of each answer, exactly (``ignore_eos``; the simulator ignores the field): with the prompt about
    340 tokens, 3 of the 16 blocks. Chosen so that 4 requests in flight would leave 25 % free, across the
    short-only band; in the runs the gauge read far less in use (docs/engines.md), so more clients
    (``--balancer-clients``) are the knob that pushes it."""
    client_timeout_s: float = 10.0
    out_within_s: float = 60.0
    back_within_s: float = 180.0


@dataclass(frozen=True)
class Sample:
    """One read of the agent's verdicts and HAProxy's servers."""

    at: float
    trusted: bool | None
    verdicts: dict[str, str]
    proposed: dict[str, str | None]
    since: dict[str, float]
    """When each job entered its verdict: the agent's tick (``since`` of ``/api/v1/engines``)."""
    servers: dict[str, ServerState]
    free: dict[str, float] = field(default_factory=dict)
    """Each job's free KV share as the agent read it (``scores.kv_free_ratio``), where known."""
    wait: dict[str, float] = field(default_factory=dict)
    """Each job's predicted queue wait in seconds (``scores.predicted_wait_seconds``), where known."""
    raw_kv: float | None = None
    """vLLM's own ``vllm:kv_cache_usage_perc`` (a 0..1 ratio), read from its ``/metrics`` about once a second."""


@dataclass
class Phase:
    """One phase's notes and failures (the lane turns them into a row of its table)."""

    name: str
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def parse_engines(body: str | None) -> Sample:
    """The agent's side of a sample from a ``/api/v1/engines`` answer (pure; ``at`` 0, no servers): ``trusted``,
    each job's verdict, ``proposed`` verdict, ``since``, and the free KV share and predicted queue wait among
    its scores where known. No answer, or one without verdicts (the agent starting up answers 503), gives an
    empty sample."""
    empty = Sample(0.0, None, {}, {}, {}, {})
    if not body:
        return empty
    try:
        data = json.loads(body).get("data") or {}
    except (json.JSONDecodeError, AttributeError):
        return empty
    engines = data.get("engines") or []
    scores = {str(e["job"]): e.get("scores") or {} for e in engines}
    return Sample(
        0.0, data.get("trusted"),
        {str(e["job"]): str(e["verdict"]) for e in engines},
        {str(e["job"]): (str(e["proposed"]) if e.get("proposed") else None) for e in engines},
        {str(e["job"]): float(e["since"]) for e in engines if e.get("since") is not None},
        {},
        free={j: float(v["kv_free_ratio"]) for j, v in scores.items() if v.get("kv_free_ratio") is not None},
        wait={j: float(v["predicted_wait_seconds"]) for j, v in scores.items()
              if v.get("predicted_wait_seconds") is not None},
    )


def kv_usage(page: str | None) -> float | None:
    """``vllm:kv_cache_usage_perc`` of a vLLM ``/metrics`` page (the first engine's), or None (pure)."""
    for labels, value, _ts in parse_exposition(page or ""):
        if dict(labels).get("__name__") == "vllm:kv_cache_usage_perc":
            return value
    return None


def raw_spread(samples: list[Sample], start: float, end: float) -> str:
    """``min..max, mean, N reads, M changes`` of vLLM's raw KV gauge in ``[start, end]`` (pure)."""
    values = [s.raw_kv for s in samples if start <= s.at <= end and s.raw_kv is not None]
    if not values:
        return "-"
    changes = sum(1 for a, b in itertools.pairwise(values) if a != b)
    return (f"{min(values):.2f}..{max(values):.2f} (mean {sum(values) / len(values):.2f}, {len(values)} reads, "
            f"{changes} changes between reads)")


def verdict_changes(samples: list[Sample], job: str, start: float, end: float) -> list[tuple[float, str, str]]:
    """Each change of *job*'s verdict seen in ``[start, end]``: ``(at, from, to)`` (pure). Samples without a
    verdict for the job (the agent did not answer) are skipped, not counted as a change."""
    changes: list[tuple[float, str, str]] = []
    last: str | None = None
    for s in samples:
        verdict = s.verdicts.get(job)
        if verdict is None:
            continue
        if last is not None and verdict != last and start <= s.at <= end:
            changes.append((s.at, last, verdict))
        last = verdict
    return changes


def flaps(changes: list[tuple[float, str, str]], initial: str | None) -> list[tuple[float, str, str]]:
    """The changes of *changes* that went back to a verdict held earlier in the window (starting from
    *initial*): a verdict that settles once is a change, one that returns is a flap (pure)."""
    held = {initial} if initial else set()
    back: list[tuple[float, str, str]] = []
    for change in changes:
        if change[2] in held:
            back.append(change)
        held.add(change[1])
        held.add(change[2])
    return back


def verdict_at(samples: list[Sample], job: str, at: float) -> str | None:
    """*job*'s verdict at the last sample at or before *at* that had one (pure)."""
    seen = [s.verdicts[job] for s in samples if s.at <= at and job in s.verdicts]
    return seen[-1] if seen else None


def held_proposals(samples: list[Sample], job: str, start: float, end: float) -> dict[str, int]:
    """How many samples in ``[start, end]`` showed each verdict the readings proposed for *job* while
    hysteresis held it back (pure)."""
    counts: dict[str, int] = {}
    for s in samples:
        proposed = s.proposed.get(job)
        if proposed and start <= s.at <= end:
            counts[proposed] = counts.get(proposed, 0) + 1
    return counts


def first_at(samples: list[Sample], since: float, predicate: Callable[[Sample], bool]) -> Sample | None:
    """The first sample at or after *since* for which *predicate* holds (pure)."""
    return next((s for s in samples if s.at >= since and predicate(s)), None)


def balancer_config(lane_config: str, sim_url: str, agent_check_listen: str) -> str:
    """The lane's agent config plus the simulator engine (job ``sim``) and the agent-check port (pure)."""
    doc: dict[str, Any] = yaml.safe_load(lane_config)
    doc["engines"].append({"job": SIM, "url": sim_url, "kind": "vllm", "scrape_timeout_seconds": 2})
    doc["serving"] = {"agent_check": {"enabled": True, "listen": agent_check_listen}}
    return yaml.safe_dump(doc, sort_keys=False)


def failed(outcomes: list[Outcome], start: float, end: float) -> list[Outcome]:
    """Client requests started in ``[start, end]`` (monotonic) that failed (pure)."""
    return [o for o in outcomes if start <= o.started <= end and not o.ok]


def describe(outcomes: list[Outcome]) -> str:
    """``N failed (reasons)`` of a list of failed requests (pure)."""
    if not outcomes:
        return "0 failed"
    reasons: dict[str, int] = {}
    for o in outcomes:
        key = o.error or f"HTTP {o.status}"
        reasons[key] = reasons.get(key, 0) + 1
    return f"{len(outcomes)} failed (" + ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items())) + ")"


class Watch:
    """Reads the agent's verdicts and HAProxy's servers every 0.2 s in a thread."""

    def __init__(self, agent_listen: str, haproxy: HAProxy, engine_metrics_url: str) -> None:
        self.url = f"http://{agent_listen}/api/v1/engines"
        self.haproxy = haproxy
        self.engine_metrics_url = engine_metrics_url
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="balancer-watch", daemon=True)

    def start(self) -> Watch:
        """Start reading."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        raw_at = 0.0
        while not self._stop.is_set():
            seen = parse_engines(http_get(self.url, timeout=2.0))
            try:
                servers = self.haproxy.servers()
            except OSError:
                servers = {}
            raw = None
            if time.time() - raw_at >= 1.0:
                raw_at = time.time()
                raw = kv_usage(http_get(self.engine_metrics_url, timeout=0.5))
            self.samples.append(dataclasses.replace(seen, at=time.time(), servers=servers, raw_kv=raw))
            self._stop.wait(0.2)

    def snapshot(self) -> list[Sample]:
        """The samples so far."""
        return list(self.samples)

    def wait(self, since: float, predicate: Callable[[Sample], bool], timeout_s: float) -> Sample | None:
        """The first sample after *since* for which *predicate* holds, waiting up to *timeout_s*."""
        end = time.time() + timeout_s
        while time.time() < end:
            hit = first_at(self.snapshot(), since, predicate)
            if hit is not None:
                return hit
            time.sleep(0.1)
        return first_at(self.snapshot(), since, predicate)


def takes(job: str) -> Callable[[Sample], bool]:
    """HAProxy would send *job* a new request (predicate on a sample)."""
    return lambda s: job in s.servers and s.servers[job].takes_new_requests


def out(job: str) -> Callable[[Sample], bool]:
    """HAProxy shows *job* out of rotation (DOWN, DRAIN or weight 0)."""
    return lambda s: job in s.servers and not s.servers[job].takes_new_requests


def verdict_is(job: str, wanted: frozenset[str] | set[str]) -> Callable[[Sample], bool]:
    """The agent's verdict of *job* is one of *wanted*."""
    return lambda s: s.verdicts.get(job) in wanted


def prompt_maker(words: int, seed: int = 26) -> Callable[[], str]:
    """Prompts of *words* words drawn from the tiny model's training text (its tokenizer's own words)."""
    from tests.real_engines.tiny_model import TRAINING_TEXT

    vocabulary = " ".join(TRAINING_TEXT).split()
    rng = random.Random(seed)
    lock = threading.Lock()

    def make() -> str:
        with lock:
            return " ".join(rng.choice(vocabulary) for _ in range(words))

    return make


def spread(samples: list[Sample], job: str, start: float, end: float, what: str) -> str:
    """``min..max`` of the free KV share (*what* ``free``) or predicted wait (``wait``) the agent read for
    *job* in ``[start, end]``, or ``-`` (pure)."""
    values = [getattr(s, what)[job] for s in samples if start <= s.at <= end and job in getattr(s, what)]
    return f"{min(values):.2f}..{max(values):.2f}" if values else "-"


def requests_before(samples: list[Sample], job: str, at: float) -> int:
    """HAProxy's request count of *job* at the last sample before *at* (0 if none) (pure)."""
    seen = [s.servers[job].requests for s in samples if s.at <= at and job in s.servers]
    return seen[-1] if seen else 0


def requests_of(haproxy: HAProxy, job: str) -> int:
    """Requests HAProxy has sent *job* so far."""
    return haproxy.servers()[job].requests


class Scenario:
    """The running set-up of the scenario (see the module docstring); :meth:`run` plays the three phases."""

    def __init__(self, engine: Engine, served_name: str, opts: Options, log: Callable[[str], None]) -> None:
        self.engine = engine
        self.served_name = served_name
        self.opts = opts
        self.log = log
        self.phases: list[Phase] = []

    def run(self, haproxy: HAProxy, watch: Watch) -> list[Phase]:
        """Settle, then steady, freeze and thaw under one client load; returns the phases."""
        o = self.opts
        settle = Phase("balancer: both engines admitted")
        began = time.time()
        both = watch.wait(began, lambda s: verdict_is(REAL, {"admit"})(s) and verdict_is(SIM, {"admit"})(s)
                          and takes(REAL)(s) and takes(SIM)(s), 120)
        if both is None:
            last = watch.snapshot()[-1:] or None
            settle.failures.append(f"not both admitted and in rotation within 120 s: {last}")
            self.phases.append(settle)
            return self.phases
        settle.notes.append(f"both admitted and in HAProxy's rotation {both.at - began:.1f}s after HAProxy "
                            f"started (agent trusted: {both.trusted})")
        self.phases.append(settle)
        load = ClientLoad(haproxy.port, clients=o.clients, max_tokens=o.max_tokens, timeout=o.client_timeout_s,
                          model=self.served_name, prompt=prompt_maker(o.prompt_words),
                          fields={"ignore_eos": True}).start()
        try:
            self.steady(haproxy, watch, load)
            self.freeze_and_thaw(haproxy, watch, load)
        finally:
            self.engine.signal_group(signal.SIGCONT)
            load.stop()
        return self.phases

    def steady(self, haproxy: HAProxy, watch: Watch, load: ClientLoad) -> None:
        """Steady load: count the real vLLM's verdict changes and the failed requests."""
        phase = Phase("balancer: steady load through HAProxy")
        start, mono = time.time(), time.monotonic()
        before = haproxy.servers()
        self.log(f"balancer: steady load for {self.opts.steady_s:.0f}s")
        time.sleep(self.opts.steady_s)
        end, mono_end = time.time(), time.monotonic()
        after = haproxy.servers()
        samples = watch.snapshot()
        changes = verdict_changes(samples, REAL, start, end)
        flapped = flaps(changes, verdict_at(samples, REAL, start))
        sim_changes = verdict_changes(samples, SIM, start, end)
        seen = sorted({s.verdicts[REAL] for s in samples if start <= s.at <= end and REAL in s.verdicts})
        held = held_proposals(samples, REAL, start, end)
        in_window = [s for s in samples if start <= s.at <= end]
        out_samples = sum(1 for s in in_window if out(REAL)(s))
        done = [x for x in load.outcomes if mono <= x.started <= mono_end]
        bad = failed(load.outcomes, mono, mono_end)
        served = {j: after[j].requests - before[j].requests for j in (REAL, SIM)}
        phase.notes.append(f"{end - start:.0f}s, {len(in_window)} samples: {REAL} verdicts seen {seen}, "
                           f"{len(changes)} changes ({len(flapped)} flaps: back to an earlier verdict)"
                           + "".join(f", {a}->{b} at +{t - start:.1f}s" for t, a, b in changes)
                           + f"; {SIM} {len(sim_changes)} changes; held by hysteresis "
                           f"(samples with a proposal) {held or 'none'}")
        phase.notes.append(f"{REAL}'s own KV usage gauge: {raw_spread(samples, start, end)}; the agent's "
                           f"readings: free KV {spread(samples, REAL, start, end, 'free')}, predicted wait "
                           f"{spread(samples, REAL, start, end, 'wait')} s")
        phase.notes.append(f"clients: {len(done)} requests, {describe(bad)}; HAProxy sent {REAL} {served[REAL]}, "
                           f"{SIM} {served[SIM]}; {REAL} out of rotation in {out_samples} samples")
        if flapped:
            phase.failures.append(f"{REAL}'s verdict flapped {len(flapped)} times: "
                                  + ", ".join(f"{a}->{b} at +{t - start:.1f}s" for t, a, b in flapped))
        if out_samples and not changes:
            phase.failures.append(f"HAProxy had {REAL} out of rotation in {out_samples} samples of steady load")
        if bad:
            phase.failures.append(f"{len(bad)} client requests failed under steady load")
        if served[REAL] == 0:
            phase.failures.append(f"HAProxy sent {REAL} nothing: the steady phase measured nothing")
        self.phases.append(phase)

    def freeze_and_thaw(self, haproxy: HAProxy, watch: Watch, load: ClientLoad) -> None:
        """SIGSTOP the real vLLM until HAProxy has it out (plus a few seconds), then SIGCONT and wait for its
        readmission."""
        o = self.opts
        phase = Phase("balancer: vLLM frozen (SIGSTOP)")
        self.log("balancer: SIGSTOP the real vLLM")
        fault, fault_mono = time.time(), time.monotonic()
        self.engine.signal_group(signal.SIGSTOP)
        said = watch.wait(fault, verdict_is(REAL, OUT), o.out_within_s)
        gone = watch.wait(fault, out(REAL), o.out_within_s + 5)
        out_mono = time.monotonic()
        time.sleep(8)
        at_later = requests_of(haproxy, REAL)
        # the verdict's own time (the agent's tick), not the sample that saw it; HAProxy's count at the last
        # sample before it and at the first sample that showed the server out
        said_at = min(said.since.get(REAL, said.at), said.at) if said is not None else None
        samples = watch.snapshot()
        at_said = requests_before(samples, REAL, said_at if said_at is not None else time.time())
        at_out = gone.servers[REAL].requests if gone is not None else requests_of(haproxy, REAL)
        if said is None or said_at is None:
            phase.failures.append(f"the agent's verdict stayed in rotation {o.out_within_s:.0f}s after the fault")
        else:
            phase.notes.append(f"fault -> verdict {said.verdicts[REAL]}: {said_at - fault:.1f}s (the agent's tick)")
        if gone is None:
            phase.failures.append(f"HAProxy still sent {REAL} requests {o.out_within_s + 5:.0f}s after the fault")
        else:
            status = gone.servers[REAL]
            phase.notes.append(f"fault -> HAProxy out ({status.status}, weight {status.weight}, agent "
                               f"{status.agent_status}): {gone.at - fault:.1f}s"
                               + (f" (verdict -> HAProxy {gone.at - said_at:.2f}s; sampled every 0.2 s)"
                                  if said_at else ""))
        phase.notes.append(f"requests HAProxy sent {REAL} after the agent's verdict: {at_out - at_said}, "
                           f"after it was out: {at_later - at_out}")
        if at_later != at_out:
            phase.failures.append(f"HAProxy sent {REAL} {at_later - at_out} requests after taking it out")
        held = failed(load.outcomes, fault_mono - o.client_timeout_s, out_mono)
        after_out = failed(load.outcomes, out_mono, time.monotonic())
        phase.notes.append(f"clients: {describe(held)} before HAProxy took it out (held by the frozen "
                           f"engine), {describe(after_out)} after")
        if after_out:
            phase.failures.append(f"{len(after_out)} client requests failed after HAProxy took {REAL} out")
        self.phases.append(phase)
        self.thaw(haproxy, watch, load)

    def thaw(self, haproxy: HAProxy, watch: Watch, load: ClientLoad) -> None:
        """SIGCONT: time the readmission."""
        o = self.opts
        phase = Phase("balancer: vLLM thawed (SIGCONT)")
        self.log("balancer: SIGCONT the real vLLM")
        thaw, thaw_mono = time.time(), time.monotonic()
        self.engine.signal_group(signal.SIGCONT)
        admit = watch.wait(thaw, verdict_is(REAL, {"admit"}), o.back_within_s)
        back = watch.wait(thaw, takes(REAL), o.back_within_s if admit is None else 15)
        served_at: float | None = None
        if back is not None:
            base = back.servers[REAL].requests
            hit = watch.wait(back.at, lambda s: REAL in s.servers and s.servers[REAL].requests > base, 30)
            served_at = hit.at if hit is not None else None
        time.sleep(5)
        end_mono = time.monotonic()
        if admit is None:
            phase.failures.append(f"the agent did not readmit {REAL} within {o.back_within_s:.0f}s of SIGCONT")
        else:
            path = [f"{a}->{b} +{t - thaw:.1f}s" for t, a, b in verdict_changes(watch.snapshot(), REAL, thaw,
                                                                               admit.at)]
            admitted = min(admit.since.get(REAL, admit.at), admit.at)
            phase.notes.append(f"SIGCONT -> verdict admit: {admitted - thaw:.1f}s (the agent's tick; seen: "
                               f"{', '.join(path) or 'direct'})")
        if back is None:
            phase.failures.append(f"HAProxy did not take {REAL} back")
        else:
            phase.notes.append(f"SIGCONT -> HAProxy in rotation: {back.at - thaw:.1f}s"
                               + (f", -> first request sent to it: {served_at - thaw:.1f}s" if served_at else ""))
        if back is not None and served_at is None:
            phase.failures.append(f"HAProxy took {REAL} back but sent it nothing within 30 s")
        back_mono = thaw_mono + ((back.at - thaw) if back is not None else 0.0)
        bad = failed(load.outcomes, back_mono, end_mono)
        phase.notes.append(f"clients after readmission: {describe(bad)}; "
                           f"{len([x for x in load.outcomes if x.started >= back_mono])} requests")
        if bad:
            phase.failures.append(f"{len(bad)} client requests failed after {REAL} was readmitted")
        self.phases.append(phase)


def run(engine: Engine, sim_port: int, agent_listen: str, agent_check_port: int, served_name: str, work: Path,
        opts: Options, log: Callable[[str], None]) -> list[Phase]:
    """HAProxy in front of *engine* (job ``vllm``) and the simulator on *sim_port* (job ``sim``), the agent
    (already running with :func:`balancer_config`) answering on *agent_check_port*; play the scenario, stop
    HAProxy, write the samples to ``WORK/samples.jsonl``."""
    work = work.resolve()  # HAProxy reads a stats socket path without a slash as host:port
    work.mkdir(parents=True, exist_ok=True)
    servers = [Server(REAL, engine.spec.port), Server(SIM, sim_port)]
    haproxy = HAProxy(work, servers, agent_check_port=agent_check_port, own_check=False).start()
    watch = Watch(agent_listen, haproxy, engine.base_url + "/metrics").start()
    try:
        return Scenario(engine, served_name, opts, log).run(haproxy, watch)
    finally:
        watch.stop()
        haproxy.stop()
        dump(watch.snapshot(), work / "samples.jsonl")


def dump(samples: list[Sample], path: Path) -> None:
    """Write every sample as JSON lines (for looking into a run afterwards)."""
    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps({"at": s.at, "trusted": s.trusted, "verdicts": s.verdicts, "proposed": s.proposed,
                                "since": s.since,
                                "servers": {j: {"status": v.status, "weight": v.weight, "requests": v.requests,
                                                "agent": v.agent_status} for j, v in s.servers.items()}}) + "\n")


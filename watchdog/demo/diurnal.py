"""Simulated diurnal traffic on one vLLM engine, and a replay of the rule pack over it on simulated time.

For the KV exhaustion forecast (rules/engines.yaml, docs/forecast.md): an hour of traffic takes seconds,
because nothing waits for the wall clock. The traffic is random but seeded (reproducible):

- arrivals per second follow a day curve ``low + (peak - low) * (1 - cos(2 pi t / 1 day)) / 2``; the
  hour replayed starts at ``start_hour`` of that day (6 h: the steepest morning rise; 18 h: the evening
  fall);
- each step, Poisson(rate x step) requests finish, with log-normal prompt and generation lengths observed
  into vLLM's token histograms (1-2-5 buckets, as vLLM V1 has them);
- requests in flight are Poisson(rate x mean latency) (Little's law), and KV usage is the tokens they hold
  (prompt + half the generation, on average) over the pool's capacity, clamped to 1;
- optionally, from ``drift_start_seconds``, the median prompt grows linearly by ``drift_tokens_per_second``
  (the long-context bomb, spread over minutes instead of seconds), which must be predicted.

Contract: :func:`diurnal_samples` yields ``(seconds since start, samples)`` per step, the samples named and
labelled as vLLM exports them plus ``job``/``instance``; :func:`replay_forecast` feeds them through the
real store and rule engine and returns the forecast and the alerts per step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from watchdog.engines.buckets import buckets_1_2_5
from watchdog.model import AlertState, Sample, metric, metric_name

DAY_SECONDS = 86_400.0
TOKEN_BUCKETS = buckets_1_2_5(32768)


@dataclass(frozen=True)
class DiurnalTraffic:
    """One engine's day, and which hour of it to replay."""

    low_rate: float = 5.0  # requests per second at night
    peak_rate: float = 25.0  # requests per second at the daily peak
    start_hour: float = 6.0
    seconds: float = 3600.0
    step_seconds: float = 10.0
    latency_seconds: float = 12.0  # mean request latency (in flight = rate x latency)
    prompt_median: float = 1000.0
    prompt_sigma: float = 0.8
    generation_median: float = 250.0
    generation_sigma: float = 0.6
    capacity_tokens: float = 500_000.0  # the KV pool: about 70 % used at the end of the morning hour
    drift_start_seconds: float | None = None
    drift_tokens_per_second: float = 0.0
    seed: int = 15


def arrival_rate(traffic: DiurnalTraffic, seconds: float) -> float:
    """Requests per second ``seconds`` into the replayed hour."""
    day = (traffic.start_hour * 3600.0 + seconds) / DAY_SECONDS
    return traffic.low_rate + (traffic.peak_rate - traffic.low_rate) * (1 - math.cos(2 * math.pi * day)) / 2


def prompt_median(traffic: DiurnalTraffic, seconds: float) -> float:
    """The median prompt length ``seconds`` into the replay (grows after ``drift_start_seconds``)."""
    if traffic.drift_start_seconds is None or seconds < traffic.drift_start_seconds:
        return traffic.prompt_median
    return traffic.prompt_median + traffic.drift_tokens_per_second * (seconds - traffic.drift_start_seconds)


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (normal approximation above 50, Knuth below)."""
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


@dataclass
class _Histogram:
    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
        self.total += value
        self.count += 1

    def samples(self, name: str, labels: dict[str, str]) -> list[Sample]:
        counts = self.counts or [0] * len(self.bounds)
        out = [Sample(metric(f"{name}_bucket", **labels, le=repr(float(b))), float(c))
               for b, c in zip(self.bounds, counts, strict=True)]
        out.append(Sample(metric(f"{name}_bucket", **labels, le="+Inf"), float(self.count)))
        out.append(Sample(metric(f"{name}_sum", **labels), self.total))
        out.append(Sample(metric(f"{name}_count", **labels), float(self.count)))
        return out


def diurnal_samples(traffic: DiurnalTraffic, job: str = "vllm", instance: str = "127.0.0.1:8000",
                    model: str = "m") -> Iterator[tuple[float, list[Sample]]]:
    """Each step's ``/metrics`` scrape of the simulated engine, as samples (see the module docstring)."""
    rng = random.Random(traffic.seed)
    labels = {"job": job, "instance": instance, "model_name": model, "engine": "0"}
    prompt, generation = _Histogram(TOKEN_BUCKETS), _Histogram(TOKEN_BUCKETS)
    e2e_count = 0
    steps = int(traffic.seconds / traffic.step_seconds)
    for step in range(steps + 1):
        seconds = step * traffic.step_seconds
        rate = arrival_rate(traffic, seconds)
        median = prompt_median(traffic, seconds)
        if step:
            for _ in range(_poisson(rng, rate * traffic.step_seconds)):
                prompt.observe(round(rng.lognormvariate(math.log(median), traffic.prompt_sigma)))
                generation.observe(round(rng.lognormvariate(math.log(traffic.generation_median),
                                                            traffic.generation_sigma)))
                e2e_count += 1
        in_flight = _poisson(rng, rate * traffic.latency_seconds)
        mean_prompt = median * math.exp(traffic.prompt_sigma ** 2 / 2)
        mean_generation = traffic.generation_median * math.exp(traffic.generation_sigma ** 2 / 2)
        held = sum(rng.expovariate(1.0) for _ in range(in_flight)) * (mean_prompt + mean_generation / 2)
        kv_usage = min(1.0, held / traffic.capacity_tokens)
        samples = [
            Sample(metric("vllm:num_requests_running", **labels), float(in_flight)),
            Sample(metric("vllm:num_requests_waiting", **labels), 0.0),
            Sample(metric("vllm:kv_cache_usage_perc", **labels), kv_usage),
            Sample(metric("vllm:e2e_request_latency_seconds_count", **labels), float(e2e_count)),
            Sample(metric("vllm:e2e_request_latency_seconds_sum", **labels),
                   e2e_count * traffic.latency_seconds),
        ]
        samples += prompt.samples("vllm:request_prompt_tokens", labels)
        samples += generation.samples("vllm:request_generation_tokens", labels)
        yield seconds, samples


@dataclass
class ForecastReplay:
    """Per step: KV usage, the forecast (None when absent) and whether the alert was pending/firing."""

    seconds: list[float] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)
    eta_seconds: list[float | None] = field(default_factory=list)
    alerting: list[bool] = field(default_factory=list)

    def first_alert_seconds(self) -> float | None:
        """When the alert first went pending (None: never)."""
        return next((s for s, a in zip(self.seconds, self.alerting, strict=True) if a), None)

    def first_full_seconds(self, full: float = 1.0) -> float | None:
        """When KV usage first reached ``full`` (the first preemption; None: never)."""
        return next((s for s, u in zip(self.seconds, self.kv_usage, strict=True) if u >= full), None)

    def alert_share(self) -> float:
        """Share of steps with the alert pending or firing (the false-positive rate on safe traffic)."""
        return sum(self.alerting) / len(self.alerting) if self.alerting else 0.0


ALERT = "EngineKvExhaustionPredicted"


def replay_forecast(steps: Iterator[tuple[float, list[Sample]]], rule_paths: Sequence[str],
                    start_seconds: float = 1_800_000_000.0) -> ForecastReplay:
    """Ingest each step into a real :class:`Store`, evaluate the rules at it, record the forecast."""
    from watchdog.rules.engine import RuleEngine
    from watchdog.rules.loader import load_rule_files
    from watchdog.rules.queries import instant_values
    from watchdog.store import Store

    store = Store()
    engine = RuleEngine(load_rule_files(list(rule_paths)), store)
    out = ForecastReplay()
    for seconds, samples in steps:
        t_ms = round((start_seconds + seconds) * 1000)
        store.ingest("engine", samples, t_ms)
        alerts = engine.evaluate(t_ms)
        usage = [s.value for s in samples if metric_name(s.labels) == "vllm:kv_cache_usage_perc"]
        eta = instant_values("engine:kv_exhaustion_eta_seconds", store, t_ms)
        out.seconds.append(seconds)
        out.kv_usage.append(usage[0] if usage else 0.0)
        out.eta_seconds.append(eta[0][1] if eta else None)
        out.alerting.append(any(a.name == ALERT and a.state in (AlertState.PENDING, AlertState.FIRING)
                                for a in alerts))
    return out

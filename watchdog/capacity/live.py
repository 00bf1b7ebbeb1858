"""``plan --from URL``: this node's real traffic, read from a running agent's ``/metrics``.

The agent exports its canonical engine series and recording-rule outputs (rules/engines.yaml). From one
scrape this module takes, summed over the node's engines:

- request lengths: mean (``_sum / _count``) and P90 (``histogram_quantile`` over the buckets) of
  ``engine:request_prompt_tokens`` and ``engine:request_generation_tokens``; these histograms are
  cumulative since each engine started, so the figures describe its whole life, not the last minutes;
- arrival rate: ``engine:request_completions:rate5m`` (completions equal arrivals in steady state);
- the live KV pool in tokens: ``engine:kv_cache_capacity_tokens:sum`` of the smallest engine, since a
  plan counts replicas like it.

:func:`parse_live` is pure (exposition text in, :class:`LiveFigures` out); :func:`fetch_live` does the
HTTP GET (loopback or not: it only reads).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass

from watchdog.capacity.plan import Lengths
from watchdog.exposition import ExpositionError, parse_samples
from watchdog.model import METRIC_NAME
from watchdog.promql.functions import bucket_quantile


@dataclass(frozen=True)
class LiveFigures:
    """What a node's agent says about its traffic; None where the agent has no such series yet."""

    source: str
    lengths: Lengths | None
    rate: float | None
    kv_pool_tokens: float | None
    b_max_p90: float | None


def _histogram(samples: list[tuple[dict[str, str], float]], name: str) -> tuple[float | None, float | None]:
    """(mean, P90) of histogram ``name`` summed over every series; (None, None) without observations."""
    buckets: dict[float, float] = defaultdict(float)
    total = count = 0.0
    for labels, value in samples:
        metric = labels[METRIC_NAME]
        if metric == name + "_bucket":
            le = labels.get("le", "")
            buckets[float("inf") if le == "+Inf" else float(le)] += value
        elif metric == name + "_sum":
            total += value
        elif metric == name + "_count":
            count += value
    if count <= 0 or not buckets:
        return None, None
    return total / count, bucket_quantile(0.9, sorted(buckets.items()))


def parse_live(text: str, source: str) -> LiveFigures:
    """Figures from one ``/metrics`` page; ExpositionError (a ValueError) when it is not exposition text."""
    samples = [(dict(labels), value) for labels, value, _ in parse_samples(text)]

    def values(name: str) -> list[float]:
        return [v for labels, v in samples if labels[METRIC_NAME] == name and v == v]

    prompt_mean, prompt_p90 = _histogram(samples, "engine:request_prompt_tokens")
    output_mean, output_p90 = _histogram(samples, "engine:request_generation_tokens")
    lengths = None
    if None not in (prompt_mean, prompt_p90, output_mean, output_p90):
        lengths = Lengths(prompt_mean=prompt_mean or 0.0, output_mean=output_mean or 0.0,
                          prompt_p90=prompt_p90 or 0.0, output_p90=output_p90 or 0.0, source=f"live:{source}")
    rates = values("engine:request_completions:rate5m")
    pools = [v for v in values("engine:kv_cache_capacity_tokens:sum") if v > 0]
    b_max = values("engine:b_max_p90")
    return LiveFigures(source=source, lengths=lengths, rate=sum(rates) if rates else None,
                       kv_pool_tokens=min(pools) if pools else None, b_max_p90=min(b_max) if b_max else None)


def fetch_live(url: str, timeout: float = 10.0) -> LiveFigures:
    """GET ``url`` (``/metrics`` appended unless present) and parse it; ValueError naming the URL on failure."""
    target = url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise ValueError(f"--from {target}: cannot read the agent's metrics: {exc}") from exc
    try:
        return parse_live(text, target)
    except ExpositionError as exc:
        raise ValueError(f"--from {target}: not a metrics page: {exc}") from exc

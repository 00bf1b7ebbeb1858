"""``plan --from URL``: this node's real traffic, read from a running agent through its query API.

A handful of small instant queries (``POST URL/api/v1/query``), each evaluated by the agent over its own
store, instead of its whole ``/metrics`` page (thousands of series on a busy node, which took seconds to
serve and parse). Summed over the node's engines:

- request lengths over the last ``window_seconds`` (a setting, stated in the plan): the mean is
  ``increase(_sum[W]) / increase(_count[W])`` and the P90 ``histogram_quantile(0.9, ...)`` over
  ``increase(_bucket[W])`` of ``engine:request_prompt_tokens`` and ``engine:request_generation_tokens``;
  the histograms are cumulative since each engine started, so a plain ratio would describe the engine's
  whole life, not the recent traffic;
- arrival rate: ``engine:request_completions:rate5m`` (completions equal arrivals in steady state);
- the live KV pool in tokens: ``engine:kv_cache_capacity_tokens:sum`` of the smallest engine, since a plan
  counts replicas like it; with the live pool, B_max comes from it alone (``plan`` says so).

:func:`fetch_live` raises ValueError naming the URL when the agent cannot be read. It only reads.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from watchdog.capacity.plan import Lengths

DEFAULT_WINDOW_SECONDS = 600
"""Request lengths from the last 10 minutes: recent traffic, inside the agent's default 15-minute store."""


@dataclass(frozen=True)
class LiveFigures:
    """What a node's agent says about its traffic; None where the agent has no such series yet."""

    source: str
    window_seconds: int
    lengths: Lengths | None
    rate: float | None
    kv_pool_tokens: float | None
    b_max_p90: float | None


def _window(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def _lengths_queries(name: str, window: str) -> tuple[str, str]:
    """(mean, P90) queries of histogram ``name`` over ``window``, summed over every engine."""
    mean = f"sum(increase({name}_sum[{window}])) / sum(increase({name}_count[{window}]))"
    p90 = f"histogram_quantile(0.9, sum by (le) (increase({name}_bucket[{window}])))"
    return mean, p90


def _scalar(answer: Any) -> float | None:
    """The one value of a one-sample vector answer; None when empty or not a number."""
    result = answer.get("result") if isinstance(answer, dict) else None
    if not result:
        return None
    value = float(result[0]["value"][1])
    return value if math.isfinite(value) else None


def fetch_live(url: str, window_seconds: int = DEFAULT_WINDOW_SECONDS, timeout: float = 5.0) -> LiveFigures:
    """The agent's figures over the last ``window_seconds``; ValueError naming the URL on failure."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    base = urllib.parse.urlunsplit(parts._replace(path=parts.path.removesuffix("/metrics")))
    endpoint = base + "/api/v1/query"
    window = _window(window_seconds)

    def query(expr: str) -> float | None:
        body = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(endpoint, data=body, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ValueError(f"--from {endpoint}: the agent refused {expr!r}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ValueError(f"--from {endpoint}: cannot read the agent's query API: {exc}") from exc
        except ValueError as exc:
            raise ValueError(f"--from {endpoint}: not a Prometheus API answer") from exc
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise ValueError(f"--from {endpoint}: {expr!r}: {error}")
        return _scalar(answer.get("data"))

    figures = [query(q) for name in ("engine:request_prompt_tokens", "engine:request_generation_tokens")
               for q in _lengths_queries(name, window)]
    lengths = None
    if None not in figures:
        prompt_mean, prompt_p90, output_mean, output_p90 = (f or 0.0 for f in figures)
        lengths = Lengths(prompt_mean=prompt_mean, output_mean=output_mean, prompt_p90=prompt_p90,
                          output_p90=output_p90, source=f"live:{base}, last {window}")
    return LiveFigures(source=base, window_seconds=window_seconds, lengths=lengths,
                       rate=query("sum(engine:request_completions:rate5m)"),
                       kv_pool_tokens=query("min(engine:kv_cache_capacity_tokens:sum > 0)"),
                       b_max_p90=query("min(engine:b_max_p90)"))

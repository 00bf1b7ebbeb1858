"""A lane run's engine trace as promtool ``input_series`` (1 s steps), for forecast rule tests on real data.

The lane keeps two records of a run: ``logs/polls.jsonl`` (the agent's ``/metrics`` read about once a second:
requests running and waiting, KV usage) and ``logs/vllm.log`` (vLLM's own log: one access line per request
and a stats line every 10 s). Neither holds the engine's counters, so they are rebuilt:

- gauges (``vllm:num_requests_running``/``waiting``, ``vllm:kv_cache_usage_perc``): the polled value at the
  second of the agent's tick it shows; seconds no poll saw are left out (``_``), not invented;
- completed requests (``vllm:e2e_request_latency_seconds_count``): the access lines between two stats lines,
  spread evenly over those 10 s (within ``--load``), plus the canary probe's request every 5 s;
- ``vllm:e2e_request_latency_seconds_sum``: the running integral of the polled in-flight count, one second
  per tick, the last poll held over a gap. By Little's law the latency summed over the requests completed
  in a window is the integral of the requests in flight over it (up to the requests straddling its edges);
- token histograms: every load request has ``--prompt-tokens`` and ``--output-tokens`` (the lane's exact
  lengths), the probe 16 and 8 (its default prompt and ``max_tokens``); vLLM's 1-2-5 buckets.

Usage: ``python -m tests.real_engines.forecast_trace --polls P --vllm-log L --start 01:22:35 --end 01:26:55
--load 01:22:45-01:26:47 --date 12-02``. Prints YAML for a test's ``input_series``. Times are UTC (the lane
machine's clock); ``--start`` should be the agent's start (its first tick), t = 0 of the test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

LABELS = 'job="vllm",instance="127.0.0.1:8411",model_name="tiny",engine="0"'
ENGINE_LABELS = 'job="vllm",instance="127.0.0.1:8411",engine="0"'
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PROBE_PROMPT, PROBE_OUTPUT, PROBE_EVERY = 16, 8, 5
STATS = re.compile(r"INFO (\d\d-\d\d) (\d\d:\d\d:\d\d) \[loggers\.py")


def seconds_of(day: str, clock: str, year: int) -> float:
    """UTC epoch seconds of vLLM's ``MM-DD HH:MM:SS``."""
    return dt.datetime.strptime(f"{year}-{day} {clock}", "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=dt.timezone.utc).timestamp()


def access_counts(log: Path, year: int) -> Iterator[tuple[float, float, int]]:
    """(interval start, end, completion requests answered in it) between vLLM's stats lines."""
    previous: float | None = None
    count = 0
    with log.open(errors="replace") as lines:
        for line in lines:
            if "POST /v1/completions" in line:
                count += 1
            elif match := STATS.search(line):
                at = seconds_of(match.group(1), match.group(2), year)
                if previous is not None and at > previous:
                    yield previous, at, count
                previous, count = at, 0


def compress(values: list[float | None]) -> str:
    """promtool's series notation: ``_`` for a missing sample, ``a+bxn`` for runs of a constant step."""
    out: list[str] = []
    i = 0
    while i < len(values):
        v = values[i]
        if v is None:
            n = 1
            while i + n < len(values) and values[i + n] is None:
                n += 1
            out.append("_" if n == 1 else f"_x{n}")
            i += n
            continue
        n = 0
        step: float | None = None
        while i + n + 1 < len(values) and values[i + n + 1] is not None:
            d = round(values[i + n + 1] - values[i + n], 6)  # type: ignore[operator]
            if step is None:
                step = d
            elif d != step:
                break
            n += 1
        if n < 2 or step is None:
            out.append(_num(v))
            i += 1
            continue
        out.append(f"{_num(v)}{'+' if step >= 0 else '-'}{_num(abs(step))}x{n}")
        i += n + 1
    return " ".join(out)


def _num(v: float) -> str:
    return f"{round(v, 6):g}"


def rebuild(polls: Path, log: Path, start: float, end: float, load: tuple[float, float],
            prompt: int, output: int) -> dict[str, list[float | None]]:
    """The engine's series, one value per second in ``[start, end]`` (None: not seen)."""
    n = int(end - start) + 1
    seen: dict[int, dict[str, float]] = {}
    for line in polls.open():
        row = json.loads(line)
        k = int(row["at"] - start)
        if 0 <= k < n and "engine:requests_in_flight" in row["values"]:
            seen[k] = row["values"]
    in_flight = [seen[k]["engine:requests_in_flight"] if k in seen else None for k in range(n)]
    waiting = [seen[k]["engine:requests_waiting"] if k in seen else None for k in range(n)]
    kv = [seen[k]["engine:kv_cache_usage_ratio"] if k in seen else None for k in range(n)]
    running = [None if f is None or w is None else f - w for f, w in zip(in_flight, waiting, strict=True)]

    per_second = [0.0] * n
    for a, b, count in access_counts(log, dt.datetime.fromtimestamp(start, dt.timezone.utc).year):
        lo, hi = max(a, load[0]), min(b, load[1])
        secs = [k for k in range(n) if lo < start + k <= hi]
        probes = sum(1 for k in range(int(a - start) + 1, int(b - start) + 1) if k % PROBE_EVERY == 0 and k >= 0)
        for k in secs:
            per_second[k] += max(count - probes, 0) / len(secs)
    load_done, probe_done, latency = [], [], []
    total = probes_total = held = integral = 0.0
    for k in range(n):
        total += per_second[k]
        probes_total += 1 if k % PROBE_EVERY == 0 else 0
        held = in_flight[k] if in_flight[k] is not None else held  # type: ignore[assignment]
        integral += held
        load_done.append(round(total, 3))
        probe_done.append(probes_total)
        latency.append(round(integral, 3))
    series: dict[str, list[float | None]] = {
        f"vllm:num_requests_running{{{LABELS}}}": running,
        f"vllm:num_requests_waiting{{{LABELS}}}": waiting,
        f"vllm:kv_cache_usage_perc{{{LABELS}}}": kv,
        f"vllm:e2e_request_latency_seconds_count{{{LABELS}}}": [a + b for a, b in zip(load_done, probe_done,
                                                                                         strict=True)],
        f"vllm:e2e_request_latency_seconds_sum{{{LABELS}}}": latency,  # type: ignore[dict-item]
        f"vllm:generation_tokens_total{{{LABELS}}}": [output * a + PROBE_OUTPUT * b
                                                      for a, b in zip(load_done, probe_done, strict=True)],
    }
    for kind, length, probe_length in (("prompt", prompt, PROBE_PROMPT), ("generation", output, PROBE_OUTPUT)):
        name = f"vllm:request_{kind}_tokens"
        done = list(zip(load_done, probe_done, strict=True))
        series[f"{name}_count{{{LABELS}}}"] = [a + b for a, b in done]
        series[f"{name}_sum{{{LABELS}}}"] = [length * a + probe_length * b for a, b in done]
        for le in (*TOKEN_BUCKETS, math.inf):
            series[f'{name}_bucket{{{LABELS},le="{"+Inf" if le == math.inf else le}"}}'] = [
                (a if length <= le else 0) + (b if probe_length <= le else 0) for a, b in done]
    series[f"watchdog_engine_kv_cache_blocks{{{ENGINE_LABELS}}}"] = [16.0] * n
    series[f"watchdog_engine_kv_cache_block_size_tokens{{{ENGINE_LABELS}}}"] = [128.0] * n
    return series


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=Path, required=True)
    parser.add_argument("--vllm-log", type=Path, required=True)
    parser.add_argument("--date", required=True, help="MM-DD of the run (UTC)")
    parser.add_argument("--year", type=int, default=2026)
    parser.add_argument("--start", required=True, help="HH:MM:SS, t = 0 (the agent's first tick)")
    parser.add_argument("--end", required=True, help="HH:MM:SS, the last second")
    parser.add_argument("--load", required=True, help="HH:MM:SS-HH:MM:SS: when the lane's clients ran")
    parser.add_argument("--prompt-tokens", type=int, default=640)
    parser.add_argument("--output-tokens", type=int, default=16)
    args = parser.parse_args(argv)

    def at(clock: str) -> float:
        return seconds_of(args.date, clock, args.year)

    lo, hi = args.load.split("-")
    series = rebuild(args.polls, args.vllm_log, at(args.start), at(args.end), (at(lo), at(hi)),
                     args.prompt_tokens, args.output_tokens)
    for name, values in series.items():
        print(f"      - series: '{name}'\n        values: '{compress(values)}'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

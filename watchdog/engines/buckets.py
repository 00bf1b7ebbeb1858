"""Histogram bucket layouts of the latency histograms behind the SLO signals, per engine and version.

Data, not logic: from vLLM's ``vllm/engine/metrics.py`` (V0) and ``vllm/v1/metrics/loggers.py`` (V1),
and SGLang's ``python/sglang/srt/metrics/metrics_collector.py`` (0.3) and ``collector.py`` (current
defaults; SGLang lets operators override them with ``--bucket-*`` flags). The fixtures in
``tests/fixtures/engines/`` are rendered with the same layouts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """The bucket upper bounds (without +Inf) one engine version uses for one signal."""

    kind: str  # vllm | sglang
    version: str  # human-readable, used in warnings
    family: str  # the engine's histogram name
    bounds: tuple[float, ...]


_V0_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_V1_TTFT = (*_V0_TTFT, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_V0_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_V1_TPOT = (*_V0_TPOT, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_V0_E2E = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
_V1_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)
_SGL03_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               15.0, 20.0, 25.0, 30.0)
_SGL03_TPOT = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
               0.75, 1.0, 2.5)
_SGL_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
             400.0)
_SGL_ITL = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
            0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
_SGL_E2E = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
            400.0, 600.0, 1200.0, 1800.0, 2400.0)

LAYOUTS: dict[str, tuple[Layout, ...]] = {
    "ttft": (
        Layout("vllm", "vLLM V0 (<= 0.6)", "vllm:time_to_first_token_seconds", _V0_TTFT),
        Layout("vllm", "vLLM V1", "vllm:time_to_first_token_seconds", _V1_TTFT),
        Layout("sglang", "SGLang 0.3-0.4", "sglang:time_to_first_token_seconds", _SGL03_TTFT),
        Layout("sglang", "SGLang >= 0.5", "sglang:time_to_first_token_seconds", _SGL_TTFT),
    ),
    "tpot": (
        Layout("vllm", "vLLM V0 (<= 0.6)", "vllm:time_per_output_token_seconds", _V0_TPOT),
        Layout("vllm", "vLLM V1", "vllm:request_time_per_output_token_seconds", _V1_TPOT),
        Layout("sglang", "SGLang 0.3-0.4", "sglang:time_per_output_token_seconds", _SGL03_TPOT),
        Layout("sglang", "SGLang >= 0.5", "sglang:inter_token_latency_seconds", _SGL_ITL),
    ),
    "e2e": (
        Layout("vllm", "vLLM V0 (<= 0.6)", "vllm:e2e_request_latency_seconds", _V0_E2E),
        Layout("vllm", "vLLM V1", "vllm:e2e_request_latency_seconds", _V1_LATENCY),
        Layout("sglang", "SGLang >= 0.5", "sglang:e2e_request_latency_seconds", _SGL_E2E),
    ),
}


def bounds_of(signal: str, version: str) -> tuple[float, ...]:
    """The bucket bounds of ``signal`` for the layout whose ``version`` text is given (KeyError if none)."""
    for layout in LAYOUTS[signal]:
        if layout.version == version:
            return layout.bounds
    raise KeyError(f"no {signal} layout for {version!r}")


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_value`` (token histograms)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


def layouts_for(signal: str, kind: str) -> tuple[Layout, ...]:
    """Known layouts of ``signal`` (ttft|tpot|e2e) for an engine ``kind`` (vllm|sglang|auto)."""
    return tuple(layout for layout in LAYOUTS[signal] if kind in ("auto", layout.kind))


def boundary_at_or_below(target: float, bounds: tuple[float, ...]) -> float:
    """The largest boundary <= ``target`` (conservative: never overstates attainment), else the smallest."""
    eligible = [b for b in bounds if b <= target + 1e-12]
    return max(eligible) if eligible else min(bounds)


def le_spellings(bound: float) -> list[str]:
    """How exporters spell ``bound`` in ``le``: Python clients ("1.0", "0.25") and Go clients ("1")."""
    python = repr(float(bound))
    go = f"{bound:g}" if abs(bound) < 1e21 else python
    out = [python]
    for candidate in (go, python.removesuffix(".0")):
        if candidate not in out:
            out.append(candidate)
    return out

"""Load-test output: the JSON document, CSV rows, a PNG chart, a text table and a progress bar.

The JSON document (``loadtest --json``, ``--out DIR/result.json``) is described in docs/cli.md; ``plan
--knee`` reads its ``knee``. The chart needs matplotlib (the ``chart`` extra); without it
:func:`write_chart` raises :class:`ChartUnavailable` and the command says how to install it.
"""

from __future__ import annotations

import csv
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from watchdog.loadtest.analysis import StepSummary
from watchdog.loadtest.client import RequestResult
from watchdog.loadtest.sweep import SweepResult


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed."""


def step_json(step: StepSummary) -> dict[str, Any]:
    """One step of the JSON document."""
    return {
        "load": step.load, "requests": step.requests, "completed": step.completed, "errors": step.errors,
        "met_slo": step.met_slo, "duration_seconds": step.duration_seconds, "attainment": step.attainment,
        "request_rate": step.request_rate, "throughput_tokens_per_second": step.throughput_tps,
        "goodput_tokens_per_second": step.goodput_tps, "zone": step.zone.value,
        "ttft_seconds": step.ttft, "tpot_seconds": step.tpot, "itl_seconds": step.itl, "e2e_seconds": step.e2e,
        "error_examples": list(step.error_examples),
        "offered_rate": step.offered_rate, "achieved_rate": step.achieved_rate, "shortfall": step.shortfall,
    }


def result_json(result: SweepResult) -> dict[str, Any]:
    """The whole JSON document of a load test."""
    cfg = result.config
    return {
        "target": cfg.target, "api": cfg.api.value, "model": cfg.model, "mode": cfg.mode,
        "arrival": cfg.arrival.value if cfg.mode == "rate" else None,
        "lengths": {"prompt_tokens": cfg.lengths.prompt_tokens, "output_tokens": cfg.lengths.output_tokens,
                    "distribution": "replay" if cfg.lengths.replay else cfg.lengths.distribution.value},
        "objectives": {"ttft_seconds": cfg.objectives.ttft_seconds, "tpot_seconds": cfg.objectives.tpot_seconds,
                       "attainment": cfg.objectives.attainment, "collapse_below": cfg.objectives.collapse_below},
        "steps": [step_json(s) for s in result.steps],
        "knee": None if result.knee is None else step_json(result.knee),
        "knee_status": result.knee_status,
        "stopped": result.stopped,
        "elapsed_seconds": result.elapsed_seconds,
    }


CSV_FIELDS = ("load", "requests", "completed", "errors", "met_slo", "attainment", "zone", "duration_seconds",
              "request_rate", "throughput_tokens_per_second", "goodput_tokens_per_second",
              "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "itl_p99", "e2e_p90")


def write_csv(result: SweepResult, path: Path) -> None:
    """One row per step (seconds for latencies, tokens/s for throughput)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_FIELDS)
        for s in result.steps:
            writer.writerow([s.load, s.requests, s.completed, s.errors, s.met_slo, f"{s.attainment:.4f}",
                             s.zone.value, f"{s.duration_seconds:.3f}", f"{s.request_rate:.3f}",
                             f"{s.throughput_tps:.1f}", f"{s.goodput_tps:.1f}",
                             s.ttft["p50"], s.ttft["p90"], s.ttft["p99"], s.tpot["p50"], s.tpot["p90"],
                             s.tpot["p99"], s.itl["p99"], s.e2e["p90"]])


REQUEST_FIELDS = ("load", "sent_at_seconds", "ttft_seconds", "tpot_seconds", "itl_max_seconds", "e2e_seconds",
                  "prompt_tokens", "output_tokens", "met_slo", "error")


def write_requests_csv(result: SweepResult, path: Path) -> None:
    """One row per request: its load, send time from the run's first send, latencies, tokens, outcome."""
    first = min((r.sent_at for _, r in result.requests), default=0.0)
    objectives = result.config.objectives
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(REQUEST_FIELDS)
        for load, r in result.requests:
            writer.writerow([load, f"{r.sent_at - first:.4f}", r.ttft, r.tpot, max(r.itl, default=None), f"{r.e2e:.4f}",
                             r.prompt_tokens, r.output_tokens, int(objectives.met(r)), r.error or ""])


def write_chart(result: SweepResult, path: Path) -> None:
    """A PNG: throughput and goodput against load (top), TTFT and TPOT percentiles with objectives (bottom)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ChartUnavailable("the chart needs matplotlib: pip install 'inference-watchdog[chart]'") from exc
    steps = sorted(result.steps, key=lambda s: s.load)
    loads = [s.load for s in steps]
    unit = "requests/s" if result.config.mode == "rate" else "concurrency"
    fig, (top, ttft_ax, tpot_ax) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    colours = {"safe": "#d8f0d8", "degrading": "#fbeec8", "collapsed": "#f6d0d0"}
    for ax in (top, ttft_ax, tpot_ax):
        for i, step in enumerate(steps):
            first_gap = loads[1] - loads[0] if len(loads) > 1 else 1.0
            low = (loads[i - 1] + step.load) / 2 if i else step.load - first_gap / 2
            high = (step.load + loads[i + 1]) / 2 if i + 1 < len(steps) else step.load + (step.load - low)
            ax.axvspan(low, high, color=colours[step.zone.value], zorder=0)
        ax.grid(alpha=0.3)
    top.plot(loads, [s.throughput_tps for s in steps], "o--", color="grey", label="throughput (all output tokens)")
    top.plot(loads, [s.goodput_tps for s in steps], "o-", color="green", linewidth=2, label="goodput (met every SLO)")
    if result.knee is not None:
        top.axvline(result.knee.load, color="green", linestyle=":", label=f"knee {result.knee.load:g} {unit}")
    top.set_ylabel("output tokens/s")
    top.legend(loc="upper left", fontsize=8)
    objectives = result.config.objectives
    for ax, key, target, name in ((ttft_ax, "ttft", objectives.ttft_seconds, "TTFT"),
                                  (tpot_ax, "tpot", objectives.tpot_seconds, "TPOT")):
        for q, style in (("p50", "o-"), ("p90", "s-"), ("p99", "^-")):
            values = [getattr(s, key)[q] for s in steps]
            ax.plot([x for x, v in zip(loads, values, strict=True) if v is not None],
                    [v * 1000 for v in values if v is not None], style, label=f"{name} {q}")
        ax.axhline(target * 1000, color="red", linestyle="--", label=f"{name} objective {target * 1000:g} ms")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=8)
    tpot_ax.set_xlabel(f"offered load ({unit}); background: safe / degrading / collapsed")
    fig.suptitle(f"loadtest {result.config.target}: attainment objective {objectives.attainment:.0%}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def result_text(result: SweepResult) -> str:
    """A table of the steps, the knee and why the run stopped."""
    unit = "rate/s" if result.config.mode == "rate" else "conc"
    lines = [f"{unit:>8} {'sent':>5} {'ok':>5} {'attain':>7} {'tput tok/s':>11} {'goodput':>9} "
             f"{'TTFT p90':>9} {'TPOT p90':>9} {'ITL p99':>8}  zone",
             ]
    for s in result.steps:
        lines.append(f"{s.load:>8g} {s.requests:>5} {s.completed:>5} {s.attainment:>7.1%} {s.throughput_tps:>11,.1f} "
                     f"{s.goodput_tps:>9,.1f} {_ms(s.ttft['p90']):>7}ms {_ms(s.tpot['p90']):>7}ms "
                     f"{_ms(s.itl['p99']):>6}ms  {s.zone.value}")
        for example in s.error_examples:
            lines.append(f"{'':>8} error: {example}")
        if s.shortfall:
            lines.append(f"{'':>8} shortfall: sent {s.achieved_rate:.1f}/s of {s.offered_rate:.1f}/s offered: the "
                         "client could not keep up, so this step did not test its load")
    lines += latency_lines(result)
    status = result.knee_status
    if status == "not reached":
        highest = max(s.load for s in result.steps)
        lines.append(f"knee: not reached (every step met the attainment objective up to {highest:g} {unit}; "
                     "the knee lies above it: sweep higher)")
    elif result.knee is None:
        lines.append("knee: none (the lowest load already misses the objective)")
    else:
        lines.append(f"knee: {result.knee.load:g} {unit} (goodput {result.knee.goodput_tps:,.1f} tokens/s, "
                     f"attainment {result.knee.attainment:.1%})")
    lines.append(f"stopped: {result.stopped} after {result.elapsed_seconds:.1f} s")
    return "\n".join(lines) + "\n"


LATENCIES = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e"))


def latency_lines(result: SweepResult) -> list[str]:
    """Per step, mean, p50, p90 and p99 of TTFT, TPOT, ITL and E2E in milliseconds, as ``vllm bench``."""
    unit = "rate/s" if result.config.mode == "rate" else "conc"
    lines = ["", f"latency (ms)  {unit:>8} {'':<5} {'mean':>8} {'p50':>8} {'p90':>8} {'p99':>8}"]
    for s in result.steps:
        for label, key in LATENCIES:
            figures = getattr(s, key)
            cells = " ".join(f"{'-' if figures.get(name) is None else f'{figures[name] * 1000:.1f}':>8}"
                             for name in ("mean", "p50", "p90", "p99"))
            lines.append(f"{'':<13} {s.load:>8g} {label:<5} {cells}")
    return [*lines, ""]


class ProgressBar:
    """A one-line progress bar on a terminal (``\\r``-redrawn); silent when the stream is not a TTY."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30, force: bool = False) -> None:
        self.stream = stream
        self.width = width
        self.enabled = force or stream.isatty()
        self._lock = threading.Lock()
        self._load = 0.0
        self._total = 0
        self._done = 0
        self._errors = 0

    def start_step(self, load: float, total: int) -> None:
        """A new step begins."""
        with self._lock:
            if self.enabled and self._total:
                self.stream.write("\n")
            self._load, self._total, self._done, self._errors = load, total, 0, 0
            self._draw()

    def on_result(self, result: RequestResult) -> None:
        """One request finished (thread-safe)."""
        with self._lock:
            self._done += 1
            self._errors += 0 if result.ok else 1
            self._draw()

    def finish(self) -> None:
        """End the bar's line."""
        if self.enabled and self._total:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        if not self.enabled:
            return
        filled = int(self.width * self._done / self._total) if self._total else 0
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\rload {self._load:g} [{bar}] {self._done}/{self._total} errors {self._errors}")
        self.stream.flush()

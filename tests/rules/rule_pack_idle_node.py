#!/usr/bin/env python3
"""Writes ``rules/tests/idle_node.yaml``: an idle 8-GPU node that must fire no alert of the rule pack.

The node: 8 x H100 at rest (utilization 0, PCIe down at Gen1 as idle GPUs do, gpu_idle clock event,
31 C), historical but unchanging error counters (PCIe replays, NVLink replays, corrected and aggregate
ECC counts from long ago), every NVLink up; a vLLM 0.11 engine on GPUs 0-3 that served traffic earlier
(counters and histograms hold their values) and an SGLang engine on GPUs 4-7 that has served nothing yet
(everything 0: every ratio is NaN); an idle host. 30 minutes at 15-second samples, every rule file of the
pack loaded, and ``exp_alerts: []`` for every alert name at 5, 15 and 30 minutes.

Regenerate (from the repository root): ``python -m tests.rules.rule_pack_idle_node > rules/tests/idle_node.yaml``.
``tests/rules/test_rule_pack.py`` checks the file is what this module writes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from prometheus_client.utils import floatToGoString

from tests.support.alert_names import ISSUE_5_ALERTS
from watchdog.demo.engine_sim import (
    LATENCY_BUCKETS,
    SGLANG_E2E_BUCKETS,
    SGLANG_ITL_BUCKETS,
    SGLANG_TTFT_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from watchdog.engines.buckets import buckets_1_2_5

STEPS = 120  # 30 minutes of 15-second samples
ALERTS = ISSUE_5_ALERTS
RULE_FILES = ("../engines.yaml", "../gpu.yaml", "../host.yaml", "../serving-slo.yaml", "../serving.yaml",
              "../tp.yaml")
GROUP_ORDER = ("engines", "gpu-events", "gpu-health", "host-events", "host", "engine-slo-default", "engine-alerts",
               "tp")
VLLM = 'job="vllm-llama70b",instance="127.0.0.1:8000"'
SGLANG = 'job="sglang-qwen",instance="127.0.0.1:30000"'
PCI = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def const(value: float) -> str:
    """A value that holds for the whole test."""
    return f"{floatToGoString(value)}x{STEPS}"


def rising(per_step: float, start: float = 0.0) -> str:
    """A counter rising by ``per_step`` every sample."""
    return f"{floatToGoString(start)}+{floatToGoString(per_step)}x{STEPS}"


def labels(*parts: str) -> str:
    """``{a,b,...}`` from label-matcher texts."""
    return "{" + ",".join(p for p in parts if p) + "}"


def lv(name: str, value: object) -> str:
    """One ``name="value"`` pair."""
    return f'{name}="{value}"'


def gpu_series() -> Iterator[tuple[str, str]]:
    for i in range(8):
        g = f'gpu="{i}",uuid="GPU-{i:08x}-7b1c-4f0e-9a51-000000000000"'
        info = labels(g, lv('name', 'NVIDIA H100 80GB HBM3'), lv("pci_bus_id", f"00000000:{PCI[i].upper()}:00.0"),
                      lv("driver_version", "570.133.20"), lv("serial", f"16549220{i:05d}"))
        yield f"watchdog_gpu_info{info}", const(1)
        yield f"watchdog_gpu_lost{labels(g)}", const(0)
        yield f"watchdog_gpu_reset_required{labels(g)}", const(0)
        yield f"watchdog_gpu_nvml_stalled{labels(g)}", const(0)
        yield f"watchdog_gpu_utilization_ratio{labels(g)}", const(0)
        yield f"watchdog_gpu_memory_utilization_ratio{labels(g)}", const(0)
        # The engines hold their weights and KV pool while idle.
        yield f"watchdog_gpu_memory_used_bytes{labels(g)}", const(76968728985)
        yield f"watchdog_gpu_memory_total_bytes{labels(g)}", const(85520809984)
        yield f"watchdog_gpu_temperature_celsius{labels(g)}", const(31 + i % 3)
        yield f"watchdog_gpu_memory_temperature_celsius{labels(g)}", const(38 + i % 3)
        for kind, value in (("shutdown", 92), ("slowdown", 89), ("gpu_max", 87), ("mem_max", 95)):
            yield f"watchdog_gpu_temperature_threshold_celsius{labels(g, lv('kind', kind))}", const(value)
        yield f"watchdog_gpu_power_watts{labels(g)}", const(72)
        yield f"watchdog_gpu_power_limit_watts{labels(g)}", const(700)
        yield f"watchdog_gpu_energy_joules_total{labels(g)}", rising(72 * 15, 5.0e8)
        yield f"watchdog_gpu_sm_clock_hertz{labels(g)}", const(345e6)
        yield f"watchdog_gpu_sm_clock_max_hertz{labels(g)}", const(1980e6)
        for reason in ("gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"):
            value = 1 if reason == "gpu_idle" else 0
            yield f"watchdog_gpu_clock_event_active{labels(g, lv('reason', reason))}", const(value)
        # Idle GPUs train their link down to Gen1; width stays at x16.
        for kind, value in (("current", 1), ("max", 5), ("gpu_max", 5)):
            yield f"watchdog_gpu_pcie_link_generation{labels(g, lv('kind', kind))}", const(value)
        for kind in ("current", "max"):
            yield f"watchdog_gpu_pcie_link_width{labels(g, lv('kind', kind))}", const(16)
        yield f"watchdog_gpu_pcie_replays_total{labels(g)}", const(3 * i)
        for link in range(18):
            lk = f'link="{link}"'
            yield f"watchdog_gpu_nvlink_up{labels(g, lk)}", const(1)
            for kind, value in (("replay", 2 * (link % 3)), ("recovery", 0), ("crc_flit", link % 2)):
                yield f"watchdog_gpu_nvlink_errors_total{labels(g, lk, lv('type', kind))}", const(value)
        yield f"watchdog_gpu_ecc_mode_enabled{labels(g)}", const(1)
        for kind, scope, value in (("corrected", "volatile", 0), ("corrected", "aggregate", 12 * i),
                                   ("uncorrected", "volatile", 0), ("uncorrected", "aggregate", 1 if i == 6 else 0)):
            yield (f"watchdog_gpu_ecc_errors_total{labels(g, lv('type', kind), lv('scope', scope))}",
                   const(value))
        yield f"watchdog_gpu_remapped_rows{labels(g, lv('kind', 'correctable'))}", const(i % 2)
        yield f"watchdog_gpu_remapped_rows{labels(g, lv('kind', 'uncorrectable'))}", const(1 if i == 6 else 0)
        yield f"watchdog_gpu_row_remap_pending{labels(g)}", const(0)
        yield f"watchdog_gpu_row_remap_failed{labels(g)}", const(0)
        yield f"watchdog_gpu_processes{labels(g)}", const(1)
        engine = VLLM if i < 4 else SGLANG
        yield f"watchdog_engine_gpu_info{labels(engine, g)}", const(1)
        yield f"watchdog_engine_gpu_memory_used_bytes{labels(engine, g)}", const(76968728985)
        yield f"watchdog_engine_numa_mismatch{labels(engine, g)}", const(0)


def histogram(name: str, base: str, bounds: tuple[float, ...], total: int) -> Iterator[tuple[str, str]]:
    """A histogram that observed ``total`` values earlier and nothing since (constant buckets)."""
    n = len(bounds)
    for index, bound in enumerate((*bounds, float("inf"))):
        cumulative = total if index >= n else (total * (index + 1)) // (n + 1)
        le = floatToGoString(bound)
        yield f"{name}_bucket{labels(base, lv('le', le))}", const(cumulative)
    yield f"{name}_sum{labels(base)}", const(total * 0.7)
    yield f"{name}_count{labels(base)}", const(total)


def vllm_series() -> Iterator[tuple[str, str]]:
    base = VLLM + ',model_name="meta-llama/Llama-3.1-70B-Instruct",engine="0"'
    yield f"up{labels(VLLM)}", const(1)
    yield f"scrape_duration_seconds{labels(VLLM)}", const(0.004)
    yield f"watchdog_engine_info{labels(VLLM, lv('kind', 'vllm'))}", const(1)
    yield f"watchdog_engine_kv_cache_blocks{labels(base)}", const(31250)
    yield f"watchdog_engine_kv_cache_block_size_tokens{labels(base)}", const(16)
    yield f"watchdog_engine_gpu_memory_utilization_ratio{labels(base)}", const(0.9)
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "gpu_cache_usage_perc"):
        yield f"vllm:{name}{labels(base)}", const(0)
    yield f"vllm:num_preemptions_total{labels(base)}", const(17)
    yield f"vllm:prompt_tokens_total{labels(base)}", const(4_812_000)
    yield f"vllm:generation_tokens_total{labels(base)}", const(1_203_000)
    for prefix in ("prefix_cache", "gpu_prefix_cache"):
        yield f"vllm:{prefix}_queries_total{labels(base)}", const(4_812_000)
        yield f"vllm:{prefix}_hits_total{labels(base)}", const(2_646_600)
    for reason, value in (("stop", 3700), ("length", 280), ("abort", 20)):
        yield f"vllm:request_success_total{labels(base, lv('finished_reason', reason))}", const(value)
    yield from histogram("vllm:time_to_first_token_seconds", base, TTFT_BUCKETS, 4000)
    yield from histogram("vllm:time_per_output_token_seconds", base, TPOT_BUCKETS, 1_199_000)
    yield from histogram("vllm:inter_token_latency_seconds", base, TPOT_BUCKETS, 1_199_000)
    yield from histogram("vllm:request_time_per_output_token_seconds", base, TPOT_BUCKETS, 4000)
    yield from histogram("vllm:e2e_request_latency_seconds", base, LATENCY_BUCKETS, 4000)
    yield from histogram("vllm:request_queue_time_seconds", base, LATENCY_BUCKETS, 4000)
    yield from histogram("vllm:request_prompt_tokens", base, buckets_1_2_5(32768), 4000)
    yield from histogram("vllm:request_generation_tokens", base, buckets_1_2_5(32768), 4000)
    proc = VLLM
    yield f"watchdog_engine_process_up{labels(proc)}", const(1)
    yield f"watchdog_engine_process_cpu_seconds_total{labels(proc)}", rising(1.5, 86_400.0)
    yield f"watchdog_engine_process_restarts_total{labels(proc)}", const(1)


def sglang_series() -> Iterator[tuple[str, str]]:
    tok = SGLANG + ',model_name="Qwen/Qwen2.5-72B-Instruct"'
    sched = tok + ',engine_type="unified",tp_rank="0",pp_rank="0"'
    yield f"up{labels(SGLANG)}", const(1)
    yield f"watchdog_engine_info{labels(SGLANG, lv('kind', 'sglang'))}", const(1)
    for name, value in (("num_running_reqs", 0), ("num_queue_reqs", 0), ("token_usage", 0),
                        ("max_total_num_tokens", 1_200_000), ("gen_throughput", 0), ("cache_hit_rate", 0)):
        yield f"sglang:{name}{labels(sched)}", const(value)
    yield f"sglang:num_retracted_requests_total{labels(sched)}", const(0)
    for name in ("prompt_tokens_total", "generation_tokens_total", "cached_tokens_total", "num_requests_total",
                 "num_aborted_requests_total"):
        yield f"sglang:{name}{labels(tok)}", const(0)
    yield from histogram("sglang:time_to_first_token_seconds", tok, SGLANG_TTFT_BUCKETS, 0)
    yield from histogram("sglang:inter_token_latency_seconds", tok, SGLANG_ITL_BUCKETS, 0)
    yield from histogram("sglang:e2e_request_latency_seconds", tok, SGLANG_E2E_BUCKETS, 0)
    yield from histogram("sglang:queue_time_seconds", sched, SGLANG_E2E_BUCKETS, 0)
    yield f"watchdog_engine_process_up{labels(SGLANG)}", const(1)
    yield f"watchdog_engine_process_cpu_seconds_total{labels(SGLANG)}", rising(2.0, 3_600.0)
    yield f"watchdog_engine_process_restarts_total{labels(SGLANG)}", const(0)


def host_series() -> Iterator[tuple[str, str]]:
    yield "watchdog_host_cpus", const(64)
    for mode, per_step in (("user", 30.0), ("system", 6.0), ("idle", 920.0), ("iowait", 1.0), ("irq", 0.5),
                           ("softirq", 1.0), ("steal", 0.0)):
        yield f'watchdog_host_cpu_seconds_total{{cpu="all",mode="{mode}"}}', rising(per_step, 1e6)
    for name, value in (("load1", 0.4), ("load5", 0.5), ("load15", 0.5)):
        yield f"watchdog_host_{name}", const(value)
    yield "watchdog_host_memory_total_bytes", const(2.1e12)
    yield "watchdog_host_memory_available_bytes", const(1.8e12)
    for resource in ("cpu", "memory", "io"):
        for window in ("avg10", "avg60", "avg300"):
            yield (f'watchdog_host_pressure_ratio{{resource="{resource}",kind="some",window="{window}"}}',
                   const(0.002))
    yield 'watchdog_kmsg_lines_read_total{source="kmsg"}', rising(0.2)
    yield 'watchdog_kmsg_records_lost_total{source="kmsg"}', const(0)


def render() -> str:
    """The text of ``rules/tests/idle_node.yaml``."""
    out = [
        "# An idle 8-GPU node (8 x H100, a vLLM engine that served traffic earlier on GPUs 0-3, an SGLang",
        "# engine that has served nothing on GPUs 4-7, an idle host) over 30 minutes with every rule file of",
        "# the pack loaded: no alert may fire. Idle GPUs sit at PCIe Gen1 with the gpu_idle clock event; old",
        "# error counters hold their values; every latency ratio of the engines is NaN (no new requests).",
        "# GENERATED by `python -m tests.rules.rule_pack_idle_node > rules/tests/idle_node.yaml`.",
        "rule_files:",
        *[f"  - {f}" for f in RULE_FILES],
        "evaluation_interval: 15s",
        "group_eval_order:",
        *[f"  - {g}" for g in GROUP_ORDER],
        "",
        "tests:",
        "  - name: idle node",
        "    interval: 15s",
        "    input_series:",
    ]
    for series, values in (*gpu_series(), *vllm_series(), *sglang_series(), *host_series()):
        out.append(f"      - series: '{series}'")
        out.append(f"        values: '{values}'")
    out.append("    alert_rule_test:")
    for eval_time in ("5m", "15m", "30m"):
        for alert in ALERTS:
            out += [f"      - alertname: {alert}", f"        eval_time: {eval_time}", "        exp_alerts: []"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())

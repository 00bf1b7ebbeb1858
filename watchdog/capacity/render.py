"""A :class:`~watchdog.capacity.plan.Plan` as the ``plan`` command prints it: a readable table, or JSON.

The JSON document (``plan --json``) is described in docs/cli.md; keys are always present (null where a
figure does not apply), byte figures are bytes, times are seconds, rates per second. Non-finite numbers
print as the strings ``"+Inf"``/``"NaN"``, as elsewhere in this command line.
"""

from __future__ import annotations

import math
from typing import Any

from watchdog.capacity.plan import Plan


def _num(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def plan_json(plan: Plan) -> dict[str, Any]:
    """The stable JSON document of ``plan --json``."""
    inp = plan.inputs
    led = plan.ledgers
    model = inp.model
    demand = plan.demand
    bounds = plan.bounds
    return {
        "model": {
            "name": model.name, "source": model.source, "params": model.params,
            "active_params": model.params_per_token, "layers": model.layers, "attention": model.attention,
            "kv_heads": model.kv_heads if model.mla is None else None,
            "head_dim": model.head_dim if model.mla is None else None,
            "mla_kv_lora_rank": model.mla.kv_lora_rank if model.mla else None,
            "mla_rope_dim": model.mla.rope_dim if model.mla else None,
            "sliding_window": model.sliding_window, "sliding_layers": model.sliding_layers,
        },
        "gpu": {"name": inp.gpu.name, "display": inp.gpu.display, "source": inp.gpu.source,
                "usable_bytes": led.usable_bytes, "bf16_tflops": inp.gpu.bf16_tflops,
                "fp8_tflops": inp.gpu.fp8_tflops, "hbm_bytes_per_second": inp.gpu.hbm_bytes_per_second},
        "parallelism": {"tp": inp.par.tp, "pp": inp.par.pp, "gpus_per_node": inp.par.gpus},
        "dtypes": {"weights": inp.weight_dtype, "kv": inp.kv_dtype},
        "ledgers_per_gpu": {
            "usable_bytes": led.usable_bytes, "alpha": led.alpha, "cap_bytes": led.cap_bytes,
            "weights_bytes": led.weights_bytes, "runtime_bytes": led.runtime_bytes,
            "activation_bytes": led.activation_bytes, "reserve_bytes": led.reserve_bytes,
            "kv_pool_bytes": led.kv_pool_bytes,
        },
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
        "lengths": {
            "source": inp.lengths.source,
            "mean": {"prompt": inp.lengths.prompt_mean, "output": inp.lengths.output_mean,
                     "total": inp.lengths.total_mean, "kv_bytes_per_gpu": plan.kv_bytes_per_request_mean},
            "p90": {"prompt": inp.lengths.prompt_p90, "output": inp.lengths.output_p90,
                    "total": inp.lengths.total_p90, "kv_bytes_per_gpu": plan.kv_bytes_per_request_p90},
        },
        "b_max": {"mean": plan.b_max_mean, "p90": plan.b_max_p90,
                  "pool": "modelled" if inp.kv_pool_tokens_override is None else "live",
                  "pool_source": inp.kv_pool_source,
                  "pool_tokens": inp.kv_pool_tokens_override},
        "slo": {"ttft_seconds": inp.slo.ttft_seconds, "tpot_seconds": inp.slo.tpot_seconds,
                "percentile": inp.slo.percentile},
        "generation_capacity": {
            "tokens_per_second_per_node": _num(plan.generation_tps), "source": plan.generation_source,
            "roofline_batch": plan.roofline.batch if plan.roofline else None,
            "roofline_limited_by": plan.roofline.limited_by if plan.roofline else None,
        },
        "demand": None if demand is None else {
            "source": demand.source, "rate_per_second": demand.rate, "life_seconds": demand.life_seconds,
            "concurrency": demand.concurrency, "generation_tokens_per_second": demand.generation_tps,
            "prefill_tokens_per_second": demand.prefill_tps,
        },
        "bounds": None if bounds is None else {
            "memory_nodes": _num(bounds.memory_nodes), "compute_nodes": _num(bounds.compute_nodes),
            "binding": bounds.binding, "headroom": inp.headroom, "redundancy": inp.redundancy,
            "nodes": bounds.nodes, "gpus": bounds.gpus,
        },
        "sensitivity": [
            {"change": v.change, "b_max_p90": v.b_max_p90, "memory_nodes": _num(v.memory_nodes),
             "compute_nodes": _num(v.compute_nodes), "nodes": v.nodes, "gpus": v.gpus, "note": v.note}
            for v in plan.sensitivity
        ],
        "warnings": list(plan.warnings),
    }


def _gb(value: float) -> str:
    return f"{value / 1e9:8.2f} GB"


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def plan_text(plan: Plan) -> str:
    """The human-readable plan."""
    inp = plan.inputs
    led = plan.ledgers
    m = inp.model
    kv_shape = (f"MLA latent {m.mla.kv_lora_rank}+{m.mla.rope_dim}" if m.mla
                else f"GQA {m.kv_heads} KV heads x {m.head_dim}")
    if m.sliding_window:
        kv_shape += f", {m.sliding_layers}/{m.layers} layers windowed at {m.sliding_window}"
    lines = [
        f"Model   {m.name}: {m.params / 1e9:.1f}B params, {m.layers} layers, {kv_shape}",
        f"GPU     {inp.gpu.display}; TP={inp.par.tp} PP={inp.par.pp} ({inp.par.gpus} GPUs per replica);"
        f" weights {inp.weight_dtype}, KV {inp.kv_dtype}",
        "",
    ]
    live_pool = inp.kv_pool_tokens_override
    if live_pool is None:
        lines += [
            "Memory per GPU (four ledgers)",
            f"  usable                     {_gb(led.usable_bytes)}",
            f"  {f'cap (alpha {led.alpha:g})':<27}{_gb(led.cap_bytes)}",
            f"  1 weights                  {_gb(led.weights_bytes)}",
            f"  2 runtime + activations    {_gb(led.runtime_bytes + led.activation_bytes)}",
            f"  3 safety reserve (1-alpha) {_gb(led.reserve_bytes)}",
            f"  4 KV pool                  {_gb(led.kv_pool_bytes)}",
            f"  KV per token per GPU       {plan.kv_bytes_per_token:,.0f} B",
            "",
            "B_max per replica (requests the KV pool holds at once; pool: modelled from the ledgers above)",
            f"  at mean length {inp.lengths.total_mean:>9,.0f} tokens  {plan.b_max_mean:>7,}"
            f"   ({plan.kv_bytes_per_request_mean / 1e6:,.1f} MB per request per GPU)",
            f"  at P90 length  {inp.lengths.total_p90:>9,.0f} tokens  {plan.b_max_p90:>7,}"
            f"   ({plan.kv_bytes_per_request_p90 / 1e6:,.1f} MB per request per GPU)",
        ]
    else:
        # One source for the pool: the live engine's tokens, not the modelled memory of the GPU named.
        lines += [
            f"KV pool   the live engine's: {live_pool:,.0f} tokens (smallest engine, {inp.kv_pool_source}); "
            "the GPU's modelled memory ledgers are not used (--modelled-pool uses them instead)",
            "",
            "B_max per replica (requests the KV pool holds at once; pool: live)",
            f"  at mean length {inp.lengths.total_mean:>9,.0f} tokens  {plan.b_max_mean:>7,}",
            f"  at P90 length  {inp.lengths.total_p90:>9,.0f} tokens  {plan.b_max_p90:>7,}",
        ]
    lines += [
        f"  request lengths            {inp.lengths.source}",
        f"  generation capacity        {_fmt(plan.generation_tps, 0)} tokens/s per replica ({plan.generation_source})",
    ]
    demand, bounds = plan.demand, plan.bounds
    if demand is not None and bounds is not None:
        in_flight = f"{demand.rate:g}/s x life" if demand.rate is not None else "given"
        worst = max(bounds.memory_nodes, bounds.compute_nodes)
        lines += [
            "",
            "Dual bound",
            f"  request life               {demand.life_seconds:.2f} s"
            f" (TTFT {inp.slo.ttft_seconds:g} s + {inp.lengths.output_mean:g} x TPOT {inp.slo.tpot_seconds:g} s)",
            f"  in flight at peak          {demand.concurrency:,.1f} ({in_flight})",
            f"  memory bound               {_fmt(bounds.memory_nodes, 2)} replicas"
            f" ({demand.concurrency:,.1f} / B_max@P90 {plan.b_max_p90:,})",
            f"  generation demand          {demand.generation_tps:,.0f} tokens/s",
            f"  compute bound              {_fmt(bounds.compute_nodes, 2)} replicas"
            f" ({demand.generation_tps:,.0f} / {_fmt(plan.generation_tps, 0)})",
            f"  binding                    {bounds.binding}",
            f"  replicas                   {bounds.nodes} = ceil({_fmt(worst, 2)}"
            f" x headroom {inp.headroom:g} x redundancy {inp.redundancy:g}), {bounds.gpus} GPUs",
        ]
    if plan.sensitivity:
        lines += ["", "What changes the answer most",
                  f"  {'change':<22}{'B_max@P90':>10}{'memory':>10}{'compute':>10}{'replicas':>9}{'GPUs':>7}  note"]
        for v in plan.sensitivity:
            nodes, gpus = ("-", "-") if v.nodes is None else (str(v.nodes), str(v.gpus))
            lines.append(f"  {v.change:<22}{v.b_max_p90:>10,}{_fmt(v.memory_nodes, 2):>10}"
                         f"{_fmt(v.compute_nodes, 2):>10}{nodes:>9}{gpus:>7}  {v.note}")
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"

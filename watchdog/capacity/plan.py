"""The capacity plan: per-replica memory figures, the dual bound, the node count and what moves it.

:func:`make_plan` is pure: :class:`PlanInputs` in, :class:`Plan` out (``PlanError`` when the model does
not fit at all). The dual bound:

- memory: requests in flight at peak, by Little's law ``rate x (TTFT + mean output x TPOT)`` (or a
  given concurrency), over B_max at the P90 request length;
- compute: generation tokens per second at peak (``rate x mean output``; with a given concurrency, every
  request in flight streaming at the TPOT target: a closed loop keeps every slot busy) over one replica's safe
  generation throughput (given, measured by ``loadtest``, or a roofline ceiling when neither);
- nodes = ceil(max(memory, compute) x headroom x redundancy), GPUs = nodes x TP x PP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from watchdog.capacity.catalogue import GpuSpec, ModelSpec
from watchdog.capacity.ledger import (
    Ledgers,
    Parallelism,
    Roofline,
    b_max,
    kv_bytes_per_request,
    kv_bytes_per_token,
    kv_dtype_bytes,
    roofline_generation,
    weights_bytes_per_gpu,
)


class PlanError(ValueError):
    """The inputs describe something that cannot serve at all (says what does not fit, and what helps)."""


@dataclass(frozen=True)
class Lengths:
    """Request lengths in tokens: means and P90s of prompt and output."""

    prompt_mean: float
    output_mean: float
    prompt_p90: float
    output_p90: float
    source: str = "given"

    @property
    def total_mean(self) -> float:
        """Mean tokens a request holds at its end (prompt + output)."""
        return self.prompt_mean + self.output_mean

    @property
    def total_p90(self) -> float:
        """P90 prompt plus P90 output: at least the P90 of the total, so B_max at it errs safe."""
        return self.prompt_p90 + self.output_p90


@dataclass(frozen=True)
class Slo:
    """Latency objectives at a percentile."""

    ttft_seconds: float
    tpot_seconds: float
    percentile: float = 95.0


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan depends on. ``*_override`` fields replace the computed figure (to reproduce a
    sizing done with rounded inputs)."""

    model: ModelSpec
    gpu: GpuSpec
    lengths: Lengths
    slo: Slo
    par: Parallelism = field(default_factory=Parallelism)
    weight_dtype: str = "bf16"
    kv_dtype: str = "auto"
    alpha: float = 0.9
    runtime_bytes: float = 4e9
    activation_bytes: float = 0.0
    usable_bytes_override: float | None = None
    weights_bytes_override: float | None = None
    kv_bytes_per_token_override: float | None = None
    kv_pool_tokens_override: float | None = None
    kv_pool_source: str = "ledgers"
    rate: float | None = None
    concurrency: float | None = None
    node_generation_tps: float | None = None
    node_generation_source: str = "given"
    headroom: float = 1.25
    redundancy: float = 1.15


@dataclass(frozen=True)
class Demand:
    """Peak load: arrival rate, request life, requests in flight, token rates."""

    rate: float | None
    life_seconds: float
    concurrency: float
    generation_tps: float
    prefill_tps: float | None
    source: str  # "rate" or "concurrency"


@dataclass(frozen=True)
class Bounds:
    """Replicas needed by each bound before headroom and redundancy, the binding one, and the result."""

    memory_nodes: float
    compute_nodes: float
    binding: str  # "memory" or "compute"
    nodes: int
    gpus: int


@dataclass(frozen=True)
class Variant:
    """One row of the sensitivity table: a single change and the plan it gives."""

    change: str
    b_max_p90: int
    memory_nodes: float | None
    compute_nodes: float | None
    nodes: int | None
    gpus: int | None
    note: str = ""


@dataclass(frozen=True)
class Plan:
    """The whole answer; see docs/cli.md for its JSON shape."""

    inputs: PlanInputs
    ledgers: Ledgers
    kv_bytes_per_token: float
    kv_bytes_per_request_mean: float
    kv_bytes_per_request_p90: float
    b_max_mean: int
    b_max_p90: int
    generation_tps: float | None
    generation_source: str
    roofline: Roofline | None
    demand: Demand | None
    bounds: Bounds | None
    sensitivity: tuple[Variant, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _gib(value: float) -> str:
    return f"{value / 1e9:.1f} GB"


def _ledgers(inp: PlanInputs) -> Ledgers:
    usable = inp.usable_bytes_override if inp.usable_bytes_override is not None else inp.gpu.usable_bytes
    weights = (inp.weights_bytes_override if inp.weights_bytes_override is not None
               else weights_bytes_per_gpu(inp.model, inp.weight_dtype, inp.par))
    return Ledgers(usable_bytes=usable, alpha=inp.alpha, weights_bytes=weights, runtime_bytes=inp.runtime_bytes,
                   activation_bytes=inp.activation_bytes)


def _demand(inp: PlanInputs) -> Demand | None:
    life = inp.slo.ttft_seconds + inp.lengths.output_mean * inp.slo.tpot_seconds
    if inp.rate is not None:
        return Demand(rate=inp.rate, life_seconds=life, concurrency=inp.rate * life,
                      generation_tps=inp.rate * inp.lengths.output_mean,
                      prefill_tps=inp.rate * inp.lengths.prompt_mean, source="rate")
    if inp.concurrency is not None:
        return Demand(rate=None, life_seconds=life, concurrency=inp.concurrency,
                      generation_tps=inp.concurrency / inp.slo.tpot_seconds, prefill_tps=None, source="concurrency")
    return None


def _core(inp: PlanInputs) -> Plan:
    """The plan without its sensitivity table."""
    ledgers = _ledgers(inp)
    warnings: list[str] = []
    if ledgers.kv_pool_bytes <= 0:
        raise PlanError(
            f"no room for a KV pool: weights {_gib(ledgers.weights_bytes)} + runtime {_gib(ledgers.runtime_bytes)}"
            f" + activations {_gib(ledgers.activation_bytes)} per GPU exceed the cap {_gib(ledgers.cap_bytes)}"
            f" ({inp.alpha:g} x {_gib(ledgers.usable_bytes)}); raise TP/PP, use FP8 weights, or a larger GPU")
    element = kv_dtype_bytes(inp.model, inp.kv_dtype)
    per_token = (inp.kv_bytes_per_token_override if inp.kv_bytes_per_token_override is not None
                 else kv_bytes_per_token(inp.model, element, inp.par))
    override = inp.kv_bytes_per_token_override
    per_mean = kv_bytes_per_request(inp.model, element, inp.par, inp.lengths.total_mean, override)
    per_p90 = kv_bytes_per_request(inp.model, element, inp.par, inp.lengths.total_p90, override)
    if inp.kv_pool_tokens_override is not None:
        b_mean = math.floor(inp.kv_pool_tokens_override / inp.lengths.total_mean)
        b_p90 = math.floor(inp.kv_pool_tokens_override / inp.lengths.total_p90)
    else:
        b_mean, b_p90 = b_max(ledgers.kv_pool_bytes, per_mean), b_max(ledgers.kv_pool_bytes, per_p90)
    if b_p90 < 1:
        raise PlanError(f"a P90 request ({inp.lengths.total_p90:.0f} tokens, {_gib(per_p90)} of KV per GPU) does not"
                        f" fit in the KV pool ({_gib(ledgers.kv_pool_bytes)} per GPU); cap the length or add TP/PP")
    kv_heads, tp = inp.model.kv_heads, inp.par.tp
    if inp.model.mla is None and kv_heads and kv_heads % tp and tp % kv_heads:
        warnings.append(f"TP={tp} neither divides nor is a multiple of the {kv_heads} KV heads: engines refuse it")
    if inp.weight_dtype == "fp8" and inp.gpu.fp8_tflops is None:
        warnings.append(f"{inp.gpu.display} has no FP8 tensor cores: FP8 weights save memory but compute in 16 bit")
    if inp.model.max_context and inp.lengths.total_p90 > inp.model.max_context:
        warnings.append(f"P90 request length {inp.lengths.total_p90:.0f} exceeds the model's context "
                        f"{inp.model.max_context}")
    link = inp.gpu.interconnect
    if link is not None and tp > link.peer_group:
        where = (f"{inp.gpu.display} GPUs meet only over {link.link}" if link.peer_group == 1 else
                 f"{link.link} joins only {link.peer_group} {inp.gpu.display} GPUs")
        warnings.append(f"TP={tp}, but {where}: every layer's all-reduce crosses the slower link, so generation "
                        f"falls below the roofline; keep TP within {link.peer_group} and add PP or replicas")
    roofline = None
    tps, source = inp.node_generation_tps, inp.node_generation_source
    if tps is None:
        roofline = roofline_generation(
            inp.model, inp.gpu, inp.par, ledgers.weights_bytes,
            kv_bytes_per_request(inp.model, element, inp.par, inp.lengths.prompt_mean + inp.lengths.output_mean / 2,
                                 override),
            b_mean, inp.slo.tpot_seconds, fp8_compute=inp.weight_dtype == "fp8")
        tps, source = roofline.tokens_per_second, "roofline"
        warnings.append("generation throughput is a roofline ceiling, not a measurement: the compute bound is "
                        "optimistic; measure with `loadtest` and pass --knee")
        if tps <= 0:
            warnings.append(f"the roofline cannot meet TPOT {inp.slo.tpot_seconds * 1000:g} ms at any batch")
    demand = _demand(inp)
    bounds = None
    if demand is not None:
        memory_nodes = demand.concurrency / b_p90
        compute_nodes = demand.generation_tps / tps if tps > 0 else math.inf
        worst = max(memory_nodes, compute_nodes)
        if math.isinf(worst):
            warnings.append("no finite node count: the compute bound is unreachable")
            nodes = 0
        else:
            nodes = max(1, math.ceil(worst * inp.headroom * inp.redundancy - 1e-9))
        bounds = Bounds(memory_nodes=memory_nodes, compute_nodes=compute_nodes,
                        binding="memory" if memory_nodes >= compute_nodes else "compute",
                        nodes=nodes, gpus=nodes * inp.par.gpus)
    return Plan(inputs=inp, ledgers=ledgers, kv_bytes_per_token=per_token, kv_bytes_per_request_mean=per_mean,
                kv_bytes_per_request_p90=per_p90, b_max_mean=b_mean, b_max_p90=b_p90, generation_tps=tps,
                generation_source=source, roofline=roofline, demand=demand, bounds=bounds,
                warnings=tuple(warnings))


def _variants(inp: PlanInputs) -> list[tuple[str, PlanInputs, str]]:
    """The single changes the sensitivity table tries, each with the assumption it makes."""
    held = "" if inp.node_generation_tps is None else "measured throughput held"
    out: list[tuple[str, PlanInputs, str]] = []
    if inp.weight_dtype not in ("fp8", "int8", "int4") and inp.weights_bytes_override is None:
        out.append(("FP8 weights", replace(inp, weight_dtype="fp8"), held))
    if inp.kv_dtype not in ("fp8", "int8") and inp.kv_bytes_per_token_override is None:
        out.append(("FP8 KV cache", replace(inp, kv_dtype="fp8"), held))
    lengths = inp.lengths
    # A length cap trims the tail: the P90 request halves, the mean (and so the demand) stays.
    half = replace(lengths, prompt_p90=lengths.prompt_p90 / 2, output_p90=lengths.output_p90 / 2)
    out.append(("P90 length halved", replace(inp, lengths=half), held))
    scale = 2
    doubled = replace(
        inp, par=Parallelism(inp.par.tp * scale, inp.par.pp),
        weights_bytes_override=None if inp.weights_bytes_override is None else inp.weights_bytes_override / scale,
        kv_bytes_per_token_override=(None if inp.kv_bytes_per_token_override is None
                                     else inp.kv_bytes_per_token_override / scale),
        node_generation_tps=None if inp.node_generation_tps is None else inp.node_generation_tps * scale)
    out.append((f"TP {inp.par.tp * scale}", doubled, "per-GPU throughput held" if held else ""))
    return out


def _modelled_pool_tokens(inp: PlanInputs) -> float:
    """Tokens the ledgers' KV pool holds at full-attention cost (for scaling a live pool)."""
    element = kv_dtype_bytes(inp.model, inp.kv_dtype)
    per_token = (inp.kv_bytes_per_token_override if inp.kv_bytes_per_token_override is not None
                 else kv_bytes_per_token(inp.model, element, inp.par))
    return _ledgers(inp).kv_pool_bytes / per_token


def make_plan(inp: PlanInputs) -> Plan:
    """The plan for ``inp``, with its sensitivity table (variants that cannot serve are left out).

    With a live KV pool, a variant's pool is the live one scaled by the ledgers' ratio (variant / base),
    so FP8 KV doubles it and FP8 weights or more TP grow it by what they free.
    """
    plan = _core(inp)
    rows: list[Variant] = []
    live_pool = inp.kv_pool_tokens_override
    base_tokens = _modelled_pool_tokens(inp) if live_pool is not None else 1.0
    for change, variant_inputs, note in _variants(inp):
        if base_tokens <= 0:
            break  # the ledgers cannot model this deployment, so they cannot scale its live pool either
        try:
            if live_pool is not None:
                scale = _modelled_pool_tokens(variant_inputs) / base_tokens
                variant_inputs = replace(variant_inputs, kv_pool_tokens_override=live_pool * scale)
            alt = _core(variant_inputs)
        except PlanError:
            continue
        b = alt.bounds
        rows.append(Variant(change=change, b_max_p90=alt.b_max_p90,
                            memory_nodes=None if b is None else b.memory_nodes,
                            compute_nodes=None if b is None else b.compute_nodes,
                            nodes=None if b is None else b.nodes, gpus=None if b is None else b.gpus, note=note))
    return replace(plan, sensitivity=tuple(rows))

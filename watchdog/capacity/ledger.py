"""The memory arithmetic of one model replica ("node"): four ledgers per GPU, KV bytes, B_max, a roofline.

Pure functions over plain data:

- four ledgers per GPU: weights (params x bytes / (TP x PP)), runtime (context, CUDA graphs) plus
  activations, the safety reserve outside the memory cap ``(1 - alpha) x usable``, and the paged KV pool
  that is left: ``usable x alpha - weights - runtime - activations``;
- KV bytes per request per GPU: for GQA ``2 x layers/PP x kv_heads/TP x head_dim x bytes`` per token (KV
  heads are replicated, not split, once TP exceeds them); for MLA ``layers/PP x (kv_lora_rank + rope_dim)
  x bytes`` per token on every TP rank; sliding-window layers hold at most ``window`` tokens;
- B_max: ``floor(kv_pool / kv_bytes_per_request(tokens))``, the requests of that size the pool holds at once;
- a roofline ceiling on generation throughput under a TPOT target, used only when no measured figure is
  given (it ignores prefill interference and scheduling, so it is optimistic by design).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from watchdog.capacity.catalogue import DTYPE_BYTES, GpuSpec, ModelSpec


@dataclass(frozen=True)
class Parallelism:
    """Tensor and pipeline parallel degrees of one replica; a replica is what a plan counts as a "node"."""

    tp: int = 1
    pp: int = 1

    @property
    def gpus(self) -> int:
        """GPUs per replica."""
        return self.tp * self.pp


@dataclass(frozen=True)
class Ledgers:
    """Bytes per GPU in each of the four ledgers, plus what the memory cap leaves outside them."""

    usable_bytes: float
    alpha: float
    weights_bytes: float
    runtime_bytes: float
    activation_bytes: float

    @property
    def cap_bytes(self) -> float:
        """What the engine may use: ``usable x alpha``."""
        return self.usable_bytes * self.alpha

    @property
    def reserve_bytes(self) -> float:
        """The safety reserve the cap keeps back (ledger three)."""
        return self.usable_bytes - self.cap_bytes

    @property
    def kv_pool_bytes(self) -> float:
        """The paged KV pool (ledger four); negative when the rest does not even fit."""
        return self.cap_bytes - self.weights_bytes - self.runtime_bytes - self.activation_bytes


def weights_bytes_per_gpu(model: ModelSpec, weight_dtype: str, par: Parallelism) -> float:
    """Weights on one GPU: every parameter, sharded over TP x PP (embeddings included)."""
    return model.params * DTYPE_BYTES[weight_dtype] / par.gpus


def kv_dtype_bytes(model: ModelSpec, kv_dtype: str) -> float:
    """Bytes per KV element; ``auto`` follows vLLM: the model's 16-bit activation dtype."""
    if kv_dtype == "auto":
        return 2.0
    return DTYPE_BYTES[kv_dtype]


def _layer_bytes_per_token(model: ModelSpec, element_bytes: float, tp: int) -> float:
    """KV bytes one token costs in one layer, on one GPU."""
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.rope_dim) * element_bytes
    heads_per_gpu = model.kv_heads / tp if model.kv_heads >= tp else 1.0
    return 2.0 * heads_per_gpu * model.head_dim * element_bytes


def kv_bytes_per_token(model: ModelSpec, element_bytes: float, par: Parallelism) -> float:
    """KV bytes per token per GPU in full-attention terms (what a short request pays per token)."""
    return _layer_bytes_per_token(model, element_bytes, par.tp) * model.layers / par.pp


def kv_bytes_per_request(model: ModelSpec, element_bytes: float, par: Parallelism, tokens: float,
                         override_per_token: float | None = None) -> float:
    """KV bytes per GPU of one request holding ``tokens`` tokens (sliding layers capped at their window)."""
    if override_per_token is not None:
        return override_per_token * tokens
    per_layer = _layer_bytes_per_token(model, element_bytes, par.tp)
    sliding = model.sliding_layers if model.sliding_window else 0
    full = model.layers - sliding
    held_sliding = min(tokens, float(model.sliding_window or 0))
    return per_layer * (full * tokens + sliding * held_sliding) / par.pp


def b_max(kv_pool_bytes: float, bytes_per_request: float) -> int:
    """How many such requests the pool holds at once (0 when the pool is empty or negative)."""
    if kv_pool_bytes <= 0 or bytes_per_request <= 0:
        return 0
    return math.floor(kv_pool_bytes / bytes_per_request)


@dataclass(frozen=True)
class Roofline:
    """A ceiling on one replica's generation throughput at a TPOT target: batch, step time, tokens/s."""

    batch: float
    step_seconds: float
    tokens_per_second: float
    limited_by: str  # "bandwidth", "compute", "kv_pool" or "none" (TPOT unreachable)


def roofline_generation(model: ModelSpec, gpu: GpuSpec, par: Parallelism, weights_per_gpu: float,
                        kv_per_request: float, pool_batch: int, tpot_target: float, fp8_compute: bool,
                        bandwidth_efficiency: float = 0.7, compute_efficiency: float = 0.5) -> Roofline:
    """The largest decode batch whose step fits ``tpot_target``, and its throughput (tokens/s per replica).

    A decode step reads each GPU's weights once plus every running request's KV (bandwidth), and spends
    ``2 x active params / GPUs`` FLOPs per request (compute); both at the stated efficiencies.
    """
    bandwidth = gpu.hbm_bytes_per_second * bandwidth_efficiency
    tflops = gpu.fp8_tflops if (fp8_compute and gpu.fp8_tflops) else gpu.bf16_tflops
    flops = tflops * 1e12 * compute_efficiency
    flops_per_request = 2.0 * model.params_per_token / par.gpus
    batch_bw = (tpot_target * bandwidth - weights_per_gpu) / kv_per_request if kv_per_request > 0 else math.inf
    batch_compute = tpot_target * flops / flops_per_request
    batch = min(batch_bw, batch_compute, float(pool_batch))
    if batch < 1:
        return Roofline(batch=0.0, step_seconds=math.inf, tokens_per_second=0.0, limited_by="none")
    batch = math.floor(batch)
    step = max((weights_per_gpu + batch * kv_per_request) / bandwidth, batch * flops_per_request / flops)
    limits = {"bandwidth": batch_bw, "compute": batch_compute, "kv_pool": float(pool_batch)}
    return Roofline(batch=batch, step_seconds=step, tokens_per_second=batch / step,
                    limited_by=min(limits, key=lambda k: limits[k]))

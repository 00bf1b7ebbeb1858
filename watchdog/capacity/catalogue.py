"""Model architectures and GPUs for the capacity planner: the shipped catalogue and HF ``config.json`` files.

Contract: :func:`default_catalogue` loads ``catalogue.yaml`` (validated; a bad entry raises
:class:`CatalogueError` naming the entry and key). :func:`model_from_hf_config` reads a local Hugging
Face ``config.json`` into the same :class:`ModelSpec`, estimating the parameter count from the
architecture when the file does not state it; :func:`resolve_model` accepts either a catalogue name or a
path. Everything here is plain data; the maths lives in :mod:`watchdog.capacity.ledger`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

# Bytes per element of the dtypes weights and KV caches are served in.
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


class CatalogueError(ValueError):
    """A catalogue entry or config.json is unusable: names the entry (or file) and the key."""


@dataclass(frozen=True)
class Mla:
    """DeepSeek's multi-head latent attention: per token and layer it caches a latent plus a RoPE key."""

    kv_lora_rank: int
    rope_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """What decides a model's memory: parameters, and the shape of its KV cache."""

    name: str
    source: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    weight_dtype: str = "bf16"
    active_params: float | None = None
    mla: Mla | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0
    max_context: int | None = None

    @property
    def attention(self) -> str:
        """``mla`` or ``gqa`` (multi-head attention is GQA with as many KV heads as query heads)."""
        return "mla" if self.mla is not None else "gqa"

    @property
    def params_per_token(self) -> float:
        """Parameters a token passes through (the active ones of a mixture of experts)."""
        return self.active_params if self.active_params is not None else self.params


@dataclass(frozen=True)
class Interconnect:
    """How GPUs of one type reach each other: the fastest GPU-to-GPU link and how many GPUs it joins.

    ``peer_group`` is the largest set of GPUs every pair of which talks over ``link`` (8 on an NVSwitch
    baseboard, 2 for NVLink-bridged PCIe pairs, 1 where GPUs meet only over PCIe); beyond it traffic
    crosses PCIe or the network. ``peer_bytes_per_second`` is the link's bandwidth per GPU as the vendor
    states it (both directions together).
    """

    link: str
    peer_bytes_per_second: float
    peer_group: int


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type: memory, dense tensor throughput, memory bandwidth and (where known) interconnect."""

    name: str
    display: str
    source: str
    memory_bytes: float
    usable_bytes: float
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_bytes_per_second: float
    interconnect: Interconnect | None = None


@dataclass(frozen=True)
class Catalogue:
    """The shipped models and GPUs, by name."""

    models: dict[str, ModelSpec]
    gpus: dict[str, GpuSpec]

    def gpu(self, name: str) -> GpuSpec:
        """The GPU called ``name`` (case-insensitive); CatalogueError listing the known names otherwise."""
        key = name.lower()
        if key not in self.gpus:
            raise CatalogueError(f"unknown GPU {name!r}; known: {', '.join(sorted(self.gpus))}")
        return self.gpus[key]


def _need(entry: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CatalogueError(f"{where}: {key}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def _model_entry(name: str, entry: dict[str, Any]) -> ModelSpec:
    where = f"catalogue.yaml: models.{name}"
    number = (int, float)
    mla_raw = entry.get("mla")
    mla = None
    if mla_raw is not None:
        mla = Mla(int(_need(mla_raw, "kv_lora_rank", where + ".mla", int)),
                  int(_need(mla_raw, "rope_dim", where + ".mla", int)))
    dtype = str(entry.get("weight_dtype", "bf16"))
    if dtype not in DTYPE_BYTES:
        raise CatalogueError(f"{where}: weight_dtype: unknown dtype {dtype!r}")
    return ModelSpec(
        name=name,
        source=str(_need(entry, "source", where, str)),
        params=float(_need(entry, "params", where, number)),
        active_params=float(entry["active_params"]) if entry.get("active_params") is not None else None,
        layers=int(_need(entry, "layers", where, int)),
        kv_heads=int(entry.get("kv_heads", 0)) if mla is not None else int(_need(entry, "kv_heads", where, int)),
        head_dim=int(entry.get("head_dim", 0)) if mla is not None else int(_need(entry, "head_dim", where, int)),
        weight_dtype=dtype,
        mla=mla,
        sliding_window=entry.get("sliding_window"),
        sliding_layers=int(entry.get("sliding_layers", 0)),
        max_context=entry.get("max_context"),
    )


def _gpu_entry(name: str, entry: dict[str, Any]) -> GpuSpec:
    where = f"catalogue.yaml: gpus.{name}"
    number = (int, float)
    fp8 = entry.get("fp8_tflops")
    return GpuSpec(
        name=name,
        display=str(_need(entry, "display", where, str)),
        source=str(_need(entry, "source", where, str)),
        memory_bytes=float(_need(entry, "memory_bytes", where, number)),
        usable_bytes=float(_need(entry, "usable_bytes", where, number)),
        bf16_tflops=float(_need(entry, "bf16_tflops", where, number)),
        fp8_tflops=None if fp8 is None else float(fp8),
        hbm_bytes_per_second=float(_need(entry, "hbm_bytes_per_second", where, number)),
        interconnect=_interconnect(entry.get("interconnect"), where + ".interconnect"),
    )


def _interconnect(raw: Any, where: str) -> Interconnect | None:
    """The optional ``interconnect`` mapping of a GPU entry (link, peer_bytes_per_second, peer_group)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: expected a mapping with link, peer_bytes_per_second, peer_group")
    unknown = sorted(set(raw) - {"link", "peer_bytes_per_second", "peer_group"})
    if unknown:
        raise CatalogueError(f"{where}: unknown key {unknown[0]!r} (known: link, peer_bytes_per_second, peer_group)")
    group = int(_need(raw, "peer_group", where, int))
    if group < 1:
        raise CatalogueError(f"{where}: peer_group: must be at least 1, got {group}")
    return Interconnect(link=str(_need(raw, "link", where, str)),
                        peer_bytes_per_second=float(_need(raw, "peer_bytes_per_second", where, (int, float))),
                        peer_group=group)


def parse_catalogue(doc: dict[str, Any]) -> Catalogue:
    """Validate a parsed catalogue document."""
    models = {str(k): _model_entry(str(k), v) for k, v in (doc.get("models") or {}).items()}
    gpus = {str(k): _gpu_entry(str(k), v) for k, v in (doc.get("gpus") or {}).items()}
    return Catalogue(models=models, gpus=gpus)


@lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    """The packaged catalogue (loaded once)."""
    text = resources.files("watchdog.capacity").joinpath("catalogue.yaml").read_text(encoding="utf-8")
    return parse_catalogue(yaml.safe_load(text))


def _estimate_params(cfg: dict[str, Any], layers: int, hidden: int, heads: int, kv_heads: int,
                     head_dim: int) -> float:
    """Parameter count from a config's shapes: embeddings, attention, (gated) MLP or experts, norms."""
    vocab = int(cfg.get("vocab_size", 0))
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    if cfg.get("kv_lora_rank"):
        rope, nope = int(cfg.get("qk_rope_head_dim", 64)), int(cfg.get("qk_nope_head_dim", 128))
        v_dim, kv_rank = int(cfg.get("v_head_dim", 128)), int(cfg["kv_lora_rank"])
        q_rank = cfg.get("q_lora_rank")
        q_out = heads * (nope + rope)
        q_proj = (hidden * int(q_rank) + int(q_rank) * q_out) if q_rank else hidden * q_out
        attention = q_proj + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    else:
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    dense_mlp = 3 * hidden * int(cfg.get("intermediate_size", 4 * hidden))
    experts = int(cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts") or 0)
    if experts:
        expert_size = 3 * hidden * int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size", 4 * hidden))
        shared = int(cfg.get("n_shared_experts") or 0)
        moe_mlp = expert_size * (experts + shared) + hidden * experts
        dense_layers = int(cfg.get("first_k_dense_replace", 0))
        mlp_total = dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp
    else:
        mlp_total = layers * dense_mlp
    return float(embeddings + layers * attention + mlp_total + layers * 2 * hidden)


def _hf_weight_dtype(cfg: dict[str, Any]) -> str:
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8"
    if method in ("awq", "gptq"):
        return "int4" if int(quant.get("bits", 4)) == 4 else "int8"
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(dtype, "bf16")


def model_from_hf_config(path: Path, params: float | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (``params`` overrides the estimate)."""
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogueError(f"{path}: cannot read config.json: {exc}") from exc
    if not isinstance(cfg, dict):
        raise CatalogueError(f"{path}: not a JSON object")
    cfg = {**cfg, **(cfg.get("text_config") or {})}  # multimodal configs nest the language model
    where = str(path)
    layers = _need(cfg, "num_hidden_layers", where, int)
    hidden = _need(cfg, "hidden_size", where, int)
    heads = _need(cfg, "num_attention_heads", where, int)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    mla = Mla(int(cfg["kv_lora_rank"]), int(cfg.get("qk_rope_head_dim", 64))) if cfg.get("kv_lora_rank") else None
    window = cfg.get("sliding_window")
    sliding_layers = 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and window:
        sliding_layers = sum(1 for kind in layer_types if kind == "sliding_attention")
    elif window and cfg.get("use_sliding_window", True):
        sliding_layers = layers
    if not sliding_layers:
        window = None
    return ModelSpec(
        name=path.parent.name or path.name,
        source=str(path),
        params=params if params is not None else _estimate_params(cfg, layers, hidden, heads, kv_heads, head_dim),
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        weight_dtype=_hf_weight_dtype(cfg),
        mla=mla,
        sliding_window=int(window) if window else None,
        sliding_layers=sliding_layers,
        max_context=cfg.get("max_position_embeddings"),
    )


def resolve_model(name_or_path: str, catalogue: Catalogue, params: float | None = None) -> ModelSpec:
    """A catalogue model by name (case-insensitive), or a config.json path (a directory holding one works)."""
    key = name_or_path.lower()
    if key in catalogue.models:
        spec = catalogue.models[key]
        if params is not None:
            return ModelSpec(**{**spec.__dict__, "params": params})
        return spec
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return model_from_hf_config(path, params)
    raise CatalogueError(f"unknown model {name_or_path!r}: not a catalogue name "
                         f"({', '.join(sorted(catalogue.models))}) nor a config.json path")

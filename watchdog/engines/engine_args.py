"""The engine's own knobs, read from its process command line and environment, as series for the config audit.

vLLM publishes part of its configuration as ``vllm:cache_config_info`` labels (see
:mod:`watchdog.engines.config_series`); the scheduler's limits (``max_num_seqs``, ``max_model_len``,
chunked prefill) and the distributed settings (TP size, NCCL error handling and timeouts) are only on its
command line and in its environment. :func:`parse_engine_args` reads vLLM (``vllm serve``,
``-m vllm.entrypoints.openai.api_server``) and SGLang (``-m sglang.launch_server``) flags;
:func:`engine_arg_samples` turns them into series with the endpoint's ``job`` and ``instance``:

    watchdog_engine_config_max_num_seqs              --max-num-seqs | --max-running-requests
    watchdog_engine_config_max_model_len_tokens      --max-model-len | --context-length
    watchdog_engine_config_tensor_parallel_size      --tensor-parallel-size, -tp | --tp-size, --tp (default 1)
    watchdog_engine_config_gpu_memory_utilization_ratio  --gpu-memory-utilization | --mem-fraction-static
    watchdog_engine_config_chunked_prefill_enabled   1/0 where the flags say (vLLM V1 enables it by default;
                                                     SGLang disables it with --chunked-prefill-size -1)
    watchdog_engine_config_prefix_caching_enabled    1/0 where the flags say (--[no-]enable-prefix-caching,
                                                     SGLang --disable-radix-cache)
    watchdog_engine_config_nccl_async_error_handling 1 when NCCL_ASYNC_ERROR_HANDLING or
                                                     TORCH_NCCL_ASYNC_ERROR_HANDLING is set non-zero, else 0
    watchdog_engine_config_nccl_timeout_set          1 when a collective timeout is set (NCCL_WATCHDOG_TIMEOUT,
                                                     TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, --dist-timeout), else 0

A knob the command line does not set gets no series (its default depends on the engine version), except
the TP size (1) and the two NCCL flags. Pure: argv and environment in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from watchdog.model import Sample, metric

PREFIX = "watchdog_engine_config_"
FALSE = {"0", "false", "no", "off"}
NCCL_ERROR_HANDLING_ENV = ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
NCCL_TIMEOUT_ENV = ("NCCL_WATCHDOG_TIMEOUT", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")

# flag -> field, for flags that take a number
NUMERIC_FLAGS: dict[str, str] = {
    "--max-num-seqs": "max_num_seqs", "--max-running-requests": "max_num_seqs",
    "--max-model-len": "max_model_len", "--context-length": "max_model_len",
    "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
    "--tp-size": "tensor_parallel_size", "--tp": "tensor_parallel_size",
    "--gpu-memory-utilization": "gpu_memory_utilization", "--mem-fraction-static": "gpu_memory_utilization",
}


@dataclass(frozen=True)
class EngineArgs:
    """What the command line and environment say; None where they say nothing."""

    max_num_seqs: float | None = None
    max_model_len: float | None = None
    tensor_parallel_size: float = 1.0
    gpu_memory_utilization: float | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    nccl_async_error_handling: bool = False
    nccl_timeout_set: bool = False


def _flag_value(argv: Sequence[str], index: int) -> tuple[str, str | None]:
    """``(flag, value)`` for ``--flag=value`` or ``--flag value`` (value None when the next is a flag)."""
    token = argv[index]
    if "=" in token and token.startswith("-"):
        flag, value = token.split("=", 1)
        return flag, value
    following = argv[index + 1] if index + 1 < len(argv) else None
    if following is not None and following.startswith("-") and not _is_number(following):
        following = None
    return token, following


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _switch(value: str | None) -> bool:
    """A boolean flag's value: bare (True) or an explicit true/false word."""
    return value is None or value.strip().lower() not in FALSE


def parse_engine_args(argv: Sequence[str], environ: Mapping[str, str]) -> EngineArgs:
    """Read the knobs the audit needs from a vLLM or SGLang command line and its environment."""
    fields: dict[str, float | bool | None] = {}
    for index, token in enumerate(argv):
        if not token.startswith("-"):
            continue
        flag, value = _flag_value(argv, index)
        if flag in NUMERIC_FLAGS and value is not None and _is_number(value):
            fields[NUMERIC_FLAGS[flag]] = float(value)
        elif flag == "--enable-chunked-prefill":
            fields["chunked_prefill"] = _switch(value)
        elif flag == "--no-enable-chunked-prefill":
            fields["chunked_prefill"] = False
        elif flag == "--chunked-prefill-size" and value is not None and _is_number(value):
            fields["chunked_prefill"] = float(value) > 0
        elif flag == "--enable-prefix-caching":
            fields["prefix_caching"] = _switch(value)
        elif flag in ("--no-enable-prefix-caching", "--disable-radix-cache"):
            fields["prefix_caching"] = False
        elif flag == "--dist-timeout" and value is not None:
            fields["nccl_timeout_set"] = True
    error_handling = any(environ.get(k, "").strip() not in ("", *FALSE) for k in NCCL_ERROR_HANDLING_ENV)
    timeout = bool(fields.pop("nccl_timeout_set", False)) or any(environ.get(k, "").strip()
                                                                  for k in NCCL_TIMEOUT_ENV)
    return EngineArgs(
        max_num_seqs=_num(fields.get("max_num_seqs")), max_model_len=_num(fields.get("max_model_len")),
        tensor_parallel_size=_num(fields.get("tensor_parallel_size")) or 1.0,
        gpu_memory_utilization=_num(fields.get("gpu_memory_utilization")),
        chunked_prefill=_bool(fields.get("chunked_prefill")), prefix_caching=_bool(fields.get("prefix_caching")),
        nccl_async_error_handling=error_handling, nccl_timeout_set=timeout,
    )


def _num(value: float | bool | None) -> float | None:
    return None if value is None or isinstance(value, bool) else float(value)


def _bool(value: float | bool | None) -> bool | None:
    return None if value is None else bool(value)


def engine_arg_samples(ids: Mapping[str, str], args: EngineArgs) -> list[Sample]:
    """The series of the module docstring for one engine (``ids``: its ``job`` and ``instance``)."""
    values: dict[str, float | None] = {
        "max_num_seqs": args.max_num_seqs,
        "max_model_len_tokens": args.max_model_len,
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization_ratio": args.gpu_memory_utilization,
        "chunked_prefill_enabled": None if args.chunked_prefill is None else float(args.chunked_prefill),
        "prefix_caching_enabled": None if args.prefix_caching is None else float(args.prefix_caching),
        "nccl_async_error_handling": float(args.nccl_async_error_handling),
        "nccl_timeout_set": float(args.nccl_timeout_set),
    }
    return [Sample(metric(PREFIX + name, **ids), value) for name, value in values.items() if value is not None]

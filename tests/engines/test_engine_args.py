"""Engine knobs from real-looking vLLM and SGLang command lines and environments (config audit inputs)."""

from __future__ import annotations

import pytest

from watchdog.engines.engine_args import EngineArgs, engine_arg_samples, parse_engine_args
from watchdog.model import metric_name

VLLM = ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "meta-llama/Llama-3.1-70B",
        "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.95", "--max-num-seqs=512",
        "--max-model-len", "131072", "--no-enable-prefix-caching", "--enable-chunked-prefill", "False"]
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-72B-Instruct", "--tp", "4",
          "--mem-fraction-static", "0.88", "--max-running-requests", "128", "--context-length", "32768",
          "--chunked-prefill-size", "-1", "--disable-radix-cache", "--dist-timeout", "60"]


@pytest.mark.parametrize("argv, environ, expected", [
    (VLLM, {}, EngineArgs(max_num_seqs=512, max_model_len=131072, tensor_parallel_size=8,
                          gpu_memory_utilization=0.95, chunked_prefill=False, prefix_caching=False)),
    (SGLANG, {"NCCL_ASYNC_ERROR_HANDLING": "1"},
     EngineArgs(max_num_seqs=128, max_model_len=32768, tensor_parallel_size=4, gpu_memory_utilization=0.88,
                chunked_prefill=False, prefix_caching=False, nccl_async_error_handling=True,
                nccl_timeout_set=True)),
    (["vllm", "serve", "m", "-tp", "2", "--enable-prefix-caching", "--enable-chunked-prefill"],
     {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_WATCHDOG_TIMEOUT": "60"},
     EngineArgs(tensor_parallel_size=2, chunked_prefill=True, prefix_caching=True, nccl_timeout_set=True)),
    (["python", "-m", "some.server", "--port", "8000"], {}, EngineArgs()),
], ids=["vllm", "sglang", "vllm-serve", "unknown"])
def test_parse_engine_args(argv: list[str], environ: dict[str, str], expected: EngineArgs) -> None:
    assert parse_engine_args(argv, environ) == expected


def test_samples_only_for_what_the_command_line_says() -> None:
    ids = {"job": "v", "instance": "127.0.0.1:8000"}
    unknown = {metric_name(s.labels) for s in engine_arg_samples(ids, EngineArgs())}
    assert unknown == {"watchdog_engine_config_tensor_parallel_size",
                       "watchdog_engine_config_nccl_async_error_handling", "watchdog_engine_config_nccl_timeout_set"}
    full = {metric_name(s.labels): s.value for s in engine_arg_samples(ids, parse_engine_args(VLLM, {}))}
    assert full["watchdog_engine_config_max_num_seqs"] == 512
    assert full["watchdog_engine_config_chunked_prefill_enabled"] == 0.0
    assert len(full) == 8

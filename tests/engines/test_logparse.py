"""Engine log lines from public bug reports (tests/fixtures/engine_logs/SOURCES.md) → events."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.engines.logparse import EngineLogEvent, parse_engine_log_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"


def events(name: str) -> list[EngineLogEvent]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [e for e in map(parse_engine_log_line, lines) if e is not None]


@pytest.mark.parametrize("name, expected", [
    ("vllm-mp-nccl-timeout.log", [
        EngineLogEvent("engine_dead", "Worker VllmWorkerProcess pid 1159 died, exit code: -6"),
        EngineLogEvent("nccl_timeout", rank="0", collective="ALLREDUCE", seq="2")]),
    ("vllm-ray-nccl-timeout-tp8.log", [EngineLogEvent("nccl_timeout", rank="4", collective="ALLREDUCE", seq="20518")]),
    ("torch-nccl-timeout-ranks.log", [
        EngineLogEvent("nccl_timeout", rank="0", collective="_REDUCE_SCATTER_BASE", seq="7753"),
        EngineLogEvent("nccl_timeout", rank="4", collective="_REDUCE_SCATTER_BASE", seq="7753")]),
    ("vllm-cuda-oom.log", [EngineLogEvent("cuda_oom", "Tried to allocate 2.00 MiB"),
                           EngineLogEvent("cuda_oom", "Tried to allocate 3.50 GiB")]),
    ("vllm-v1-engine-dead.log", [EngineLogEvent("engine_dead", "EngineDeadError: EngineCore encountered an issue")]),
    ("sglang-scheduler-illegal-memory-access.log", [
        EngineLogEvent("engine_dead", "Scheduler hit an exception"),
        EngineLogEvent("cuda_error", "an illegal memory access was encountered"),
        EngineLogEvent("cuda_error", "an illegal memory access was encountered")]),
])
def test_fixture_events(name: str, expected: list[EngineLogEvent]) -> None:
    assert events(name) == expected


def test_every_fixture_is_listed_in_sources() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for path in FIXTURES.glob("*.log"):
        assert f"`{path.name}`" in sources, path.name


@pytest.mark.parametrize("line", [
    "INFO 02-03 13:14:04 llm_engine.py:706] Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 0.0%",
    "CUDA kernel errors might be asynchronously reported at some other API call",
    "WARNING: destroy_process_group() was not called before program exit",
    "",
])
def test_ordinary_lines_are_not_events(line: str) -> None:
    assert parse_engine_log_line(line) is None

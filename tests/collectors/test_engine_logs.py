"""Engine-log collector: a real log file appended while followed, and a journal reader with a stub
journalctl; lines from the public bug reports of tests/fixtures/engine_logs."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from watchdog.collectors.base import CollectorContext, NoData
from watchdog.collectors.engine_logs import EngineLogCollector, engine_log_collectors
from watchdog.config import load_config_text
from watchdog.config.settings import Settings, settings_from_config
from watchdog.kmsg.follow import JournalReader
from watchdog.model import Sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"
TARGETS = {"job": "vllm", "instance": "127.0.0.1:8000"}


def counts(samples: list[Sample]) -> dict[str, float]:
    return {dict(s.labels)["kind"]: s.value for s in samples
            if dict(s.labels)["__name__"] == "watchdog_engine_log_events_total"}


def config_for(tmp_path: Path, log: str) -> Settings:
    return settings_from_config(load_config_text(f"""
state_dir: {tmp_path / 'state'}
engines:
  - {{job: vllm, url: "http://127.0.0.1:8000/metrics", log: {log}}}
"""))


def test_file_is_followed_from_its_end_and_events_counted(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text((FIXTURES / "vllm-cuda-oom.log").read_text())  # history before the agent started
    [collector] = engine_log_collectors(config_for(tmp_path, f"{{file: {path}}}"), CollectorContext())
    assert counts(collector.collect()) == {"cuda_oom": 0, "nccl_timeout": 0, "cuda_error": 0, "engine_dead": 0}
    with path.open("a") as handle:
        handle.write((FIXTURES / "vllm-mp-nccl-timeout.log").read_text())
        handle.write((FIXTURES / "vllm-ray-nccl-timeout-tp8.log").read_text())
    samples = collector.collect()
    assert counts(samples) == {"cuda_oom": 0, "nccl_timeout": 2, "cuda_error": 0, "engine_dead": 1}
    info = [dict(s.labels) for s in samples if dict(s.labels)["__name__"] == "watchdog_engine_nccl_timeout_info"]
    assert info == [{"__name__": "watchdog_engine_nccl_timeout_info", **TARGETS, "rank": "4",
                     "collective": "ALLREDUCE", "seq": "20518"}]


def test_missing_file_is_quiet_until_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    [collector] = engine_log_collectors(config_for(tmp_path, f"{{file: {path}}}"), CollectorContext())
    with pytest.raises(NoData):
        collector.collect()
    path.write_text((FIXTURES / "vllm-v1-engine-dead.log").read_text())
    assert counts(collector.collect())["engine_dead"] == 1


def test_journal_unit_source(tmp_path: Path) -> None:
    stub = tmp_path / "journalctl"
    fixture = FIXTURES / "sglang-scheduler-illegal-memory-access.log"
    stub.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'argv'}\ncat {fixture}\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    reader = JournalReader(tmp_path / "cursor", command=[str(stub)], selector=("-u", "sglang.service"))
    collector = EngineLogCollector(TARGETS, reader)
    assert counts(collector.collect()) == {"cuda_oom": 0, "nccl_timeout": 0, "cuda_error": 2, "engine_dead": 1}
    assert (tmp_path / "argv").read_text().startswith("-u sglang.service -o short-precise")
    [configured] = engine_log_collectors(config_for(tmp_path, "{unit: vllm.service}"), CollectorContext())
    assert isinstance(configured, EngineLogCollector) and isinstance(configured.source, JournalReader)
    assert configured.source.selector == ["-u", "vllm.service"]

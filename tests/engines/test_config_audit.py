"""The engine-config audit end to end: command-line series in a real store, the shipped rules, the digest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from watchdog.engines.config_audit import config_digest, config_findings
from watchdog.engines.engine_args import engine_arg_samples, parse_engine_args
from watchdog.model import Sample, metric
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_files
from watchdog.store import Store

ROOT = Path(__file__).resolve().parents[2]
ARGV = ["vllm", "serve", "m", "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.95"]


def test_findings_from_a_command_line_reach_the_digest() -> None:
    store = Store()
    rules = load_rule_files([str(ROOT / "rules" / n) for n in ("engines.yaml", "serving-config.yaml")])
    engine = RuleEngine(rules, store)
    ids = {"job": "vllm-70b", "instance": "127.0.0.1:8000"}
    samples = [*engine_arg_samples(ids, parse_engine_args(ARGV, {})),
               Sample(metric("vllm:num_requests_running", **ids, model_name="m", engine="0"), 3.0)]
    alerts = []
    for step in range(3):
        store.ingest("engine", samples, 1_800_000_000_000 + step * 15_000)
        alerts = engine.evaluate(1_800_000_000_000 + step * 15_000)
    findings = config_findings(alerts)
    assert [a.labels["knob"] for a in findings] == ["gpu_memory_utilization", "nccl_timeouts"]
    digest = config_digest(alerts, "node-1")
    assert digest.startswith("Engine config digest for node-1: 2 finding(s)")
    assert "== vllm-70b (127.0.0.1:8000)" in digest and "Knob: --gpu-memory-utilization 0.90" in digest
    assert config_digest([], "node-1") == "Engine config digest for node-1: no findings.\n"


def test_check_digest_command(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nrules: {{paths: ['{ROOT / 'rules' / '*.yaml'}']}}\n"
                      "collectors: {nvml: {enabled: false}}\n")
    out = subprocess.run([sys.executable, "-m", "watchdog", "check", "--digest", "--config", str(config),
                          "--interval", "0.1"], capture_output=True, text=True, check=False, cwd=ROOT,
                         timeout=180)  # a hang guard: it took over 60 s on a saturated 2-core machine under -n 4
    assert out.stdout.startswith("Engine config digest for ") and "no findings" in out.stdout, out.stderr

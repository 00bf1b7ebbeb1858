"""rules/engines.yaml is the rendering of watchdog.engines.canonical, and promtool agrees with its tests."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from watchdog.engines.canonical import CANONICAL, render_text

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "engines.yaml"
RULE_TESTS = sorted((ROOT / "rules" / "tests").glob("engines*.yaml"))
PROMTOOL = shutil.which("promtool")


def test_checked_in_rule_file_matches_the_canonical_table() -> None:
    assert RULES.read_text(encoding="utf-8") == render_text(), (
        "rules/engines.yaml is stale: run `python -m watchdog.engines.canonical > rules/engines.yaml`")


def test_every_vllm_term_excludes_router_series_and_design_names_are_present() -> None:
    text = RULES.read_text(encoding="utf-8")
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
                 "vllm:request_success_total"):
        assert f'{name}{{server=""}}' in text
    records = {c.record for c in CANONICAL}
    assert {"engine:requests_running", "engine:requests_waiting", "engine:kv_cache_usage_ratio",
            "engine:preemptions_total", "engine:prefix_cache_queries_total", "engine:prefix_cache_hits_total",
            "engine:prompt_tokens_total", "engine:generation_tokens_total", "engine:requests_finished_total",
            "engine:ttft_seconds", "engine:tpot_seconds", "engine:itl_seconds", "engine:e2e_latency_seconds",
            "engine:queue_time_seconds"} <= records
    assert "cache_hit_rate" not in text  # SGLang's resetting gauge is never used


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_promtool_checks_the_rule_file() -> None:
    out = subprocess.run([str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_passes_the_engine_rule_tests(path: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "test", "rules", path.name], capture_output=True, text=True,
                         cwd=path.parent, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_our_evaluator_passes_the_engine_rule_tests(path: Path) -> None:
    """The same files under our evaluator (``inference-watchdog rules test``): promtool is the oracle."""
    from watchdog.promtool.runner import run_test_files

    out, err = io.StringIO(), io.StringIO()
    assert run_test_files([str(path)], out=out, err=err) == 0, out.getvalue() + err.getvalue()

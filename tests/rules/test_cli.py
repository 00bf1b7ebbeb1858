"""``inference-watchdog rules check|test|eval|render`` through ``python -m watchdog``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")

RULES = """\
groups:
  - name: kv
    rules:
      - record: job:kv_cache_usage:max
        expr: max by (job) (vllm:kv_cache_usage_perc)
      - alert: KvCacheFull
        expr: vllm:kv_cache_usage_perc > 0.95
        for: 2m
        labels: {severity: warning}
        annotations:
          summary: "KV cache at {{ $value | humanizePercentage }} on {{ $labels.instance }}"
          runbook: kv-cache
"""

INPUT = """\
rule_files: [rules.yaml]
interval: 1m
input_series:
  - series: 'vllm:kv_cache_usage_perc{instance="a:8000", job="vllm"}'
    values: '0.5 0.96x10'
  - series: 'vllm:kv_cache_usage_perc{instance="b:8000", job="vllm"}'
    values: '0.5x3 0.99x10'
"""


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], cwd=cwd or REPO, capture_output=True,
                          text=True, check=False, timeout=120)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yaml").write_text(RULES, encoding="utf-8")
    (tmp_path / "input.yaml").write_text(INPUT, encoding="utf-8")
    return tmp_path


def test_check_success(workdir: Path) -> None:
    proc = cli("rules", "check", str(workdir / "rules.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"Checking {workdir / 'rules.yaml'}\n  SUCCESS: 2 rules found\n\n"


def test_check_failure_names_file_and_line(workdir: Path) -> None:
    bad = workdir / "bad.yaml"
    bad.write_text(RULES.replace("for: 2m", "for: 2 minutes"), encoding="utf-8")
    proc = cli("rules", "check", str(workdir / "rules.yaml"), str(bad))
    assert proc.returncode == 1
    expected = f'{bad}:8: group "kv", rule 2 "KvCacheFull": for: not a valid duration string: "2 minutes"'
    assert expected in proc.stderr
    assert "SUCCESS: 2 rules found" in proc.stdout  # the good file is still reported


def test_check_json(workdir: Path) -> None:
    bad = workdir / "bad.yaml"
    bad.write_text(RULES.replace("humanizePercentage", "humanisePercentage"), encoding="utf-8")
    proc = cli("rules", "check", "--json", str(workdir / "rules.yaml"), str(bad))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["success"] is False
    good, broken = doc["files"]
    assert good == {"path": str(workdir / "rules.yaml"), "rules": 2, "errors": []}
    (error,) = broken["errors"]
    assert (error["line"], error["group"], error["rule"], error["index"]) == (11, "kv", "KvCacheFull", 2)
    assert 'function "humanisePercentage" not defined' in error["problem"]


def test_check_without_matching_files_fails(tmp_path: Path) -> None:
    assert cli("rules", "check", str(tmp_path / "*.yaml")).returncode == 1


def test_eval_text(workdir: Path) -> None:
    proc = cli("rules", "eval", "--input", str(workdir / "input.yaml"), "--at", "4m")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "at 4m (last evaluation at 4m): 1 firing, 1 pending",
        'firing   KvCacheFull {instance="a:8000", job="vllm", severity="warning"} value=0.96 active_at=1m',
        'pending  KvCacheFull {instance="b:8000", job="vllm", severity="warning"} value=0.99 active_at=4m',
    ]


def test_eval_json_shape(workdir: Path) -> None:
    proc = cli("rules", "eval", "--input", str(workdir / "input.yaml"), "--at", "270", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["at"] == 270.0 and doc["evaluated_at"] == 240.0 and doc["rule_failures"] == []
    firing, pending = doc["alerts"]
    assert firing == {
        "name": "KvCacheFull", "state": "firing",
        "labels": {"alertname": "KvCacheFull", "instance": "a:8000", "job": "vllm", "severity": "warning"},
        "annotations": {"runbook": "kv-cache", "summary": "KV cache at 96% on a:8000"},
        "value": 0.96, "active_at": 60.0, "fired_at": 180.0,
    }
    assert pending["state"] == "pending" and pending["fired_at"] is None and pending["active_at"] == 240.0


def test_eval_agrees_with_promtool_alert_tests(workdir: Path) -> None:
    """What ``rules eval --at 4m`` calls firing is what an alert_rule_test at 4m sees."""
    proc = cli("rules", "eval", "--input", str(workdir / "input.yaml"), "--at", "4m", "--json")
    firing = [a for a in json.loads(proc.stdout)["alerts"] if a["state"] == "firing"]
    test = yaml.safe_load(INPUT)
    test = {"rule_files": test.pop("rule_files"), "tests": [{**test, "alert_rule_test": [{
        "eval_time": "4m", "alertname": "KvCacheFull",
        "exp_alerts": [{"exp_labels": {k: v for k, v in a["labels"].items() if k != "alertname"},
                        "exp_annotations": a["annotations"]} for a in firing]}]}]}
    (workdir / "t.yaml").write_text(yaml.safe_dump(test), encoding="utf-8")
    assert cli("rules", "test", str(workdir / "t.yaml")).returncode == 0
    if PROMTOOL:
        proc = subprocess.run([PROMTOOL, "test", "rules", str(workdir / "t.yaml")], capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_eval_with_extra_rules_and_bad_input(workdir: Path) -> None:
    (workdir / "input2.yaml").write_text(INPUT.replace("rule_files: [rules.yaml]\n", ""), encoding="utf-8")
    proc = cli("rules", "eval", "--input", str(workdir / "input2.yaml"), "--at", "0",
               "--rules", str(workdir / "rules.yaml"), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["alerts"] == []
    # Neither --rules nor rule_files: the shipped default pack is evaluated.
    proc = cli("rules", "eval", "--input", str(workdir / "input2.yaml"), "--at", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rule_failures"] == []
    (workdir / "input3.yaml").write_text(INPUT + "bogus: 1\n", encoding="utf-8")
    proc = cli("rules", "eval", "--input", str(workdir / "input3.yaml"), "--at", "1m")
    assert proc.returncode == 1 and "bogus" in proc.stderr


def test_render_combines_config_rules_and_generated_groups(workdir: Path) -> None:
    config = workdir / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        rules:
          paths: ["{workdir}/rules.yaml"]
        engines:
          - url: http://127.0.0.1:8000/metrics
            job: v
            kind: vllm
            models: [{{model: m, ttft_seconds: 0.5}}]
        """), encoding="utf-8")
    proc = cli("rules", "render", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    names = [g["name"] for g in doc["groups"]]
    assert names[0] == "kv" and len(names) > 1 and len(set(names)) == len(names)
    rendered = workdir / "rendered.yaml"
    rendered.write_text(proc.stdout, encoding="utf-8")
    assert cli("rules", "check", str(rendered)).returncode == 0
    if PROMTOOL:
        check = subprocess.run([PROMTOOL, "check", "rules", str(rendered)], capture_output=True, text=True,
                               check=False)
        assert check.returncode == 0, check.stderr


def test_render_with_invalid_config_fails(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("rules: {paths: 3}\n", encoding="utf-8")
    proc = cli("rules", "render", "--config", str(config))
    assert proc.returncode == 1 and "error:" in proc.stderr

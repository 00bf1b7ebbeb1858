"""rules/gpu-presence.yaml: valid for promtool and for us, its tests pass under both, every alert complete;
and rules/tests/annotation_wording.yaml (readable values in annotations) passes under both."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.alert_names import GPU_PRESENCE_ALERTS
from watchdog.promtool.runner import run_test_file
from watchdog.rules.loader import load_rule_files

RULES = Path(__file__).resolve().parents[2] / "rules"
RULE_FILE = RULES / "gpu-presence.yaml"
TEST_FILES = [RULES / "tests" / "gpu_presence_alerts.yaml", RULES / "tests" / "annotation_wording.yaml"]
PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_checks_and_tests_the_files() -> None:
    for args in (["check", "rules", str(RULE_FILE)], *(["test", "rules", str(f)] for f in TEST_FILES)):
        proc = subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_our_evaluator_passes_the_same_tests(test_file: Path) -> None:
    load_rule_files([str(RULE_FILE)])
    result = run_test_file(str(test_file))
    assert result.ok, result.errors


def test_alerts_are_complete_and_served_by_a_runbook() -> None:
    rules = [r for g in yaml.safe_load(RULE_FILE.read_text())["groups"] for r in g["rules"] if "alert" in r]
    assert tuple(r["alert"] for r in rules) == GPU_PRESENCE_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] == "critical"
        runbook = yaml.safe_load((RULES.parent / "runbooks" / f"{rule['annotations']['runbook']}.yaml").read_text())
        assert rule["alert"] in runbook["alerts"]

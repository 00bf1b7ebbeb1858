"""rules/serving-verdicts.yaml: valid for promtool and for our loader, its unit tests pass under both, and it
reads only the verdict series and reason codes the agent emits."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from watchdog.exporter.catalogue import load_catalogue
from watchdog.promtool.runner import run_test_file
from watchdog.serving.reasons import REASON_CODES

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "serving-verdicts.yaml"
TESTS = ROOT / "rules" / "tests" / "serving_verdicts.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")


@needs_promtool
def test_promtool_checks_and_tests_the_rules() -> None:
    check = subprocess.run([str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([str(PROMTOOL), "test", "rules", TESTS.name], capture_output=True, text=True, check=False,
                          cwd=TESTS.parent)
    assert test.returncode == 0, test.stdout + test.stderr


def test_our_evaluator_checks_and_tests_the_rules() -> None:
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", str(RULES)], capture_output=True,
                         text=True, check=False, cwd=ROOT)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
    result = run_test_file(str(TESTS))
    assert result.ok, "\n".join(result.errors)


def test_rules_read_catalogued_series_and_known_reason_codes() -> None:
    text = RULES.read_text(encoding="utf-8")
    catalogue = load_catalogue()
    for name in ("watchdog_engine_verdict", "watchdog_engine_verdict_reason"):
        assert name in text and name in catalogue
    rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {"EngineDrained", "EngineDrainGuardHeld"}
    assert 'reason="drain_guard"' in text and "drain_guard" in REASON_CODES
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description", "runbook"} <= set(rule["annotations"])
        assert (ROOT / "runbooks" / f"{rule['annotations']['runbook']}.md").is_file()

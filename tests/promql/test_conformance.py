"""PromQL conformance: promtool is the oracle, our evaluator must agree with it.

Every ``conformance/*.yaml`` file is a ``promtool test rules`` file. Each one must pass under real
``promtool test rules`` (Prometheus 2.42) *and* under ``python -m watchdog rules test``. Every
``conformance/must_fail/*.yaml`` file must fail under both, each for one stated reason (a wrong
expectation, a promtool quirk, an evaluation error), so that our runner passes a file exactly when
promtool does. See ``docs/promql.md`` for what the suite covers and how to run it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CONFORMANCE_DIR = Path(__file__).resolve().parent / "conformance"
REPO_ROOT = Path(__file__).resolve().parents[2]
PASSING_FILES = sorted(CONFORMANCE_DIR.glob("*.yaml"))
MUST_FAIL_FILES = sorted((CONFORMANCE_DIR / "must_fail").glob("*.yaml"))
RULE_FILES = sorted((CONFORMANCE_DIR / "rules").glob("*.yaml"))
PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = "promtool not on PATH (Debian package `prometheus`; CI installs it)"
MINIMUM_CASES = 100
RUN_TIMEOUT_SECONDS = 600


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository root and capture its output as text."""
    return subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=False
    )


def _promtool_test(path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool test rules PATH``."""
    assert PROMTOOL is not None
    return _run([PROMTOOL, "test", "rules", str(path)])


def _ours_test(path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m watchdog rules test PATH`` with the interpreter running pytest."""
    return _run([sys.executable, "-m", "watchdog", "rules", "test", str(path)])


def _describe(result: subprocess.CompletedProcess[str]) -> str:
    """The command, exit status and output, for an assertion message."""
    return f"$ {' '.join(result.args)}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"


def _case_count(path: Path) -> int:
    """Number of promql_expr_test plus alert_rule_test items in one test file."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return sum(
        len(group.get("promql_expr_test") or []) + len(group.get("alert_rule_test") or [])
        for group in document["tests"]
    )


def test_suite_is_large_enough() -> None:
    """The suite keeps at least MINIMUM_CASES cases across its files."""
    total = sum(_case_count(path) for path in PASSING_FILES)
    assert total >= MINIMUM_CASES, f"only {total} cases in {len(PASSING_FILES)} files"


def test_must_fail_files_reference_existing_rule_files() -> None:
    """A must-fail file fails for its stated reason, never because a rule file is missing."""
    for path in MUST_FAIL_FILES:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for rule_file in document.get("rule_files") or []:
            assert sorted(path.parent.glob(rule_file)), f"{path.name}: {rule_file} matches no file"


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rule_file_passes_promtool_check(path: Path) -> None:
    """Every rule file the suite loads is a valid Prometheus rule file."""
    assert PROMTOOL is not None
    result = _run([PROMTOOL, "check", "rules", str(path)])
    assert result.returncode == 0, _describe(result)


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rule_file_passes_our_check(path: Path) -> None:
    """Every rule file the suite loads is accepted by ``rules check``."""
    result = _run([sys.executable, "-m", "watchdog", "rules", "check", str(path)])
    assert result.returncode == 0, _describe(result)


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
@pytest.mark.parametrize("path", PASSING_FILES, ids=lambda p: p.stem)
def test_promtool_passes(path: Path) -> None:
    """The oracle: real ``promtool test rules`` passes the file."""
    result = _promtool_test(path)
    assert result.returncode == 0, _describe(result)


@pytest.mark.parametrize("path", PASSING_FILES, ids=lambda p: p.stem)
def test_ours_passes(path: Path) -> None:
    """Our evaluator and test runner pass the same file."""
    result = _ours_test(path)
    assert result.returncode == 0, _describe(result)


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
@pytest.mark.parametrize("path", MUST_FAIL_FILES, ids=lambda p: p.stem)
def test_promtool_rejects(path: Path) -> None:
    """The oracle fails the file (exit status 1, as promtool reports test failures)."""
    result = _promtool_test(path)
    assert result.returncode == 1, _describe(result)


@pytest.mark.parametrize("path", MUST_FAIL_FILES, ids=lambda p: p.stem)
def test_ours_rejects(path: Path) -> None:
    """Our runner fails the file too, as a reported test failure rather than a crash."""
    result = _ours_test(path)
    assert result.returncode == 1, _describe(result)
    assert "Traceback (most recent call last)" not in result.stderr, _describe(result)

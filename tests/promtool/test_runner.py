"""Our ``rules test`` against promtool's own output, byte for byte, on edge-case test files.

``fixtures/runner/*.yaml`` are promtool test files; ``*.stdout``/``*.stderr`` are what promtool 2.42
printed for them (regenerate: ``cd tests/promtool/fixtures/runner && for f in pass_*.yaml fail_*.yaml; do
promtool test rules $f >${f%.yaml}.stdout 2>${f%.yaml}.stderr; done``). Only PromQL parse-error texts
(``1:9: parse error: ...``) are compared loosely: the parser's wording is not ours; and the series listed
in a many-to-many error are compared as a set, because promtool prints them in map order.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.promtool.runner import (
    TestFileError,
    load_input_series,
    parse_test_file,
    run_test_file,
    run_test_files,
)

RUNNER = Path(__file__).resolve().parent / "fixtures" / "runner"
CASES = sorted(p.name for p in RUNNER.glob("*.yaml") if p.name.startswith(("pass_", "fail_")))
PROMTOOL = shutil.which("promtool")
REPO = Path(__file__).resolve().parents[2]


def normalize(text: str) -> str:
    """Drop the wording of PromQL/metric parse errors (position prefixes and messages differ)."""
    return re.sub(r"(err: (?:labels \"[^\"]*\": )?).*", r"\1<parse error>", text) if "err:" in text else text


def _sorted_duplicates(line: str) -> str:
    """promtool lists the series of a many-to-many error in map order, which varies between runs."""
    match = re.search(r"operation: \[(.*)\];", line)
    if not match:
        return line
    items = sorted(re.findall(r"\{[^}]*\}", match.group(1)))
    return line[:match.start(1)] + ", ".join(items) + line[match.end(1):]


def normalized_lines(text: str) -> list[str]:
    return [normalize(line) if ("parse error" in line or "expected a string" in line or
                                "unexpected end of input" in line) else _sorted_duplicates(line)
            for line in text.split("\n")]


@pytest.mark.parametrize("name", CASES)
def test_output_and_exit_code_match_promtool(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(RUNNER)
    out, err = io.StringIO(), io.StringIO()
    code = run_test_files([name], out, err)
    assert code == (0 if name.startswith("pass_") else 1)
    stem = name.removesuffix(".yaml")
    assert out.getvalue() == (RUNNER / f"{stem}.stdout").read_text(encoding="utf-8")
    assert normalized_lines(err.getvalue()) == normalized_lines(
        (RUNNER / f"{stem}.stderr").read_text(encoding="utf-8"))


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
@pytest.mark.parametrize("name", CASES)
def test_golden_files_are_promtools_output(name: str) -> None:
    proc = subprocess.run([str(PROMTOOL), "test", "rules", name], cwd=RUNNER, capture_output=True, text=True,
                          check=False)
    stem = name.removesuffix(".yaml")
    assert proc.stdout == (RUNNER / f"{stem}.stdout").read_text(encoding="utf-8")
    golden = (RUNNER / f"{stem}.stderr").read_text(encoding="utf-8")
    assert [_sorted_duplicates(line) for line in proc.stderr.split("\n")] == [
        _sorted_duplicates(line) for line in golden.split("\n")]


def test_cli_runs_the_same_runner() -> None:
    proc = subprocess.run([sys.executable, "-m", "watchdog", "rules", "test", "pass_lifecycle.yaml",
                           "fail_repeated_order.yaml"], cwd=RUNNER, capture_output=True, text=True,
                          check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr
    assert "Unit Testing:  pass_lifecycle.yaml\n  SUCCESS\n" in proc.stdout
    assert "group name repeated in evaluation order: alerts" in proc.stderr


def test_missing_rule_file_glob_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("rule_files: [nope_*.yaml]\ntests: []\n", encoding="utf-8")
    result = run_test_file(str(tmp_path / "t.yaml"))
    assert result.ok and result.warnings == [f"  WARNING: no file match pattern {tmp_path}/nope_*.yaml"]


def test_unreadable_test_file_fails() -> None:
    assert not run_test_file("/nonexistent/t.yaml").ok


@pytest.mark.parametrize(("text", "message"), [
    ("tests: [{interval: 1m, extra: 1}]", "line 1: field extra not found in type main.testGroup"),
    ("tests:\n  - promql_expr_test:\n      - {expr: x, exp_samples: [{value: NaN}]}\n",
     "line 3: cannot unmarshal !!str `NaN` into float64"),
    ("tests:\n  - promql_expr_test:\n      - {expr: x, exp_samples: [{value: '1'}]}\n",
     "line 3: cannot unmarshal !!str `1` into float64"),
    ("evaluation_interval: 1x\n", 'not a valid duration string: "1x"'),
    ("tests: {a: 1}", "expected a list"),
])
def test_test_file_decoding_is_strict_like_yaml_v2(text: str, message: str) -> None:
    with pytest.raises(TestFileError) as info:
        parse_test_file(text)
    assert message in str(info.value)


def test_yaml_v2_number_forms_are_floats() -> None:
    spec = parse_test_file("tests:\n  - promql_expr_test:\n      - expr: x\n        exp_samples:\n"
                           "          - {value: 1e3}\n          - {value: .inf}\n          - {value: 0x10}\n"
                           "          - {value: -.5}\n")
    values = [s.value for s in spec.tests[0].promql_expr_tests[0].exp_samples]
    assert values == [1000.0, float("inf"), 16.0, -0.5]


def test_input_series_definitions() -> None:
    from watchdog.model import metric
    from watchdog.promtool.runner import InputSeries

    points = load_input_series([InputSeries('m{a="1"}', "1 _ 3 _x2 stale"), InputSeries("m", "0.1+0.1x2"),
                                InputSeries("m", "7")], 60_000)
    first = points[metric("m", a="1")]
    assert [t for t, _ in first] == [0, 120_000, 300_000]
    assert points[metric("m")] == [(0, 7.0)]  # a series listed twice keeps its last definition
    assert [v for _, v in load_input_series([InputSeries("x", "1 2 3")], 0)[metric("x")]] == [1.0]
    with pytest.raises(ValueError, match="Infx2"):
        load_input_series([InputSeries("x", "Infx2")], 60_000)

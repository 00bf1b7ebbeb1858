"""Rule-file loading: strict validation with file, line, group and rule named; promtool agrees."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.settings import settings_of
from watchdog.rules.loader import (
    AlertingRule,
    RecordingRule,
    RuleLoadError,
    load_rule_files,
    load_rule_text,
    load_ruleset,
)
from watchdog.rules.render import render_ruleset

PROMTOOL = shutil.which("promtool")
REPO = Path(__file__).resolve().parents[2]

GOOD = """\
groups:
  - name: engines
    interval: 30s
    rules:
      - record: engine:requests_waiting
        expr: sum by (job) (vllm:num_requests_waiting)
        labels: {source: vllm}
      - alert: QueueBacklog
        expr: |
          engine:requests_waiting
            > 10
        for: 5m
        keep_firing_for: 1m
        labels: {severity: warning}
        annotations:
          summary: "{{ $labels.job }}: {{ $value | humanize }} waiting"
  - name: second
    rules:
      - alert: Down
        expr: up == 0
"""


def write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_loads_groups_and_rules_in_order(tmp_path: Path) -> None:
    ruleset = load_rule_files([str(write(tmp_path, GOOD))])
    assert [g.name for g in ruleset.groups] == ["engines", "second"]
    rec, alert = ruleset.groups[0].rules
    assert isinstance(rec, RecordingRule) and rec.labels == {"source": "vllm"} and rec.line == 5
    assert isinstance(alert, AlertingRule)
    assert (alert.for_ms, alert.keep_firing_for_ms, alert.line) == (300_000, 60_000, 8)
    assert ruleset.groups[0].interval_ms == 30_000 and ruleset.groups[1].interval_ms is None
    assert ruleset.rule_count == 3


def test_globs_expand_sorted_and_missing_globs_are_empty(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "b.yaml")
    write(tmp_path, 'groups: [{name: a, rules: [{record: x, expr: "1"}]}]', "a.yaml")
    ruleset = load_rule_files([str(tmp_path / "*.yaml"), str(tmp_path / "none-*.yml")])
    assert [Path(f).name for f in ruleset.files] == ["a.yaml", "b.yaml"]
    with pytest.raises(RuleLoadError, match="cannot read rule file"):
        load_rule_files([str(tmp_path / "missing.yaml")])


# (rule file text, expected line, group, rule name, words in the problem)
BAD = [
    ("groups: [{name: g, rules: [{alert: A, expr: up, bogus: 1}]}]", 1, "g", "A",
     "field bogus not found"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        forr: 5m\n", 6, "g", "A",
     "field forr not found"),
    ("groups:\n  - name: g\n    extra: 1\n    rules: []\n", 3, "g", "", "field extra not found"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        record: r\n        expr: up\n", 4, "g", "A",
     "only one of 'record' and 'alert'"),
    ("groups:\n  - name: g\n    rules:\n      - expr: up\n", 4, "g", "", "one of 'record' or 'alert'"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n", 4, "g", "A", "field 'expr' must be set"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        for: 5x\n", 6, "g", "A",
     'not a valid duration string: "5x"'),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        labels: {1bad: x}\n", 6,
     "g", "A", "invalid label name: 1bad"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        annotations: {a-b: x}\n", 6,
     "g", "A", "invalid annotation name: a-b"),
    ("groups:\n  - name: g\n    rules:\n      - record: foo-bar\n        expr: up\n", 4, "g", "foo-bar",
     "invalid recording rule name"),
    ("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: up\n        annotations: {a: b}\n",
     4, "g", "r", "invalid field 'annotations' in recording rule"),
    ("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: up\n        for: 1m\n", 4, "g", "r",
     "invalid field 'for' in recording rule"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n"
     "        annotations:\n          s: '{{ humanise $value }}'\n", 7, "g", "A",
     'annotation "s": template: __alert_A:1: function "humanise" not defined'),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n"
     "        labels:\n          s: '{{ if $value }}'\n", 7, "g", "A", 'label "s":'),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: sum((up)\n", 5, "g", "A",
     "could not parse expression"),
    ("groups:\n  - name: g\n    rules: []\n  - name: g\n    rules: []\n", 4, "g", "",
     'groupname: "g" is repeated in the same file'),
    ("groups:\n  - name: ''\n    rules: []\n", 2, "", "", "Groupname must not be empty"),
    ("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        expr: down\n", 6, "g", "",
     "already defined at line 5"),
    ("groups:\n  - name: g\n   rules: []\n", 3, "", "", "yaml:"),
]


@pytest.mark.parametrize(("text", "line", "group", "rule", "words"), BAD, ids=[b[4][:40] for b in BAD])
def test_errors_name_file_line_group_rule(tmp_path: Path, text: str, line: int, group: str, rule: str,
                                          words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RuleLoadError) as info:
        load_rule_files([str(path)])
    matching = [p for p in info.value.problems if words in p.problem]
    assert matching, str(info.value)
    problem = matching[0]
    assert (problem.file, problem.line, problem.group, problem.rule) == (str(path), line, group, rule)
    assert str(problem).startswith(f"{path}:{line}")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
@pytest.mark.parametrize("text", [b[0] for b in BAD], ids=[b[4][:40] for b in BAD])
def test_promtool_rejects_the_same_files(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    proc = subprocess.run([str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_promtool_accepts_the_good_file(tmp_path: Path) -> None:
    proc = subprocess.run([str(PROMTOOL), "check", "rules", str(write(tmp_path, GOOD))], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        for: x\n" \
           "      - record: bad-name\n        expr: up\n"
    with pytest.raises(RuleLoadError) as info:
        load_rule_files([str(write(tmp_path, text))])
    assert [p.line for p in info.value.problems] == [6, 7]
    assert [p.index for p in info.value.problems] == [1, 2]


def test_duplicate_rules_are_a_lint_error_unless_disabled(tmp_path: Path) -> None:
    text = "groups:\n  - name: g\n    rules:\n      - record: r\n        expr: up\n" \
           "      - record: r\n        expr: up * 2\n"
    with pytest.raises(RuleLoadError, match='rule 2 "r": duplicate rule'):
        load_rule_text(text, "dup.yaml")
    assert load_rule_text(text, "dup.yaml", lint_duplicates=False).rule_count == 2


def test_empty_file_has_no_groups(tmp_path: Path) -> None:
    assert load_rule_files([str(write(tmp_path, ""))]).groups == ()


def test_render_is_one_valid_rule_file(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path, 'groups: [{name: engines, rules: [{record: "x:y", expr: "1"}]}]', "b.yaml")
    ruleset = load_rule_files([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")])
    text, renamed = render_ruleset(ruleset)
    assert renamed == [("engines", "engines (b.yaml)")]
    again = load_rule_text(text, "rendered.yaml")
    assert [r.name for g in again.groups for r in g.rules] == [r.name for g in ruleset.groups for r in g.rules]
    assert again.groups[0].rules[1] == ruleset.groups[0].rules[1]  # expr, for, labels, annotations
    assert "|\n" in text  # multi-line expressions stay readable
    if PROMTOOL:
        out = write(tmp_path, text, "rendered.yaml")
        proc = subprocess.run([PROMTOOL, "check", "rules", str(out)], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr


def test_load_ruleset_adds_generated_slo_groups(tmp_path: Path) -> None:
    rules = write(tmp_path, GOOD)
    config = settings_of(yaml.safe_dump({
        "rules": {"paths": [str(rules)]},
        "engines": [{"url": "http://127.0.0.1:8000/metrics", "job": "v", "kind": "vllm",
                     "models": [{"model": "m", "ttft_seconds": 0.5}]}],
    }))
    ruleset = load_ruleset(config)
    names = [g.name for g in ruleset.groups]
    assert names[:2] == ["engines", "second"] and len(names) > 2
    assert ruleset.groups[-1].file == "<generated>"


def test_repository_rule_files_load() -> None:
    """The shipped rule files pass our strict loader (PromQL support included)."""
    files = sorted(str(p) for p in (REPO / "rules").glob("*.yaml"))
    if files:
        assert load_rule_files(files).rule_count > 0

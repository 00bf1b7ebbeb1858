"""Differential test of the alert lifecycle: our engine predicts, real promtool confirms.

Random (seeded) input series of 0/1/gaps/staleness drive alerting rules with various ``for`` and
``keep_firing_for``. Our engine is stepped exactly as promtool steps; the firing alerts it holds at every
step, and the ``ALERTS``/``ALERTS_FOR_STATE`` series it wrote, become the expectations of a promtool test
file. ``promtool test rules`` must pass it (and so must our runner).
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.model import AlertState
from watchdog.promql import evaluate
from watchdog.promtool.runner import InputSeries, LazySeries, load_input_series, run_test_file
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_files
from watchdog.store import Store

PROMTOOL = shutil.which("promtool")
SCENARIOS = 12
STEPS = 14
RULES = {"groups": [{"name": "lifecycle", "rules": [
    {"alert": "Instant", "expr": "signal > 0", "labels": {"severity": "info"},
     "annotations": {"v": "{{ $value }} on {{ $labels.node }}"}},
    {"alert": "Slow", "expr": "signal > 0", "for": "3m", "labels": {"severity": "warning"}},
    {"alert": "Sticky", "expr": "signal > 0", "for": "1m", "keep_firing_for": "2m",
     "annotations": {"since": "{{ $value | humanize }}"}},
    {"alert": "Summed", "expr": "sum by (node) (signal) >= 2", "keep_firing_for": "90s"},
]}]}


def random_values(rng: random.Random, steps: int) -> str:
    tokens = []
    for _ in range(steps):
        roll = rng.random()
        tokens.append("_" if roll < 0.1 else "stale" if roll < 0.15 else str(rng.choice([0, 1, 1, 2])))
    return " ".join(tokens)


def scenario(rng: random.Random, rule_files: list[str]) -> dict[str, Any]:
    interval_ms = rng.choice([30_000, 60_000])
    eval_ms = rng.choice([30_000, 60_000])
    series = [InputSeries(f'signal{{node="n{n}", gpu="{g}"}}', random_values(rng, STEPS))
              for n in range(2) for g in range(rng.choice([1, 2]))]
    store = Store(retention_ms=1 << 62, max_points=1 << 62)
    lazy = LazySeries(store, load_input_series(series, interval_ms))
    engine = RuleEngine(load_rule_files(rule_files), store, subquery_step_ms=eval_ms)
    alert_tests: list[dict[str, Any]] = []
    expr_tests: list[dict[str, Any]] = []
    max_t = (STEPS - 1) * interval_ms
    t = 0
    while t <= max_t:
        lazy.load_till(t)
        engine.evaluate(t)
        for name in ("Instant", "Slow", "Sticky", "Summed"):
            firing = [a for a in engine.rule_alerts(name) if a.state is AlertState.FIRING]
            alert_tests.append({"eval_time": f"{t // 1000}s", "alertname": name, "exp_alerts": [
                {"exp_labels": {k: v for k, v in a.labels.items() if k != "alertname"},
                 "exp_annotations": a.annotations} for a in firing]})
        t += eval_ms
    for t in range(0, max_t + 1, 2 * eval_ms):
        for expr in ("ALERTS", "ALERTS_FOR_STATE"):
            result = evaluate(expr, store, t)
            assert isinstance(result, list)
            expr_tests.append({"expr": expr, "eval_time": f"{t // 1000}s", "exp_samples": [
                {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in s.labels) + "}", "value": s.value}
                for s in result]})
    return {"interval": f"{interval_ms // 1000}s", "input_series": [
        {"series": s.series, "values": s.values} for s in series],
        "alert_rule_test": alert_tests, "promql_expr_test": expr_tests, "_eval": eval_ms}


def build(tmp_path: Path) -> list[Path]:
    rules = tmp_path / "lifecycle_rules.yaml"
    rules.write_text(yaml.safe_dump(RULES, sort_keys=False), encoding="utf-8")
    rng = random.Random(20260601)
    paths = []
    for i in range(SCENARIOS):
        group = scenario(rng, [str(rules)])
        eval_ms = group.pop("_eval")
        doc = {"rule_files": [rules.name], "evaluation_interval": f"{eval_ms // 1000}s", "tests": [group]}
        path = tmp_path / f"lifecycle_{i}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def test_our_predictions_pass_our_runner(tmp_path: Path) -> None:
    firing: dict[str, int] = {}
    for path in build(tmp_path):
        result = run_test_file(str(path))
        assert result.ok, "\n".join(result.errors[:3])
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"][0]["alert_rule_test"]:
            firing[case["alertname"]] = firing.get(case["alertname"], 0) + len(case["exp_alerts"])
    # The scenarios exercise every rule: each fires somewhere, so a wrong prediction cannot hide.
    assert all(firing.get(name, 0) > 5 for name in ("Instant", "Slow", "Sticky", "Summed")), firing


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_promtool_confirms_our_predictions(tmp_path: Path) -> None:
    paths = build(tmp_path)
    proc = subprocess.run([str(PROMTOOL), "test", "rules", *map(str, paths)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[:4000]

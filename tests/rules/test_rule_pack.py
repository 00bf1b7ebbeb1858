"""The default rule pack (issue 5): every file valid for promtool and for us, every test file passing under
both, every alert complete (severity, summary, description, runbook that exists and lists it), exactly the
issue's alert names, XID lists equal to the catalogue, generated files equal to their generators, and
rules eval over raw engine series using the pack by default.

promtool (Prometheus 2.42, Debian's package) is the oracle; its half is skipped when it is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules.rule_pack_idle_node import ALERTS as IDLE_NODE_ALERTS
from tests.rules.rule_pack_idle_node import render as render_idle_node
from tests.rules.rule_pack_slo import (
    DEFAULT_SLO,
    GROUP_NAME,
    PLACEHOLDER_JOB,
    default_rule,
    render_default_slo_rules,
)
from tests.support.alert_names import ISSUE_5_ALERTS as ISSUE_5_NAMES
from watchdog.promtool.runner import run_test_file
from watchdog.rules.loader import load_rule_files
from watchdog.xid.catalogue import default_catalogue

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
PACK_FILES = [RULES / name for name in ("gpu.yaml", "host.yaml", "tp.yaml", "serving-slo.yaml", "serving.yaml")]
TEST_FILES = [RULES / "tests" / name for name in (
    "gpu_alerts.yaml", "host_alerts.yaml", "tp_alerts.yaml", "serving_alerts.yaml", "serving_slo_default.yaml",
    "idle_node.yaml")]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")

ISSUE_5_ALERTS = set(ISSUE_5_NAMES)
SEVERITIES = {"info", "warning", "critical"}
# Xid 79 (fallen off the bus) is GpuFallenOffBus's, not GpuXidFatal's: one page per incident.
XID_FATAL_EXCLUDED = {79}


def pack_alerts() -> list[dict[str, Any]]:
    """Every alerting rule of the pack, with the file it is in."""
    out = []
    for path in PACK_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out.append({**rule, "_file": path.name})
    return out


def pack_alert(name: str) -> list[dict[str, Any]]:
    rules = [r for r in pack_alerts() if r["alert"] == name]
    assert rules, name
    return rules


# ----------------------------------------------------------------------------------------- validity


@needs_promtool
@pytest.mark.parametrize("path", PACK_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", PACK_FILES, ids=lambda p: p.name)
def test_our_rules_check(path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", str(path)], capture_output=True,
                         text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_whole_pack_loads_together() -> None:
    """Group names are unique across the pack and the canonical engines file (render stays clean)."""
    ruleset = load_rule_files([str(RULES / "engines.yaml"), *map(str, PACK_FILES)])
    names = [g.name for g in ruleset.groups]
    assert len(names) == len(set(names)), names


@needs_promtool
@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(path: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "test", "rules", path.name], capture_output=True, text=True, check=False,
                         cwd=path.parent)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_our_rules_test(path: Path) -> None:
    result = run_test_file(str(path))
    assert result.ok, "\n".join(result.errors)[-6000:]


def test_test_files_fix_the_group_order() -> None:
    """promtool 2.42 evaluates groups not named in group_eval_order in random order (sort.Slice over a
    map), so a file whose rules read other groups' output must name every group."""
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        groups = {g["name"] for f in doc["rule_files"]
                  for g in yaml.safe_load((path.parent / f).read_text(encoding="utf-8"))["groups"]}
        assert set(doc.get("group_eval_order", [])) == groups, path.name


# ------------------------------------------------------------------------------------ alert contract


def test_alert_names_are_exactly_issue_5s() -> None:
    assert {r["alert"] for r in pack_alerts()} == ISSUE_5_ALERTS


@pytest.mark.parametrize("rule", pack_alerts(), ids=lambda r: f"{r['_file']}:{r['alert']}")
def test_alert_metadata(rule: dict[str, Any]) -> None:
    labels = rule.get("labels") or {}
    annotations = rule.get("annotations") or {}
    assert labels.get("severity") in SEVERITIES
    for key in ("summary", "description", "runbook"):
        assert str(annotations.get(key, "")).strip(), f"{rule['alert']}: {key} missing"
    assert "{{" in annotations["description"], "description should carry labels/values"
    # Values only in annotations: a label that changes with the value would make a new alert each tick.
    for key, value in labels.items():
        assert "{{" not in str(value) and "$value" not in str(value), f"{rule['alert']}: label {key} is templated"
    runbook = RULES.parent / "runbooks" / f"{annotations['runbook']}.yaml"
    assert runbook.is_file(), f"{rule['alert']}: runbook {annotations['runbook']} does not exist"
    served = yaml.safe_load(runbook.read_text(encoding="utf-8")).get("alerts", [])
    assert rule["alert"] in served, f"runbook {annotations['runbook']} does not list {rule['alert']}"


def test_engine_alerts_read_only_canonical_series() -> None:
    """Engine alerts use engine:* (one rule for every engine and version), never vllm:/sglang: names."""
    for path in PACK_FILES:
        text = path.read_text(encoding="utf-8")
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"\b(vllm|sglang):", body), path.name


def test_every_alert_has_firing_and_quiet_cases() -> None:
    """Each alert is tested where it must fire and where it must not (beyond the idle node)."""
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        if path.name == "idle_node.yaml":
            continue
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in group.get("alert_rule_test") or []:
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert ISSUE_5_ALERTS - fires == set()
    assert ISSUE_5_ALERTS - quiet == set()


# ------------------------------------------------------------------------------------------- XIDs


def _xid_set(expr: str, op: str) -> set[int]:
    match = re.search(r'xid' + re.escape(op) + r'"([0-9|]+)"', expr)
    assert match, expr
    return {int(code) for code in match.group(1).split("|")}


def test_xid_fatal_list_is_the_catalogues() -> None:
    catalogue = default_catalogue()
    severe = {code for code, e in catalogue.xids.items() if e.severity in ("fatal", "critical")}
    (rule,) = pack_alert("GpuXidFatal")
    assert _xid_set(rule["expr"], "=~") == severe - XID_FATAL_EXCLUDED


def test_xid_burst_excludes_severe_and_info_codes() -> None:
    catalogue = default_catalogue()
    excluded = {code for code, e in catalogue.xids.items() if e.severity in ("fatal", "critical", "info")}
    (rule,) = pack_alert("GpuXidBurst")
    assert _xid_set(rule["expr"], "!~") == excluded


# ------------------------------------------------------------------------------- generated files


def test_default_slo_file_is_generated() -> None:
    assert (RULES / "serving-slo.yaml").read_text(encoding="utf-8") == render_default_slo_rules(), (
        "rules/serving-slo.yaml is stale: python -m tests.rules.rule_pack_slo > rules/serving-slo.yaml")


def test_default_slo_rules_equal_rules_render(tmp_path: Path) -> None:
    """What `rules render` prints for an endpoint with the default SLOs is, minus the endpoint's job, the
    pack's default SLO group: the two cannot drift apart."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "engines": [{"url": "http://127.0.0.1:8000/metrics", "job": PLACEHOLDER_JOB}],
        "slo": dict(DEFAULT_SLO),
        "rules": {"paths": []},
    }), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "render", "--config", str(config)],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rendered = yaml.safe_load(out.stdout)
    slo_group = next(g for g in rendered["groups"] if g["name"] == "engine-slo")
    shipped = yaml.safe_load((RULES / "serving-slo.yaml").read_text(encoding="utf-8"))["groups"]
    assert [g["name"] for g in shipped] == [GROUP_NAME]
    assert shipped[0]["rules"] == [default_rule(r) for r in slo_group["rules"]]


def test_idle_node_file_is_generated() -> None:
    assert (RULES / "tests" / "idle_node.yaml").read_text(encoding="utf-8") == render_idle_node(), (
        "python -m tests.rules.rule_pack_idle_node > rules/tests/idle_node.yaml")
    assert set(IDLE_NODE_ALERTS) == ISSUE_5_ALERTS


# --------------------------------------------------------------------------------- evaluation order


def test_pack_files_sort_after_the_canonical_rules() -> None:
    """Our evaluator runs files in the order given (globs sorted): alerts must come after the rules they
    read in the same evaluation. Holds for Python's sort and for shell globs (letters decide)."""
    names = [p.name for p in sorted(RULES.glob("*.yaml"))]
    assert names.index("engines.yaml") < names.index("serving-slo.yaml") < names.index("serving.yaml")
    assert names.index("engines.yaml") < names.index("tp.yaml")
    assert names.index("engines.yaml") < names.index("host.yaml")
    letters = sorted(names, key=lambda n: re.sub(r"[^a-z0-9]", "", n.lower()))
    assert letters.index("engines.yaml") < letters.index("serving-slo.yaml") < letters.index("serving.yaml")


def test_rules_eval_uses_the_pack_by_default(tmp_path: Path) -> None:
    """Raw vLLM series -> canonical rules -> alert, in one `rules eval` run without --rules."""
    series = 'job="vllm",instance="127.0.0.1:8000",model_name="m",engine="0"'
    scenario = tmp_path / "kv.yaml"
    scenario.write_text(yaml.safe_dump({
        "interval": "15s",
        "evaluation_interval": "15s",
        "input_series": [
            {"series": f"vllm:kv_cache_usage_perc{{{series}}}", "values": "0.5x4 0.96x20"},
            {"series": f"vllm:num_requests_waiting{{{series}}}", "values": "0x4 12x20"},
            {"series": f"vllm:num_requests_running{{{series}}}", "values": "40x24"},
        ],
    }), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "eval", "--input", str(scenario),
                          "--at", "2m", "--json"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    alerts = json.loads(out.stdout)["alerts"]
    assert [(a["name"], a["state"]) for a in alerts] == [("EngineKvCacheNearFull", "firing")]
    assert alerts[0]["labels"]["job"] == "vllm"
    # The first evaluation where the condition holds (1m15s) already has it (no `for`): no lag behind
    # engines.yaml; one evaluation earlier, nothing.
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "eval", "--input", str(scenario),
                          "--at", "1m15s", "--json"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert [(a["name"], a["state"]) for a in json.loads(out.stdout)["alerts"]] == [
        ("EngineKvCacheNearFull", "firing")]
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "eval", "--input", str(scenario),
                          "--at", "1m", "--json"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert json.loads(out.stdout)["alerts"] == []

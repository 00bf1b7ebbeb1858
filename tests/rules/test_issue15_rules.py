"""Issue 15's rule files (rules/engines.yaml's last part: the KV exhaustion forecast; rules/probe.yaml:
canary probe alerts; rules/serving-config.yaml: the engine-config audit): valid for promtool and for us, their
tests passing under both, every alert complete (severity, summary, description, a runbook that lists it), their
groups apart from the rest of the pack, and the forecast's configured horizon generated into the rule set."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.alert_names import ISSUE_15_ALERTS
from watchdog.config import load_config_text, load_settings
from watchdog.config.settings import Settings, settings_from_config
from watchdog.engines.canonical import dump_rule_yaml
from watchdog.engines.forecast import GROUP_NAME, forecast_rule_groups
from watchdog.promtool.runner import run_test_file
from watchdog.rules.loader import load_rule_files, load_ruleset
from watchdog.runbooks.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
FORECAST = RULES / "engines.yaml"  # the forecast is the last part of the ordered engines group
FILES = [FORECAST, RULES / "probe.yaml", RULES / "serving-config.yaml", RULES / "engine-logs.yaml"]
TEST_FILES = [RULES / "tests" / "forecast.yaml", RULES / "tests" / "forecast_horizon.yaml",
              RULES / "tests" / "forecast_surge.yaml",
              RULES / "tests" / "probe_alerts.yaml", RULES / "tests" / "serving_config.yaml",
              RULES / "tests" / "engine_log_alerts.yaml"]
GENERATED = RULES / "tests" / "generated"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")


@needs_promtool
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_our_rules_check(path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", str(path)],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(path: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "test", "rules", path.name], capture_output=True, text=True,
                         check=False, cwd=path.parent)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_our_rules_test(path: Path) -> None:
    result = run_test_file(str(path))
    assert result.ok, "\n".join(result.errors)[-6000:]


def test_alerts_are_complete_and_have_their_runbooks() -> None:
    alerts = [r for path in FILES for g in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
              for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == set(ISSUE_15_ALERTS)
    catalogue = load_catalogue([ROOT / "runbooks"])
    for alert in alerts:
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}
        assert {"summary", "description", "runbook"} <= set(alert["annotations"])
        runbook = catalogue.for_alert(alert["alert"])
        assert runbook is not None and runbook.id == alert["annotations"]["runbook"], alert["alert"]


def test_groups_are_apart_from_the_pack() -> None:
    """Its own group (issue 10 tunes the others): names stay unique across every shipped rule file."""
    ruleset = load_rule_files([str(p) for p in sorted(RULES.glob("*.yaml"))])
    names = [g.name for g in ruleset.groups]
    assert len(names) == len(set(names)), names
    assert {"engines", "engine-probes", "engine-config-audit", "engine-log-events"} <= set(names)


def render_forecast_rules(settings: Settings) -> str:
    """The generated group as one Prometheus rule file (YAML text); ``groups: []`` without engines."""
    header = "# GENERATED from the config's forecast section by watchdog.engines.forecast (docs/forecast.md).\n"
    return header + dump_rule_yaml({"groups": forecast_rule_groups(settings)})


def test_generated_example_matches_the_generator() -> None:
    settings = load_settings(str(GENERATED / "forecast_example_config.yaml"))
    assert (GENERATED / "forecast_example_rules.yaml").read_text(encoding="utf-8") == render_forecast_rules(settings)


def test_configured_horizon_is_in_the_node_rule_set() -> None:
    settings = settings_from_config(load_config_text("""
engines:
  - {job: v, url: "http://127.0.0.1:8000/metrics"}
forecast: {kv_exhaustion_horizon_seconds: 120}
rules: {paths: []}
"""))
    groups = {g.name: g for g in load_ruleset(settings).groups}
    assert groups[GROUP_NAME].rules[0].expr == "vector(120)"
    default = settings_from_config(load_config_text('engines: [{job: v, url: "http://127.0.0.1:8000/metrics"}]\n'))
    assert forecast_rule_groups(default)[0]["rules"][0]["expr"] == "vector(600)"
    assert forecast_rule_groups(settings_from_config(load_config_text("{}"))) == []

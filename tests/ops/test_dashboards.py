"""The Grafana dashboards, statically: importable shape, variables, and queries that use only canonical series.

Every query is parsed by our PromQL parser and by Prometheus' own (``promtool check rules`` on a rule file
made of the queries); every series it selects is a catalogued ``watchdog_*`` series, ``ALERTS``, or an
output of the agent's recording rules, never an engine-specific ``vllm:``/``sglang:`` name. The
end-to-end test (test_dashboards_e2e.py) runs the same queries against a real Prometheus.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.demo.runner import EngineProcess, demo_config
from watchdog.demo.scenario import load_scenario
from watchdog.exporter.catalogue import load_catalogue
from watchdog.promql import parse_query
from watchdog.rules.loader import RecordingRule, load_ruleset

from .conftest import REPO

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
VARIABLES = {"datasource", "node", "gpu", "job", "model"}
FLEET_VARIABLES = {"datasource", "by"}  # the fleet view: no filters, the label that names a node
SUBSTITUTE = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h",
              "$node": ".*", "$gpu": ".*", "$job": ".*", "$model": ".*", "$by": "node"}


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def substituted(expr: str, by: str = "node") -> str:
    for name, value in sorted({**SUBSTITUTE, "$by": by}.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def all_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        for panel in panels(load(path)):
            for target in panel["targets"]:
                out.append((path.name, panel["title"], target["expr"]))
    return out


def recorded_series(tmp_path: Path) -> set[str]:
    """Every series name the agent's rule set records: rules/*.yaml plus the demo config's SLO rules."""
    scenario = load_scenario(str(Path(__file__).resolve().parent / "fixtures" / "e2e-scenario.yaml"))
    placeholders = [EngineProcess(spec.job, 1, None) for spec in scenario.engines]  # type: ignore[arg-type]
    ruleset = load_ruleset(demo_config(scenario, placeholders, tmp_path, "127.0.0.1:0"))
    return {rule.record for group in ruleset.groups for rule in group.rules if isinstance(rule, RecordingRule)}


def test_four_dashboards_are_generated_and_up_to_date() -> None:
    assert [p.name for p in DASHBOARDS] == ["engine-slo.json", "fleet.json", "gpu-health.json", "watchdog.json"]
    result = subprocess.run([sys.executable, str(REPO / "dashboards" / "generate.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_importable_shape(path: Path) -> None:
    dashboard = load(path)
    assert dashboard["uid"].startswith("iw-") and len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith("inference-watchdog / ")
    assert "id" not in dashboard  # Grafana assigns ids on import
    assert isinstance(dashboard["schemaVersion"], int)
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert names == (FLEET_VARIABLES if path.name == "fleet.json" else VARIABLES)
    datasource = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
        if variable["type"] == "custom":  # the fleet's node label: one of two label names, never "All"
            assert variable["query"] == "node,instance" and not variable["multi"] and not variable["includeAll"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                   for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
    for panel in panels(dashboard):
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_variables_are_only_used_with_regex_matchers() -> None:
    for dashboard, title, expr in all_queries():
        for name in ("node", "gpu", "job", "model"):
            assert f'="${name}"' not in expr and f'!="${name}"' not in expr, f"{dashboard} / {title}"


def test_queries_use_only_canonical_and_watchdog_series(tmp_path: Path) -> None:
    catalogue = load_catalogue()
    recorded = recorded_series(tmp_path)
    wrong = []
    for dashboard, title, expr in all_queries():
        query = parse_query(substituted(expr))
        for selector in query.selectors():
            name = selector.name or ""
            if name.startswith(("vllm:", "sglang:")):
                wrong.append(f"{dashboard} / {title}: engine-specific {name}")
            elif name.startswith("watchdog_"):
                if name not in catalogue:
                    wrong.append(f"{dashboard} / {title}: {name} is not in the exporter catalogue")
            elif name in ("ALERTS", "ALERTS_FOR_STATE"):
                continue
            elif name not in recorded:
                wrong.append(f"{dashboard} / {title}: {name!r} is neither watchdog_*, ALERTS nor a recorded series")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_prometheus_parses_every_query(tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:query_{i}_{by}", "expr": substituted(expr, by)}
             for i, (_, _, expr) in enumerate(all_queries()) for by in ("node", "instance")]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_issue_panels_are_present() -> None:
    titles = {path.name: {p["title"] for p in panels(load(path))} for path in DASHBOARDS}
    gpu = titles["gpu-health.json"]
    for title in ("GPU utilization", "Memory used", "Temperature", "Thermal margin", "Power", "SM clock",
                  "Clock-event reasons", "PCIe generation", "PCIe width", "PCIe replays", "NVLinks down per GPU",
                  "NVLink errors", "ECC errors", "Remapped rows", "XID events"):
        assert title in gpu, title
    engine = titles["engine-slo.json"]
    for title in ("Requests running", "Requests waiting", "KV-cache usage", "Capacity headroom", "Preemptions",
                  "Prefix-cache hit ratio", "Time to first token", "Time per output token", "Inter-token latency",
                  "End-to-end latency", "SLO attainment (5m)", "Goodput vs raw throughput",
                  "Error-budget burn rate", "Predicted queue wait"):
        assert title in engine, title
    fleet = titles["fleet.json"]
    for title in ("Nodes by trouble", "GPUs in trouble per node", "Engines by trouble", "Engines by KV-cache usage",
                  "Engines by SLO burn"):
        assert title in fleet, title
    agent = titles["watchdog.json"]
    for title in ("Alerts by state", "Remediation decisions", "Notifier up", "Outbox pending",
                  "Collector success", "Tick duration"):
        assert title in agent, title

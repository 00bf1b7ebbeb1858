"""The dashboards against Grafana's own types (grafana-foundation-sdk): every key we write is one Grafana's
schema knows, for the dashboard and for each panel plugin's options and field config. A key the typed
model drops on a round trip is a typo or a setting Grafana would ignore."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

sdk = pytest.importorskip("grafana_foundation_sdk")
from grafana_foundation_sdk.models import dashboard as dashboard_model  # noqa: E402

DASHBOARDS = sorted((Path(__file__).resolve().parents[2] / "dashboards").glob("*.json"))
PLUGINS = {"timeseries": "timeseries", "heatmap": "heatmap", "stat": "stat", "table": "table",
           "state-timeline": "statetimeline"}
# Keys Grafana reads but the typed dashboard model leaves to the datasource or to older schema versions:
# a query variable's `definition`, the built-in annotation's `builtIn`, and the Prometheus annotation's
# query fields (step, formats, tag keys, its target's refId).
LEGACY = {".definition", ".builtIn", ".step", ".useValueForTime", ".titleFormat", ".textFormat", ".tagKeys",
          ".target.refId"}


def _plain(obj: Any) -> Any:
    return json.loads(json.dumps(obj.to_json(), default=lambda o: o.to_json() if hasattr(o, "to_json") else str(o)))


def _lost(original: Any, roundtrip: Any, path: str = "") -> list[str]:
    """Keys of ``original`` that did not survive the typed round trip."""
    if isinstance(original, dict):
        if not isinstance(roundtrip, dict):
            return [path]
        out = []
        for key, value in original.items():
            out.extend([f"{path}.{key}"] if key not in roundtrip else _lost(value, roundtrip[key], f"{path}.{key}"))
        return out
    if isinstance(original, list) and isinstance(roundtrip, list):
        if len(original) != len(roundtrip):
            return [f"{path}[]"]
        return [lost for i, (a, b) in enumerate(zip(original, roundtrip, strict=True))
                for lost in _lost(a, b, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_keys_are_grafanas(path: Path) -> None:
    data = json.loads(path.read_text())
    lost = _lost(data, _plain(dashboard_model.Dashboard.from_json(data)))
    assert [k for k in lost if not any(k.endswith(legacy) for legacy in LEGACY)] == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panel_options_and_field_config_are_the_plugins(path: Path) -> None:
    problems = []
    for panel in json.loads(path.read_text())["panels"]:
        if panel["type"] == "row":
            continue
        plugin = importlib.import_module(f"grafana_foundation_sdk.models.{PLUGINS[panel['type']]}")
        problems += [f"{panel['title']}: options{k}"
                     for k in _lost(panel["options"], _plain(plugin.Options.from_json(panel["options"])))]
        custom = panel["fieldConfig"]["defaults"].get("custom")
        if custom is not None:
            problems += [f"{panel['title']}: custom{k}"
                         for k in _lost(custom, _plain(plugin.FieldConfig.from_json(custom)))]
    assert problems == []


def test_time_series_have_legend_tables_and_dashboards_show_firing_alerts() -> None:
    for path in DASHBOARDS:
        data = json.loads(path.read_text())
        assert any(a.get("expr", "").startswith("ALERTS{") for a in data["annotations"]["list"]), path.name
        for panel in data["panels"]:
            if panel["type"] == "timeseries":
                legend = panel["options"]["legend"]
                assert legend["displayMode"] == "table" and legend["calcs"] == ["lastNotNull", "max", "mean"]
    engine = json.loads((DASHBOARDS[0]).read_text())
    heatmaps = {p["title"] for p in engine["panels"] if p["type"] == "heatmap"}
    assert heatmaps == {"TTFT distribution", "Inter-token latency distribution", "Prompt length distribution",
                        "Generation length distribution"}

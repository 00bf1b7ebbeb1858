"""Generate the Grafana dashboards of inference-watchdog (``dashboards/*.json``).

    python dashboards/generate.py            # rewrite the JSON files
    python dashboards/generate.py --check    # exit 1 if a file differs from what this script makes

The JSON files are what users import (Grafana "Import dashboard", or provisioning); this script is where
they are edited, so that every panel shares the same datasource, variables, filters and layout.
tests/ops/test_dashboards.py keeps the files equal to this output, checks that queries use only
canonical ``engine:*``, ``watchdog_*`` and recording-rule series, and tests/ops/test_dashboards_e2e.py runs
every query against a real Prometheus scraping ``inference-watchdog demo``. docs/dashboards.md explains
the panels.

Conventions:
- ``${datasource}``: a Prometheus datasource variable; every panel and target uses it.
- ``$node``, ``$gpu``, ``$job``, ``$model``: multi-value with "All" = ``.*``, always used with ``=~``.
  ``node`` is a target label the Prometheus scrape config sets (docs/operations.md); GPU series filter on
  ``node`` and ``gpu``, engine series on ``node`` and ``job`` and, where the series has it, ``model_name``.
- Rates use ``$__rate_interval``; totals over the dashboard's time range use ``$__range``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
LEGEND_CALCS = ("lastNotNull", "max", "mean")  # legend tables: last, max and mean of every series
TAG = "inference-watchdog"
SCHEMA_VERSION = 39

NODE = 'node=~"$node"'
GPU = 'node=~"$node", gpu=~"$gpu"'
JOB = 'node=~"$node", job=~"$job"'
MODEL = 'node=~"$node", job=~"$job", model_name=~"$model"'


# -- building blocks ---------------------------------------------------------------------------------


@dataclass
class Target:
    """One query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False
    heatmap: bool = False


@dataclass
class Panel:
    """One panel; ``width``/``height`` in grid units (24 columns)."""

    title: str
    description: str
    targets: list[Target]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    minimum: float | None = None
    maximum: float | None = None
    thresholds: list[tuple[float | None, str]] = field(default_factory=list)
    stack: bool = False
    bars: bool = False
    links: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (title, URL) data link


@dataclass
class Row:
    """A titled row of panels."""

    title: str
    panels: list[Panel]


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    """A multi-value query variable with "All" meaning ``.*``."""
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": f"{name}-variable"}, "definition": query,
        "refresh": 2, "sort": 3, "multi": True, "includeAll": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0,
    }


TEMPLATING = [
    {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
     "current": {}, "hide": 0, "refresh": 1, "options": []},
    variable("node", "node", "label_values(watchdog_ticks_total, node)"),
    variable("gpu", "GPU", 'label_values(watchdog_gpu_info{node=~"$node"}, gpu)'),
    variable("job", "engine", 'label_values(watchdog_engine_info{node=~"$node"}, job)'),
    variable("model", "model", 'label_values(engine:requests_running{node=~"$node", job=~"$job"}, model_name)'),
]


def _thresholds(steps: list[tuple[float | None, str]]) -> dict[str, Any]:
    return {"mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in (steps or [(None, "green")])]}


def render_panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """Grafana JSON of one panel at grid position (x, y)."""
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": _thresholds(panel.thresholds)}
    if panel.minimum is not None:
        defaults["min"] = panel.minimum
    if panel.maximum is not None:
        defaults["max"] = panel.maximum
    options: dict[str, Any]
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "bars" if panel.bars else "line", "lineWidth": 1, "fillOpacity": 10,
            "showPoints": "never", "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stack else "none", "group": "A"},
        }
        defaults["color"] = {"mode": "palette-classic"}
        options = {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                              "calcs": list(LEGEND_CALCS), "sortBy": "Max", "sortDesc": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
    elif panel.kind == "heatmap":
        options = {"calculate": False, "cellGap": 1, "color": {"mode": "scheme", "scheme": "Oranges",
                                                               "exponent": 0.5, "fill": "dark-orange",
                                                               "steps": 64, "reverse": False},
                   "yAxis": {"axisPlacement": "left", "unit": panel.unit},
                   "rowsFrame": {"layout": "auto"}, "tooltip": {"show": True, "yHistogram": True},
                   "legend": {"show": True}, "filterValues": {"le": 1e-9}}
    elif panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "background", "graphMode": "none", "textMode": "auto", "justifyMode": "auto"}
    elif panel.kind == "state-timeline":
        defaults["color"] = {"mode": "thresholds"}
        options = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9,
                   "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False}}
    elif panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    else:
        raise ValueError(f"unknown panel kind {panel.kind}")
    targets = []
    for index, target in enumerate(panel.targets):
        entry: dict[str, Any] = {"refId": chr(ord("A") + index), "datasource": DS, "expr": target.expr,
                                 "legendFormat": target.legend or "__auto", "range": not target.instant,
                                 "instant": target.instant, "editorMode": "code"}
        if target.table:
            entry["format"] = "table"
        if target.heatmap:
            entry["format"] = "heatmap"
        targets.append(entry)
    out: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": DS, "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": [
            {"matcher": {"id": "byName", "options": column},
             "properties": [{"id": "links", "value": [{"title": title, "url": url, "targetBlank": True}]}]}
            for column, (title, url) in panel.links.items()]}, "options": options,
    }
    if panel.kind == "table":
        out["transformations"] = [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True, "__name__": True}}}]
    return out


# Firing alerts (the agent's ALERTS series) as annotations on every time series: one region per alert.
ALERT_ANNOTATION: dict[str, Any] = {
    "name": "Firing alerts", "datasource": DS, "enable": True, "hide": False, "iconColor": "red",
    "expr": f'ALERTS{{{NODE}, alertstate="firing"}}', "step": "30s", "useValueForTime": False,
    "titleFormat": "{{alertname}}", "textFormat": "{{severity}} on {{node}} {{gpu}} {{job}}",
    "tagKeys": "alertname,severity", "target": {"refId": "Anno"},
}


def render_dashboard(uid: str, title: str, description: str, rows: list[Row]) -> dict[str, Any]:
    """A whole dashboard: rows laid out left to right, top to bottom."""
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for row in rows:
        panels.append({"id": panel_id, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        panel_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + row_height
                row_height = 0
            panels.append(render_panel(panel, panel_id, x, y))
            panel_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return {
        "uid": uid, "title": title, "description": description, "tags": [TAG],
        "editable": True, "graphTooltip": 1, "schemaVersion": SCHEMA_VERSION, "version": 1,
        "timezone": "browser", "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
        "timepicker": {}, "templating": {"list": TEMPLATING},
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}, ALERT_ANNOTATION]},
        "links": [{"title": "inference-watchdog", "type": "dashboards", "tags": [TAG], "asDropdown": True,
                   "includeVars": True, "keepTime": True, "icon": "external link"}],
        "panels": panels,
    }


# -- GPU health --------------------------------------------------------------------------------------

GPU_LEGEND = "{{node}} gpu {{gpu}}"

GPU_ROWS = [
    Row("Overview", [
        Panel("GPUs", "GPUs NVML reports (watchdog_gpu_info).",
              [Target(f"count(watchdog_gpu_info{{{GPU}}})", instant=True)], kind="stat", width=4, height=4),
        Panel("GPUs lost", "GPUs that fell off the bus or need a reset (watchdog_gpu_lost); anything above 0 "
              "needs a node drain.",
              [Target(f"sum(watchdog_gpu_lost{{{GPU}}})", instant=True)], kind="stat", width=4, height=4,
              thresholds=[(None, "green"), (1, "red")]),
        Panel("Row remaps pending", "GPUs with a row remap waiting for the next GPU reset.",
              [Target(f"sum(watchdog_gpu_row_remap_pending{{{GPU}}})", instant=True)], kind="stat", width=4,
              height=4, thresholds=[(None, "green"), (1, "orange")]),
        Panel("XID events (range)", "Xid errors in the kernel log over the dashboard's time range.",
              [Target(f"sum(increase(watchdog_gpu_xid_errors_total{{{GPU}}}[$__range])) or vector(0)",
                      instant=True)],
              kind="stat", width=4, height=4, thresholds=[(None, "green"), (1, "red")]),
        Panel("NVLinks down", "NVLink links reporting down.",
              [Target(f"sum(1 - watchdog_gpu_nvlink_up{{{GPU}}})", instant=True)], kind="stat", width=4,
              height=4, thresholds=[(None, "green"), (1, "red")]),
        Panel("NVML stalled", "GPUs whose NVML calls did not return within the collector's deadline.",
              [Target(f"sum(watchdog_gpu_nvml_stalled{{{GPU}}})", instant=True)], kind="stat", width=4,
              height=4, thresholds=[(None, "green"), (1, "red")]),
        Panel("GPU inventory", "Name, PCI bus id, driver and serial of each GPU (watchdog_gpu_info).",
              [Target(f"watchdog_gpu_info{{{GPU}}}", instant=True, table=True)], kind="table", width=14),
        Panel("Engines on GPUs", "Which engine (job, instance) holds each GPU: its TP group "
              "(watchdog_engine_gpu_info).",
              [Target(f"watchdog_engine_gpu_info{{{GPU}}}", instant=True, table=True)], kind="table", width=10),
    ]),
    Row("Load", [
        Panel("GPU utilization", "Share of time a kernel ran (NVML utilization.gpu).",
              [Target(f"watchdog_gpu_utilization_ratio{{{GPU}}}", GPU_LEGEND)], unit="percentunit",
              minimum=0, maximum=1),
        Panel("Memory used", "Framebuffer memory used, against the total.",
              [Target(f"watchdog_gpu_memory_used_bytes{{{GPU}}}", GPU_LEGEND),
               Target(f"max by (node) (watchdog_gpu_memory_total_bytes{{{GPU}}})", "{{node}} total")],
              unit="bytes", minimum=0),
        Panel("Memory bandwidth utilization", "Share of time device memory was read or written.",
              [Target(f"watchdog_gpu_memory_utilization_ratio{{{GPU}}}", GPU_LEGEND)], unit="percentunit",
              minimum=0, maximum=1),
        Panel("Compute processes", "Processes holding a CUDA context on each GPU.",
              [Target(f"watchdog_gpu_processes{{{GPU}}}", GPU_LEGEND)], minimum=0),
    ]),
    Row("Thermal and power", [
        Panel("Temperature", "GPU core temperature.",
              [Target(f"watchdog_gpu_temperature_celsius{{{GPU}}}", GPU_LEGEND)], unit="celsius"),
        Panel("Thermal margin", "Degrees left before the first thermal limit (software slowdown at gpu_max, "
              "or hardware slowdown), per GPU; the GpuThermalMarginLow alert fires below 5.",
              [Target(f'min by (node, gpu, uuid) (watchdog_gpu_temperature_threshold_celsius{{{GPU}, '
                      f'kind=~"slowdown|gpu_max"}}) - on (node, gpu, uuid) '
                      f"max by (node, gpu, uuid) (watchdog_gpu_temperature_celsius{{{GPU}}})", GPU_LEGEND)],
              unit="celsius", thresholds=[(None, "red"), (5, "orange"), (10, "green")]),
        Panel("Memory temperature", "HBM temperature, against its limit (mem_max).",
              [Target(f"watchdog_gpu_memory_temperature_celsius{{{GPU}}}", GPU_LEGEND),
               Target(f'max by (node) (watchdog_gpu_temperature_threshold_celsius{{{GPU}, kind="mem_max"}})',
                      "{{node}} limit")],
              unit="celsius"),
        Panel("Power", "Board power draw against the enforced power limit.",
              [Target(f"watchdog_gpu_power_watts{{{GPU}}}", GPU_LEGEND),
               Target(f"max by (node) (watchdog_gpu_power_limit_watts{{{GPU}}})", "{{node}} limit")],
              unit="watt"),
    ]),
    Row("Clocks", [
        Panel("SM clock", "Streaming-multiprocessor clock.",
              [Target(f"watchdog_gpu_sm_clock_hertz{{{GPU}}}", GPU_LEGEND)], unit="hertz"),
        Panel("SM clock / max", "SM clock as a share of its maximum: a sustained dip under load is throttling.",
              [Target(f"watchdog_gpu_sm_clock_hertz{{{GPU}}} / watchdog_gpu_sm_clock_max_hertz{{{GPU}}}",
                      GPU_LEGEND)],
              unit="percentunit", minimum=0, maximum=1.05),
        Panel("Clock-event reasons", "Why clocks are held down, per GPU and reason (1 = active). "
              "hw_slowdown, hw_thermal, hw_power_brake and sw_thermal under load cost throughput; "
              "gpu_idle is normal on an idle GPU.",
              [Target(f"watchdog_gpu_clock_event_active{{{GPU}}}", "{{node}} gpu {{gpu}} {{reason}}")],
              kind="state-timeline", width=24, height=10, thresholds=[(None, "transparent"), (1, "orange")]),
    ]),
    Row("PCIe", [
        Panel("PCIe generation", "Link generation now against the maximum the slot and GPU support; a GPU "
              "at full load below its max trained down (idle GPUs drop to Gen1 to save power).",
              [Target(f'watchdog_gpu_pcie_link_generation{{{GPU}, kind="current"}}', GPU_LEGEND + " current"),
               Target(f'watchdog_gpu_pcie_link_generation{{{GPU}, kind="max"}}', GPU_LEGEND + " max")],
              width=8),
        Panel("PCIe width", "Lanes now against the maximum.",
              [Target(f'watchdog_gpu_pcie_link_width{{{GPU}, kind="current"}}', GPU_LEGEND + " current"),
               Target(f'watchdog_gpu_pcie_link_width{{{GPU}, kind="max"}}', GPU_LEGEND + " max")],
              width=8),
        Panel("PCIe replays", "Link-level replays per second: a rising rate is a marginal link or riser.",
              [Target(f"rate(watchdog_gpu_pcie_replays_total{{{GPU}}}[$__rate_interval])", GPU_LEGEND)],
              unit="ops", width=8),
    ]),
    Row("NVLink", [
        Panel("NVLinks down per GPU", "Links reporting down, per GPU.",
              [Target(f"sum by (node, gpu) (1 - watchdog_gpu_nvlink_up{{{GPU}}})", GPU_LEGEND)], minimum=0),
        Panel("NVLink errors", "NVLink replay, recovery and CRC errors per second, per GPU and type.",
              [Target(f"sum by (node, gpu, type) (rate(watchdog_gpu_nvlink_errors_total{{{GPU}}}"
                      "[$__rate_interval]))", "{{node}} gpu {{gpu}} {{type}}")],
              unit="ops"),
    ]),
    Row("Memory health", [
        Panel("ECC errors", "Volatile (since the last driver load) ECC errors per second, corrected and "
              "uncorrected. Any uncorrected error is an alert.",
              [Target(f'sum by (node, gpu, type) (rate(watchdog_gpu_ecc_errors_total{{{GPU}, scope="volatile"}}'
                      "[$__rate_interval]))", "{{node}} gpu {{gpu}} {{type}}")],
              unit="ops", width=8),
        Panel("Remapped rows", "Rows remapped for correctable and uncorrectable errors (lifetime).",
              [Target(f"watchdog_gpu_remapped_rows{{{GPU}}}", "{{node}} gpu {{gpu}} {{kind}}")], width=8),
        Panel("Row remap pending / failed", "1 when a remap waits for a GPU reset; 1 when remapping failed "
              "(the GPU needs replacement).",
              [Target(f"watchdog_gpu_row_remap_pending{{{GPU}}}", GPU_LEGEND + " pending"),
               Target(f"watchdog_gpu_row_remap_failed{{{GPU}}}", GPU_LEGEND + " failed")],
              kind="state-timeline", width=8, thresholds=[(None, "green"), (1, "red")]),
    ]),
    Row("Kernel log and recovery", [
        Panel("XID events", "Xid errors per GPU and code, per interval (see `inference-watchdog xid explain`); "
              "a GPU without any Xid since the agent started shows 0.",
              [Target(f"sum by (node, gpu, xid) (increase(watchdog_gpu_xid_errors_total{{{GPU}}}"
                      f"[$__rate_interval])) or on (node, gpu) sum by (node, gpu) (0 * watchdog_gpu_info{{{GPU}}})",
                      "{{node}} gpu {{gpu}} xid {{xid}}")],
              bars=True),
        Panel("GPU lost", "1 while NVML reports the GPU lost or requiring a reset.",
              [Target(f"watchdog_gpu_lost{{{GPU}}}", GPU_LEGEND)],
              kind="state-timeline", thresholds=[(None, "green"), (1, "red")]),
        Panel("Recovery action", "The driver's recommended recovery action (NVML), when not none.",
              [Target(f'watchdog_gpu_recovery_action{{{GPU}, action!="none"}}', "{{node}} gpu {{gpu}} {{action}}")],
              kind="state-timeline", width=24, thresholds=[(None, "transparent"), (1, "red")]),
    ]),
]


# -- Engine SLO --------------------------------------------------------------------------------------

ENGINE_LEGEND = "{{job}} {{model_name}}"
JOB_LEGEND = "{{node}} {{job}}"


def quantiles(signal: str, title: str, description: str) -> Panel:
    """p50/p90/p99 over 5 m of one canonical latency histogram (recording rules), and the mean."""
    by = "sum by (node, job, model_name)"
    mean = (f"{by} (rate(engine:{signal}_seconds_sum{{{MODEL}}}[5m])) / "
            f"{by} (rate(engine:{signal}_seconds_count{{{MODEL}}}[5m]))")
    return Panel(title, description + " Mean beside the quantiles.", [
        *(Target(f"engine:{signal}_seconds:p{q}_5m{{{MODEL}}}", f"{ENGINE_LEGEND} p{q}") for q in (50, 90, 99)),
        Target(mean, f"{ENGINE_LEGEND} mean"),
    ], unit="s", width=12)


def heatmap(series: str, title: str, description: str, unit: str) -> Panel:
    """The distribution of one canonical histogram over time: bucket rates by ``le``."""
    return Panel(title, description, [
        Target(f"sum by (le) (rate({series}_bucket{{{MODEL}}}[$__rate_interval]))", "{{le}}", heatmap=True),
    ], kind="heatmap", unit=unit, width=12)


ENGINE_ROWS = [
    Row("Load", [
        Panel("Requests running", "Requests decoding (engine:requests_running).",
              [Target(f"sum by (node, job, model_name) (engine:requests_running{{{MODEL}}})", ENGINE_LEGEND)],
              width=8),
        Panel("Requests waiting", "Requests queued for admission (engine:requests_waiting).",
              [Target(f"sum by (node, job, model_name) (engine:requests_waiting{{{MODEL}}})", ENGINE_LEGEND)],
              width=8),
        Panel("Finished requests", "Completions per second by finish reason (stop, length, abort, ...).",
              [Target(f"sum by (node, job, finished_reason) (rate(engine:requests_finished_total{{{MODEL}}}"
                      "[$__rate_interval]))", "{{job}} {{finished_reason}}")],
              unit="reqps", width=8, stack=True),
    ]),
    Row("KV cache and capacity", [
        Panel("KV-cache usage", "Share of the paged KV pool in use; preemptions start near 1.",
              [Target(f"engine:kv_cache_usage_ratio{{{MODEL}}}", ENGINE_LEGEND)], unit="percentunit",
              minimum=0, maximum=1, width=8, thresholds=[(None, "green"), (0.9, "orange"), (0.97, "red")]),
        Panel("Capacity headroom", "Share of the KV-limited concurrency still free (engine:capacity_headroom_ratio): "
              "the smaller of KV headroom and (1 - in-flight / max concurrency at the current request size).",
              [Target(f"engine:capacity_headroom_ratio{{{JOB}}}", JOB_LEGEND)], unit="percentunit",
              minimum=0, maximum=1, width=8),
        Panel("KV cache free tokens", "Tokens of KV cache still free, and the concurrency the pool allows at "
              "the current mean request size.",
              [Target(f"engine:kv_cache_free_tokens{{{JOB}}}", JOB_LEGEND + " free tokens"),
               Target(f"engine:kv_cache_max_concurrency{{{JOB}}}", JOB_LEGEND + " max concurrency"),
               Target(f"engine:requests_in_flight{{{JOB}}}", JOB_LEGEND + " in flight")],
              width=8),
        Panel("Plan against reality", "B_max at the P90 request length (engine:b_max_p90, the planner's figure; "
              "docs/capacity.md) and at the mean, against the requests in flight by Little's law.",
              [Target(f"engine:b_max_p90{{{JOB}}}", JOB_LEGEND + " B_max@P90"),
               Target(f"engine:kv_cache_max_concurrency{{{JOB}}}", JOB_LEGEND + " B_max@mean"),
               Target(f"engine:requests_in_flight:littles_law_5m{{{JOB}}}", JOB_LEGEND + " in flight (L = λW)")],
              width=8),
        Panel("Time to the memory bound", "Seconds until the requests in flight reach B_max@P90 if the last "
              "15 minutes' arrival trend holds (engine:memory_bound_eta_seconds); empty while traffic is flat "
              "or falling.",
              [Target(f"engine:memory_bound_eta_seconds{{{JOB}}}", JOB_LEGEND)], unit="s", minimum=0, width=8,
              thresholds=[(None, "red"), (1800, "orange"), (7200, "green")]),
        Panel("Preemptions", "Requests preempted (KV pool full, recomputed later) per second.",
              [Target(f"sum by (node, job, model_name) (engine:preemptions:rate5m{{{MODEL}}})", ENGINE_LEGEND)],
              unit="ops", width=8),
        Panel("Prefix-cache hit ratio", "Share of prompt tokens served from the prefix cache (from counters).",
              [Target(f"engine:prefix_cache_hit_ratio:rate5m{{{MODEL}}}", ENGINE_LEGEND)], unit="percentunit",
              minimum=0, maximum=1, width=8),
        Panel("Predicted queue wait", "Expected wait of a request arriving now (waiting / completion rate), and "
              "as a share of the TTFT target (> 1: it would miss its SLO while still queued).",
              [Target(f"engine:predicted_queue_wait_seconds{{{MODEL}}}", ENGINE_LEGEND),
               Target(f"engine:predicted_queue_wait_over_ttft_target_ratio{{{MODEL}}}",
                      ENGINE_LEGEND + " / TTFT target")],
              unit="s", width=8),
    ]),
    Row("Latency", [
        quantiles("ttft", "Time to first token", "TTFT quantiles over 5 minutes (prefill plus queueing)."),
        quantiles("tpot", "Time per output token", "TPOT quantiles per request over 5 minutes."),
        quantiles("itl", "Inter-token latency", "Inter-token latency quantiles over 5 minutes."),
        quantiles("e2e_latency", "End-to-end latency", "Request latency quantiles over 5 minutes."),
        quantiles("queue_time", "Queue time", "Time requests waited before scheduling, quantiles over 5 minutes."),
    ]),
    Row("Distributions", [
        heatmap("engine:ttft_seconds", "TTFT distribution", "Time to first token, every request: where the bulk "
                "sits and how heavy the tail is.", "s"),
        heatmap("engine:itl_seconds", "Inter-token latency distribution", "Gaps between output tokens.", "s"),
        heatmap("engine:request_prompt_tokens", "Prompt length distribution", "Prompt tokens per request.",
                "short"),
        heatmap("engine:request_generation_tokens", "Generation length distribution",
                "Generated tokens per request.", "short"),
    ]),
    Row("SLO", [
        Panel("SLO attainment (5m)", "Share of requests within the latency target, per SLO (ttft, tpot, e2e), "
              "against the objective.",
              [Target(f"engine:slo_attainment_ratio:rate5m{{{MODEL}}}", ENGINE_LEGEND + " {{slo}}"),
               # No node filter: rules evaluated centrally record the objective with vector(), without node.
               Target('max by (job, slo) (engine:slo_objective_ratio{job=~"$job"})', "{{job}} objective {{slo}}")],
              unit="percentunit", maximum=1),
        Panel("Error-budget burn rate", "How fast the error budget burns (1 = exactly on budget), over 5 m and "
              "1 h: the multi-window alerts fire when both are high.",
              [Target(f"engine:slo_error_budget_burn_rate:rate5m{{{MODEL}}}", ENGINE_LEGEND + " {{slo}} 5m"),
               Target(f"engine:slo_error_budget_burn_rate:rate1h{{{MODEL}}}", ENGINE_LEGEND + " {{slo}} 1h")],
              thresholds=[(None, "green"), (6, "orange"), (14.4, "red")]),
        Panel("Goodput vs raw throughput", "Generated tokens per second of requests that met every SLO "
              "(goodput) against all generated tokens.",
              [Target(f"engine:goodput_tokens_per_second:rate5m{{{MODEL}}}", ENGINE_LEGEND + " goodput"),
               Target(f"sum by (node, job, model_name) (engine:generation_tokens:rate5m{{{MODEL}}})",
                      ENGINE_LEGEND + " raw")],
              unit="short"),
        Panel("Goodput ratio", "Share of requests meeting every SLO.",
              [Target(f"engine:goodput_ratio:rate5m{{{MODEL}}}", ENGINE_LEGEND)], unit="percentunit",
              minimum=0, maximum=1),
        Panel("Token throughput", "Prompt and generated tokens per second.",
              [Target(f"sum by (node, job, model_name) (engine:prompt_tokens:rate1m{{{MODEL}}})",
                      ENGINE_LEGEND + " prompt"),
               Target(f"sum by (node, job, model_name) (engine:generation_tokens:rate1m{{{MODEL}}})",
                      ENGINE_LEGEND + " generation")],
              unit="short", width=24),
    ]),
    Row("Engine processes", [
        Panel("Process up", "1 while the engine's process tree is found (engines[].process).",
              [Target(f"watchdog_engine_process_up{{{JOB}}}", JOB_LEGEND)], kind="state-timeline", width=8,
              thresholds=[(None, "red"), (1, "green")]),
        Panel("Process restarts", "Restarts of the engine process seen by the agent (over the range).",
              [Target(f"increase(watchdog_engine_process_restarts_total{{{JOB}}}[$__range])", JOB_LEGEND,
                      instant=True)],
              kind="stat", width=8, thresholds=[(None, "green"), (1, "orange")]),
        Panel("Process CPU", "CPU seconds per second of the engine's process tree.",
              [Target(f"rate(watchdog_engine_process_cpu_seconds_total{{{JOB}}}[$__rate_interval])", JOB_LEGEND)],
              unit="short", width=8),
    ]),
    Row("Serving verdicts", [
        # The state set watchdog_engine_verdict as one number per engine (docs/verdicts.md): -1 unknown,
        # 0 admit, 1 short-only, 2 shed, 3 drain, 4 down.
        Panel("Serving verdict", "What load balancers reading the agent do with each engine: -1 unknown (no "
              "fresh data: the balancer keeps its own view), 0 admit, 1 short-only (short prompts only), 2 shed "
              "(nothing new, 429), 3 drain (out of rotation), 4 down. Reasons: inference-watchdog engine list.",
              [Target(f'sum by (node, job) (watchdog_engine_verdict{{{JOB}, verdict="short-only"}}'
                      f' + ignoring (verdict) 2 * watchdog_engine_verdict{{{JOB}, verdict="shed"}}'
                      f' + ignoring (verdict) 3 * watchdog_engine_verdict{{{JOB}, verdict="drain"}}'
                      f' + ignoring (verdict) 4 * watchdog_engine_verdict{{{JOB}, verdict="down"}}'
                      f' - ignoring (verdict) watchdog_engine_verdict{{{JOB}, verdict="unknown"}})', JOB_LEGEND)],
              kind="state-timeline", width=12, minimum=-1, maximum=4,
              thresholds=[(None, "blue"), (0, "green"), (1, "yellow"), (2, "orange"), (3, "red"), (4, "dark-red")]),
        Panel("Verdict weight", "The weight a balancer gives each engine (reduced for short-only and for a "
              "degraded engine whose latency objectives burn; 0 when shed, drained or down).",
              [Target(f"watchdog_engine_verdict_weight_ratio{{{JOB}}}", JOB_LEGEND)],
              unit="percentunit", width=8, minimum=0, maximum=1),
        Panel("Verdicts trusted", "1 while the agent's verdicts can be trusted; 0 while it is unhealthy or "
              "stalled and every interface fails open.",
              [Target(f"min(watchdog_engine_verdicts_trusted{{{NODE}}})", instant=True)], kind="stat", width=4,
              thresholds=[(None, "red"), (1, "green")]),
    ]),
]


# -- Watchdog (the agent itself) ---------------------------------------------------------------------

AGENT_ROWS = [
    Row("Alerts", [
        Panel("Firing", "Alerts firing now.",
              [Target(f'count(ALERTS{{{NODE}, alertstate="firing"}}) or vector(0)', instant=True)],
              kind="stat", width=4, height=4, thresholds=[(None, "green"), (1, "red")]),
        Panel("Pending", "Alerts whose condition holds but whose `for` has not elapsed.",
              [Target(f'count(ALERTS{{{NODE}, alertstate="pending"}}) or vector(0)', instant=True)],
              kind="stat", width=4, height=4, thresholds=[(None, "green"), (1, "orange")]),
        Panel("Config reload", "1 when the last reload (SIGHUP) of config, rules and runbooks succeeded.",
              [Target(f"min(watchdog_config_reload_success{{{NODE}}})", instant=True)], kind="stat", width=4,
              height=4, thresholds=[(None, "red"), (1, "green")]),
        Panel("Since last reload", "Time since config, rules and runbooks were last loaded successfully.",
              [Target(f"time() - max(watchdog_config_last_reload_timestamp_seconds{{{NODE}}})", instant=True)],
              kind="stat", unit="s", width=4, height=4),
        Panel("Agents", "Agents reporting (watchdog_build_info), with their versions below.",
              [Target(f"count(watchdog_build_info{{{NODE}}})", instant=True)], kind="stat", width=4, height=4),
        Panel("Store series", "Series in the agents' in-memory stores.",
              [Target(f"sum(watchdog_store_series{{{NODE}}})", instant=True)], kind="stat", width=4, height=4),
        Panel("Alerts by state", "Pending and firing alerts over time.",
              [Target(f"count by (alertstate) (ALERTS{{{NODE}}})", "{{alertstate}}")], stack=True),
        Panel("Firing alerts", "Every firing alert with its labels and a link to its runbook (the runbook_url "
              "column; runbooks.url_base in the agent's config sets where it points).",
              # Alerts Prometheus evaluates itself may lack `node`: those rows stay, without a link.
              [Target(f'(ALERTS{{{NODE}, alertstate="firing"}} * on (node, alertname) group_left (runbook, '
                      f'runbook_url) watchdog_runbook_info{{{NODE}}}) or on (node, alertname) '
                      f'ALERTS{{{NODE}, alertstate="firing"}}', instant=True, table=True)],
              kind="table", links={"runbook_url": ("Open the runbook", "${__value.raw}")}),
    ]),
    Row("Remediation", [
        Panel("Remediation decisions", "Runbook decisions per outcome (suggested, skipped, ran, failed, "
              "escalated, ...) per interval.",
              [Target(f"sum by (outcome) (increase(watchdog_remediation_runs_total{{{NODE}}}[$__rate_interval]))",
                      "{{outcome}}")],
              bars=True, stack=True),
        Panel("Decisions by runbook and step", "Every audited decision since the agent started, per runbook, "
              "step and outcome (the audit table in the state database has each one).",
              [Target(f"sum by (node, runbook, step, outcome) (watchdog_remediation_runs_total{{{NODE}}})",
                      instant=True, table=True)],
              kind="table"),
    ]),
    Row("Notifications", [
        Panel("Notifier up", "1 unless the notifier's last delivery attempt failed.",
              [Target(f"watchdog_notifier_up{{{NODE}}}", "{{node}} {{notifier}}")], kind="state-timeline",
              width=8, thresholds=[(None, "red"), (1, "green")]),
        Panel("Outbox pending", "Notifications queued in the durable outbox per notifier; a growing queue means "
              "the destination is down (nothing is lost, it is retried).",
              [Target(f"watchdog_outbox_pending{{{NODE}}}", "{{node}} {{notifier}}")], width=8, minimum=0),
        Panel("Notifications", "Notifications reaching a final outcome per second, and failed attempts.",
              [Target(f"sum by (notifier, outcome) (rate(watchdog_notifications_total{{{NODE}}}[$__rate_interval]))",
                      "{{notifier}} {{outcome}}"),
               Target(f"sum by (notifier) (rate(watchdog_notification_attempt_failures_total{{{NODE}}}"
                      "[$__rate_interval]))", "{{notifier}} attempt failures")],
              unit="ops", width=8),
    ]),
    Row("Collection and evaluation", [
        Panel("Collector success", "1 when the collector's last run succeeded (or found no such hardware).",
              [Target(f"watchdog_collector_success{{{NODE}}}", "{{node}} {{collector}}")],
              kind="state-timeline", thresholds=[(None, "red"), (1, "green")]),
        Panel("Collector duration", "How long each collector's last run took.",
              [Target(f"watchdog_collector_duration_seconds{{{NODE}}}", "{{node}} {{collector}}")], unit="s"),
        Panel("Tick duration", "Wall time of the evaluation loop's last tick, against the tick rate.",
              [Target(f"watchdog_tick_duration_seconds{{{NODE}}}", "{{node}} duration"),
               Target(f"rate(watchdog_ticks_total{{{NODE}}}[$__rate_interval])", "{{node}} ticks/s")],
              unit="s"),
        Panel("Overruns and stage failures", "Ticks skipped because the previous one still ran, and tick "
              "stages that raised (collect, rules, notify, ...).",
              [Target(f"rate(watchdog_tick_overruns_total{{{NODE}}}[$__rate_interval])", "{{node}} overruns"),
               Target(f"sum by (node, stage) (rate(watchdog_tick_stage_failures_total{{{NODE}}}"
                      "[$__rate_interval])) or vector(0)", "{{node}} {{stage}} failures")],
              unit="ops"),
        Panel("Rule group duration", "How long each rule group's last evaluation took.",
              [Target(f"watchdog_rule_group_last_duration_seconds{{{NODE}}}", "{{node}} {{rule_group}}")], unit="s"),
        Panel("Rule evaluation failures", "Rule evaluations that failed per second, per group.",
              [Target(f"sum by (node, rule_group) (rate(watchdog_rule_evaluation_failures_total{{{NODE}}}"
                      "[$__rate_interval]))", "{{node}} {{rule_group}}")],
              unit="ops"),
    ]),
    Row("Store, exporter and kernel log", [
        Panel("Series", "Series in the store and exported by the last scrape.",
              [Target(f"watchdog_store_series{{{NODE}}}", "{{node}} store"),
               Target(f"watchdog_exporter_series{{{NODE}}}", "{{node}} exported")], width=8),
        Panel("Dropped series", "Series refused by the store's max_series, and left out of scrapes by the "
              "exporter's cardinality caps (per second).",
              [Target(f"rate(watchdog_store_dropped_series_total{{{NODE}}}[$__rate_interval])", "{{node}} store"),
               Target(f"sum by (node, limit) (rate(watchdog_exporter_dropped_series_total{{{NODE}}}"
                      "[$__rate_interval]))", "{{node}} exporter {{limit}}")],
              unit="ops", width=8),
        Panel("Exporter requests", "Exporter requests per second by handler and status (401: bad credentials).",
              [Target(f"sum by (node, handler, code) (rate(watchdog_exporter_requests_total{{{NODE}}}"
                      "[$__rate_interval]))", "{{node}} {{handler}} {{code}}")],
              unit="reqps", width=8),
        Panel("Kernel log", "Kernel-log lines read per second, and records the kernel overwrote before they "
              "were read.",
              [Target(f"rate(watchdog_kmsg_lines_read_total{{{NODE}}}[$__rate_interval])", "{{node}} {{source}}"),
               Target(f"watchdog_kmsg_records_lost_total{{{NODE}}}", "{{node}} {{source}} lost")],
              width=12),
        Panel("Agent versions", "Version and node name of each agent (watchdog_build_info).",
              [Target(f"watchdog_build_info{{{NODE}}}", instant=True, table=True)], kind="table", width=12),
    ]),
]


DASHBOARDS: dict[str, dict[str, Any]] = {
    "gpu-health.json": render_dashboard(
        "iw-gpu-health", "inference-watchdog / GPU health",
        "Per-GPU health from the inference-watchdog agent: load, thermals, power, clocks and throttle reasons, "
        "PCIe, NVLink, ECC and row remapping, XID events.", GPU_ROWS),
    "engine-slo.json": render_dashboard(
        "iw-engine-slo", "inference-watchdog / Engine SLO",
        "vLLM and SGLang engines through the canonical engine:* series: load, KV cache and capacity, latency "
        "quantiles, SLO attainment, error-budget burn, goodput, predicted queue wait.", ENGINE_ROWS),
    "watchdog.json": render_dashboard(
        "iw-watchdog", "inference-watchdog / Watchdog",
        "The agent itself: alerts by state, remediation decisions, notifier and outbox health, collectors, "
        "tick and rule evaluation, store and exporter.", AGENT_ROWS),
}


def render(name: str) -> str:
    """The exact text of one dashboard file."""
    return json.dumps(DASHBOARDS[name], indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) every dashboard file."""
    check = "--check" in argv
    stale = []
    for name in DASHBOARDS:
        path = HERE / name
        text = render(name)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python dashboards/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

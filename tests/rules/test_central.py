"""``translate_for_central``: each rewrite and each reason to leave a rule out, on literal rules."""

from __future__ import annotations

from pathlib import Path

from watchdog.rules.central import CentralOptions, translate_for_central
from watchdog.rules.loader import load_rule_files

RULES = """
groups:
- name: g
  interval: 5s
  rules:
  - record: host:busy
    expr: sum(rate(cpu_seconds_total{mode!="idle"}[2m]))
  - record: engine:slo_objective_ratio
    expr: vector(0.99)
  - alert: Busy
    expr: host:busy > 0.9 unless on () sum(engine:requests_running) == 0
    for: 10s
    annotations: {runbook: host-busy, summary: busy}
  - alert: SloBreach
    expr: engine:attainment < on (job) group_left () engine:slo_objective_ratio
    for: 5m
    annotations: {runbook: slo}
  - alert: GpuJoin
    expr: watchdog_engine_gpu_info * on (gpu, uuid) group_left () watchdog_gpu_utilization_ratio < 0.1
  - alert: Down
    expr: up{job="vllm"} == 0
    annotations: {runbook: engine-down, runbook_url: https://own.example/x}
  - record: engine:surge
    expr: deriv(engine:requests_running[20s])
  - alert: Surge
    expr: engine:surge > 1
    annotations: {runbook: surge}
  - alert: Margin
    expr: (min by (gpu, uuid) (limit_celsius) - on (gpu, uuid) temp_celsius) or 87 - temp_celsius
  - alert: Missing
    expr: expected - (max(devices) or vector(0)) > 0
- name: slow
  interval: 1m
  rules:
  - record: job:up
    expr: count by (job) (up)
"""


def translate(tmp_path: Path, **options: object) -> tuple[dict[str, dict[str, object]], list[str], list[str]]:
    path = tmp_path / "r.yaml"
    path.write_text(RULES)
    central = translate_for_central(load_rule_files([str(path)]), CentralOptions(**options),  # type: ignore[arg-type]
                                    runbook_url=lambda rid: f"https://rb.example/{rid}.md")
    rules = {str(r.get("alert") or r.get("record")): r for g in central.groups for r in g["rules"]}
    return rules, [n.line() for n in central.changed], [n.line() for n in central.left_out]


def test_node_label_goes_into_groupings_and_joins_of_node_series(tmp_path: Path) -> None:
    rules, changed, _ = translate(tmp_path)
    assert rules["host:busy"]["expr"] == 'sum by (node) (rate(cpu_seconds_total{mode!="idle"}[2m]))'
    assert rules["Busy"]["expr"] == "host:busy > 0.9 unless on (node) sum by (node) (engine:requests_running) == 0"
    assert rules["Busy"]["for"] == "30s"  # 10s is less than two 15 s scrapes
    assert rules["SloBreach"]["expr"] == ("engine:attainment < on (job) group_left () engine:slo_objective_ratio")
    assert rules["SloBreach"]["for"] == "5m"
    assert rules["GpuJoin"]["expr"] == (
        "watchdog_engine_gpu_info * on (gpu, uuid) group_left () watchdog_gpu_utilization_ratio < 0.1")
    assert rules["Down"]["expr"] == 'watchdog_engine_up{job="vllm"} == 0'
    assert rules["job:up"]["expr"] == "count by (job, node) (watchdog_engine_up)"
    assert any('"Busy": for: 10s lengthened to 30s' in line for line in changed)
    # the agent's own series gain the agent's job/instance centrally: a match on all labels with an
    # aggregation becomes a match on its grouping
    assert rules["Margin"]["expr"] == ("(min by (gpu, node, uuid) (limit_celsius) - on (gpu, uuid) temp_celsius) "
                                       "or on (gpu, node, uuid) 87 - temp_celsius")


def test_runbook_url_is_static_and_a_rule_s_own_is_kept(tmp_path: Path) -> None:
    rules, _, _ = translate(tmp_path)
    assert rules["Busy"]["annotations"] == {"runbook": "host-busy", "summary": "busy",  # type: ignore[comparison-overlap]
                                            "runbook_url": "https://rb.example/host-busy.md"}
    assert rules["Down"]["annotations"]["runbook_url"] == "https://own.example/x"  # type: ignore[index]


def test_short_windows_and_what_reads_them_are_left_out(tmp_path: Path) -> None:
    rules, _, left_out = translate(tmp_path)
    assert "engine:surge" not in rules and "Surge" not in rules
    assert left_out == [
        'group "g", rule 7 "engine:surge": a 20s window holds fewer than 4 samples at a 15s scrape interval; '
        "the agent evaluates it on its 1 s samples",
        'group "g", rule 8 "Surge": reads engine:surge, whose recording is left out',
        'group "g", rule 10 "Missing": falls back to vector() where a series is missing; centrally that '
        "fallback carries no node, so which node lacks the series cannot be told",
    ]
    kept, _, fewer = translate(tmp_path, scrape_interval_ms=5_000)
    assert [line.split('"')[3] for line in fewer] == ["Missing"] and "Surge" in kept


def test_group_intervals_under_a_scrape_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(RULES)
    groups = translate_for_central(load_rule_files([str(path)])).groups
    assert "interval" not in groups[0] and groups[1]["interval"] == "1m"


def test_instance_labelling(tmp_path: Path) -> None:
    rules, _, left_out = translate(tmp_path, node_label="instance")
    assert rules["host:busy"]["expr"] == 'sum by (instance) (rate(cpu_seconds_total{mode!="idle"}[2m]))'
    assert "Busy" not in rules  # the host's series against the engines': different instances
    assert any('"Busy": joins the agent\'s own series with an engine\'s' in line for line in left_out)
    assert rules["GpuJoin"]["expr"].startswith("watchdog_engine_gpu_info * on (gpu, uuid)")  # type: ignore[union-attr]

"""Which rule groups are on the fault path, by what they read (a table), and the default pack's split."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.rules.lanes import Lane, classify_groups
from watchdog.rules.loader import load_rule_files, load_rule_text

ROOT = Path(__file__).resolve().parents[2]


def _group(name: str, *exprs: str, record: str | None = None) -> str:
    rules = [f"      - record: {record or f'{name}:out{i}'}\n        expr: '{e}'" for i, e in enumerate(exprs)]
    return f"  - name: {name}\n    rules:\n" + "\n".join(rules)


@pytest.mark.parametrize(("groups", "lanes"), [
    ([_group("g", "watchdog_gpu_lost == 1")], [Lane.FAULT]),
    ([_group("k", "increase(watchdog_kernel_oom_kills_total[5m])")], [Lane.FAULT]),
    # the host's series: CPU contention must not wait behind engine work on a starved host
    ([_group("h", "sum(rate(watchdog_host_cpu_seconds_total[2m])) and on() engine:requests_running")],
     [Lane.FAULT]),
    ([_group("e", "sum by (job) (vllm:num_requests_running)")], [Lane.ENGINE]),
    ([_group("any", '{__name__=~"vllm:.*"}')], [Lane.FAULT]),  # could read anything
    ([_group("const", "vector(1)")], [Lane.FAULT]),  # reads nothing: cheap, every tick
    # through recorded series: a group reading a fault group's output is on the fault path
    ([_group("g", "watchdog_gpu_lost", record="gpu:lost"), _group("uses", "gpu:lost * on() group_left up")],
     [Lane.FAULT, Lane.FAULT]),
    # ... but a constant group passes nothing on
    ([_group("const", "vector(120)", record="cfg:horizon"), _group("e", "engine:x > on() group_left cfg:horizon")],
     [Lane.FAULT, Lane.ENGINE]),
    # mixed reads put the group on the fault path
    ([_group("tp", "watchdog_gpu_utilization_ratio and on() engine:requests_running")], [Lane.FAULT]),
])
def test_lanes(groups: list[str], lanes: list[Lane]) -> None:
    ruleset = load_rule_text("groups:\n" + "\n".join(groups) + "\n", lint_duplicates=False)
    assert classify_groups(ruleset.groups) == lanes


def test_the_default_pack_keeps_gpu_and_kernel_log_groups_on_the_fault_path() -> None:
    ruleset = load_rule_files([str(ROOT / "rules" / "*.yaml")])
    lanes = {g.name: lane for g, lane in zip(ruleset.groups, classify_groups(ruleset.groups), strict=True)}
    assert {name for name, lane in lanes.items() if lane is Lane.FAULT} >= {
        "gpu-presence", "gpu-events", "gpu-health", "host"}
    assert {name for name, lane in lanes.items() if lane is Lane.ENGINE} >= {
        "engines", "engine-slo-default", "engine-alerts"}

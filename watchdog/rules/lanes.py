"""Which rule groups are on the fault path: a pure classification of a rule set by what its groups read.

Contract: :func:`classify_groups` returns one :class:`Lane` per group, in group order.

- :attr:`Lane.FAULT`: the group reads, directly or through recorded series of other groups, a series of
  the fault path (NVML, the kernel log, GPU presence, the host: names starting with one of
  :data:`FAULT_PATH_PREFIXES`), or a selector with no fixed metric name (it could read anything), or no
  series at all (``vector(1)``: cheap, and a heartbeat should not wait). The agent evaluates these
  every tick, ahead of engine scraping.
- :attr:`Lane.ENGINE`: everything else (engine canonicalisation, SLO arithmetic, capacity, forecasts).
  The agent evaluates these when a new engine scrape has arrived or at the engine scrape interval, and
  defers them when the tick runs out of time.

Evaluation order is unchanged within a lane; a fault group that reads an engine group's output sees that
output as of the engine group's last evaluation (as in Prometheus, where groups run independently).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from watchdog.model import METRIC_NAME
from watchdog.promql import nodes as n
from watchdog.rules.loader import RecordingRule, RuleGroup

FAULT_PATH_PREFIXES = ("watchdog_gpu_", "watchdog_kernel_", "watchdog_kmsg_", "watchdog_host_")
"""Series names the fault-path collectors (NVML, kernel log, GPU presence, host) produce. The host's are
here so that its CPU-contention rules are not deferred with the engine work exactly when the host's
cores are starved."""


class Lane(str, enum.Enum):
    """When the agent evaluates a group (see the module docstring)."""

    FAULT = "fault"
    ENGINE = "engine"


def _reads(group: RuleGroup) -> tuple[set[str], bool]:
    """(metric names the group's selectors read, whether some selector has no fixed name)."""
    names: set[str] = set()
    unnamed = False
    for rule in group.rules:
        for node in n.walk(rule.query.expr):
            if isinstance(node, n.VectorSelector):
                fixed = [value for label, op, value in node.matchers if label == METRIC_NAME and op == "="]
                if fixed:
                    names.add(fixed[0])
                else:
                    unnamed = True
    return names, unnamed


def classify_groups(groups: Sequence[RuleGroup]) -> list[Lane]:
    """The lane of each group (see the module docstring), in group order."""
    reads = [_reads(group) for group in groups]
    producers: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        for rule in group.rules:
            if isinstance(rule, RecordingRule):
                producers.setdefault(rule.record, []).append(index)
    fault = [unnamed or any(name.startswith(FAULT_PATH_PREFIXES) for name in names) for names, unnamed in reads]
    changed = True
    while changed:  # a group reading a fault group's recorded series is on the fault path too
        changed = False
        for index, (names, _) in enumerate(reads):
            if not fault[index] and any(fault[p] for name in names for p in producers.get(name, ())):
                fault[index] = changed = True
    # A group that reads no series (constants, a heartbeat) runs every tick but passes nothing on.
    return [Lane.FAULT if is_fault or not names else Lane.ENGINE
            for is_fault, (names, _) in zip(fault, reads, strict=True)]

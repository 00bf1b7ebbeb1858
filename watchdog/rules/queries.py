"""Instant queries over the store for the layers above the rules (agent, demo): values and TP groups.

:func:`instant_values` runs one PromQL instant query and returns ``(labels, value)`` pairs (an empty list
for a non-vector result); :func:`engine_gpus_in` reads the engines' TP groups
(``watchdog_engine_gpu_info`` over the last 15 minutes, so a GPU that fell off the bus still counts).
"""

from __future__ import annotations

from typing import Any

from watchdog.promql import VectorSample, evaluate


def instant_values(expr: str, store: Any, t_ms: int) -> list[tuple[dict[str, str], float]]:
    """``(labels, value)`` of each sample of ``expr`` at ``t_ms``; [] for scalars, strings and matrices."""
    result = evaluate(expr, store, t_ms)
    samples = result if isinstance(result, list) else []
    return [(dict(s.labels), s.value) for s in samples if isinstance(s, VectorSample)]


def engine_gpus_in(store: Any, t_ms: int) -> dict[tuple[str, str], set[str]]:
    """``(job, instance) -> GPU indexes`` of every engine's TP group seen in the last 15 minutes."""
    out: dict[tuple[str, str], set[str]] = {}
    for labels, _ in instant_values("max_over_time(watchdog_engine_gpu_info[15m])", store, t_ms):
        if labels.get("job") and labels.get("gpu"):
            out.setdefault((labels["job"], labels.get("instance", "")), set()).add(labels["gpu"])
    return out

"""What the verdict engine knows about each engine at one tick, read from the store: :func:`read_engines`.

Contract:
- One :class:`EngineReadings` per configured engine job, always (an engine with no data has ``reading_ms``
  None). Values are the canonical ``engine:*`` recording rules (rules/engines.yaml, rules/serving-slo.yaml),
  taken per job and instance (max over ranks and models, sums where the rule sums); a signal the engine
  does not expose is None, never 0.
- ``reading_ms`` is the time of the engine's newest scrape (its ``up`` sample); ``kv_reading_ms`` the time
  of its newest ``engine:kv_cache_usage_ratio:max``. Whether they are fresh is the policy's question.
- Faults come from the firing alerts and the GPU series of the same tick (:mod:`watchdog.serving.faults`).
- Reading never raises for missing series; it raises only for a store or evaluator fault (the agent's
  stage boundary owns that).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from watchdog.model import is_stale
from watchdog.promql import VectorSample, evaluate
from watchdog.serving.faults import Fault, engine_faults


@dataclass(frozen=True)
class EngineReadings:
    """One engine's inputs at one tick (see the module docstring)."""

    job: str
    instance: str
    reading_ms: int | None = None
    up: float | None = None
    kv_reading_ms: int | None = None
    kv_usage_ratio: float | None = None
    kv_free_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    requests_in_flight: float | None = None
    max_concurrency: float | None = None
    predicted_wait_seconds: float | None = None
    predicted_wait_ratio: float | None = None
    """Predicted queue wait over the engine's TTFT objective."""
    prefix_cache_hit_ratio: float | None = None
    ttft_attainment_ratio: float | None = None
    itl_attainment_ratio: float | None = None
    burn_rate: float | None = None
    """The worst 5-minute error-budget burn rate of its TTFT and TPOT objectives."""
    models: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    faults: tuple[Fault, ...] = field(default_factory=tuple)


_RANKS = "max without (tp_rank, pp_rank, moe_ep_rank)"
"""TP/PP ranks of one engine repeat the same value (SGLang): max over them, then sum data-parallel ranks."""

QUERIES: dict[str, str] = {
    "kv_usage_ratio": "max by (job, instance) (engine:kv_cache_usage_ratio:max)",
    "kv_reading_s": "max by (job, instance) (timestamp(engine:kv_cache_usage_ratio:max))",
    "kv_free_tokens": "sum by (job, instance) (engine:kv_cache_free_tokens)",
    "kv_capacity_tokens": "sum by (job, instance) (engine:kv_cache_capacity_tokens:sum)",
    "requests_running": f"sum by (job, instance) ({_RANKS} (engine:requests_running))",
    "requests_waiting": f"sum by (job, instance) ({_RANKS} (engine:requests_waiting))",
    "requests_in_flight": "sum by (job, instance) (engine:requests_in_flight)",
    "max_concurrency": "sum by (job, instance) (engine:kv_cache_max_concurrency)",
    "predicted_wait_seconds": "max by (job, instance) (engine:predicted_queue_wait_seconds)",
    "predicted_wait_ratio": "max by (job, instance) (engine:predicted_queue_wait_over_ttft_target_ratio)",
    "prefix_cache_hit_ratio": "max by (job, instance) (engine:prefix_cache_hit_ratio:rate5m)",
    "ttft_attainment_ratio": 'min by (job, instance) (engine:slo_attainment_ratio:rate5m{slo="ttft"})',
    "itl_attainment_ratio": 'min by (job, instance) (engine:slo_attainment_ratio:rate5m{slo=~"tpot|itl"})',
    "burn_rate": 'max by (job, instance) (engine:slo_error_budget_burn_rate:rate5m{slo=~"ttft|tpot|itl"})',
}
"""Each reading's instant query; one result per (job, instance)."""


def instant_values(expr: str, store: Any, t_ms: int) -> list[tuple[dict[str, str], float]]:
    """``(labels, value)`` of each sample of the instant query ``expr`` at ``t_ms``."""
    result = evaluate(expr, store, t_ms)
    samples = result if isinstance(result, list) else []
    return [(dict(s.labels), s.value) for s in samples if isinstance(s, VectorSample)]


def engine_gpus(store: Any, t_ms: int) -> dict[tuple[str, str], set[str]]:
    """``(job, instance) -> GPU indexes`` of every engine's TP group seen in the last 15 minutes (a GPU that
    fell off the bus leaves ``watchdog_engine_gpu_info`` but still belongs to its engine)."""
    out: dict[tuple[str, str], set[str]] = {}
    for labels, _ in instant_values("max_over_time(watchdog_engine_gpu_info[15m])", store, t_ms):
        if labels.get("job") and labels.get("gpu"):
            out.setdefault((labels["job"], labels.get("instance", "")), set()).add(labels["gpu"])
    return out


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else value


def _latest_up(store: Any, job: str) -> tuple[int | None, float | None]:
    newest: tuple[int, float] | None = None
    for series in store.select([("__name__", "=", "up"), ("job", "=", job)]):
        point = series.latest()
        if point is not None and not is_stale(point[1]) and (newest is None or point[0] > newest[0]):
            newest = (point[0], point[1])
    return (newest[0], newest[1]) if newest is not None else (None, None)


def _gpus(expr: str, store: Any, now_ms: int) -> list[str]:
    return sorted({labels["gpu"] for labels, _ in instant_values(expr, store, now_ms) if labels.get("gpu")})


def read_engines(store: Any, now_ms: int, engines: Sequence[tuple[str, str]],
                 firing: Iterable[Mapping[str, str]]) -> dict[str, EngineReadings]:
    """Readings of every ``(job, instance)`` in ``engines`` at ``now_ms``; ``firing`` the labels of the
    firing alerts (``alertname`` included)."""
    values: dict[str, dict[str, float]] = {}
    for key, expr in QUERIES.items():
        for labels, value in instant_values(expr, store, now_ms):
            if labels.get("job"):
                values.setdefault(labels["job"], {})[key] = value
    models: dict[str, set[str]] = {}
    for labels, _ in instant_values("count by (job, model_name) (engine:requests_running)", store, now_ms):
        if labels.get("job") and labels.get("model_name"):
            models.setdefault(labels["job"], set()).add(labels["model_name"])
    tp_groups = engine_gpus(store, now_ms)
    faults = engine_faults(firing, tp_groups, lost_gpus=_gpus("watchdog_gpu_lost == 1", store, now_ms),
                           reset_gpus=_gpus("watchdog_gpu_recovery_required == 1", store, now_ms))
    gpus_of: dict[str, set[str]] = {}
    for (job, _instance), gpus in tp_groups.items():
        gpus_of.setdefault(job, set()).update(gpus)
    out: dict[str, EngineReadings] = {}
    for job, instance in engines:
        reading_ms, up = _latest_up(store, job)
        got = values.get(job, {})
        kv_s = _finite(got.get("kv_reading_s"))
        out[job] = EngineReadings(
            job=job, instance=instance, reading_ms=reading_ms, up=up,
            kv_reading_ms=round(kv_s * 1000) if kv_s is not None else None,
            **{key: _finite(got.get(key)) for key in QUERIES if key != "kv_reading_s"},
            models=tuple(sorted(models.get(job, ()))),
            gpus=tuple(sorted(gpus_of.get(job, ()), key=lambda g: (len(g), g))),
            faults=faults.get(job, ()))
    return out

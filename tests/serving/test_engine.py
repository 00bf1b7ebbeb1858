"""The verdict engine over several engines and ticks: fail open when the agent is unhealthy or stalls, lost
data never drains, the drain guard holds a non-fatal drain with a reason, manual states, reload keeps state,
and the readings come from a real store."""

from __future__ import annotations

import pytest

from tests.serving.helpers import NOW_MS, SCRAPE_S, reading, serving
from watchdog.model import Sample as StoreSample
from watchdog.model import metric
from watchdog.serving.engine import Decision, VerdictEngine, apply_manual
from watchdog.serving.faults import Fault, FaultClass
from watchdog.serving.model import ManualState, Reason, Verdict
from watchdog.serving.readings import read_engines
from watchdog.serving.reasons import REASON_CODES
from watchdog.store import Store

A, SO, SH, DR, DN, UK = (Verdict.ADMIT, Verdict.SHORT_ONLY, Verdict.SHED, Verdict.DRAIN, Verdict.DOWN,
                         Verdict.UNKNOWN)
CANARY = Fault("canary_failing", FaultClass.GUARDED, "EngineOutputChanged on vllm-a")
LOST = Fault("gpu_lost", FaultClass.FATAL, "GPU 1 lost (NVML)")


class Clock:
    def __init__(self) -> None:
        self.now = NOW_MS / 1000

    def __call__(self) -> float:
        return self.now


def _engine(clock: Clock | None = None, **overrides: object) -> VerdictEngine:
    return VerdictEngine(serving(**overrides), scrape_interval_seconds=SCRAPE_S, tick_interval_seconds=1.0,
                         clock=clock or Clock())


def test_unhealthy_agent_fails_open_and_is_not_trusted() -> None:
    clock = Clock()
    engine = _engine(clock)
    out = engine.update(NOW_MS, {"a": reading("a", kv_free=0.05), "b": reading("b", faults=(LOST,))}, {},
                        healthy=False, unhealthy_detail="NVML does not work")
    assert [(v.verdict, v.weight_percent, v.reasons[0].code) for v in out] == [(UK, 100, "agent_unhealthy")] * 2
    assert out[0].reasons[0].detail == "NVML does not work" and out[0].proposed is SH
    assert engine.trusted() is False


def test_stalled_ticks_make_the_verdicts_untrusted() -> None:
    clock = Clock()
    engine = _engine(clock)
    engine.update(NOW_MS, {"a": reading("a")}, {}, healthy=True)
    assert engine.trusted() is True
    clock.now += 3.0
    assert engine.trusted() is True
    clock.now += 0.5  # past 3 tick intervals with no tick
    assert engine.trusted() is False


def test_losing_every_engines_data_drains_nothing() -> None:
    stale = NOW_MS - 60_000
    engine = _engine()
    out = engine.update(NOW_MS, {job: reading(job, kv_free=0.01, at_ms=stale) for job in "abc"}, {}, healthy=True)
    assert {(v.verdict, v.weight_percent) for v in out} == {(UK, 100)}
    assert all(v.reasons[0].code == "stale_data" for v in out)


def test_guard_holds_a_non_fatal_drain_of_the_only_engine_with_a_reason() -> None:
    engine = _engine()
    out = engine.update(NOW_MS, {"a": reading("a", faults=(CANARY,))}, {}, healthy=True)
    (v,) = out
    assert (v.verdict, v.proposed, v.weight_percent) == (A, DR, 100)
    assert [r.code for r in v.reasons] == ["canary_failing", "drain_guard"]
    assert "at most 0 may be drained" in v.reasons[1].detail
    samples = {(dict(s.labels).get("reason"), s.value) for s in engine.samples()
               if dict(s.labels)["__name__"] == "watchdog_engine_verdict_reason"}
    assert ("drain_guard", 1.0) in samples


def test_guard_lets_a_non_fatal_drain_through_where_the_others_have_room() -> None:
    engine = _engine()
    readings = {"a": reading("a", faults=(CANARY,), requests_in_flight=5, max_concurrency=50),
                "b": reading("b", requests_in_flight=5, max_concurrency=50)}
    out = {v.job: v for v in engine.update(NOW_MS, readings, {}, healthy=True)}
    assert out["a"].verdict is DR and out["b"].verdict is A


def test_fatal_drain_of_the_only_engine_is_never_held() -> None:
    (v,) = _engine().update(NOW_MS, {"a": reading("a", faults=(LOST,))}, {}, healthy=True)
    assert (v.verdict, v.reasons[0].code) == (DR, "gpu_lost")


MANUAL_DRAIN = ManualState("a", DR, "maintenance", "alice", 0.0)
MANUAL_ADMIT = ManualState("a", A, "override", "bob", 0.0)


@pytest.mark.parametrize(("agent", "manual", "want"), [
    (A, MANUAL_DRAIN, DR), (DN, MANUAL_DRAIN, DR), (UK, MANUAL_DRAIN, DR),
    (DR, MANUAL_ADMIT, A), (SH, MANUAL_ADMIT, A), (SO, MANUAL_ADMIT, A), (UK, MANUAL_ADMIT, A),
    (DN, MANUAL_ADMIT, DN), (SH, None, SH),
])
def test_manual_states_table(agent: Verdict, manual: ManualState | None, want: Verdict) -> None:
    decision = apply_manual(Decision(agent, 0, (Reason("kv_free_low", "x"),), None), manual)
    assert decision.verdict is want
    if manual is not None:
        assert "manual" in [r.code for r in decision.reasons]
        assert decision.proposed is (agent if agent is not want else None)


def test_reconfigure_keeps_state() -> None:
    clock = Clock()
    engine = _engine(clock)
    engine.update(NOW_MS, {"a": reading("a", kv_free=0.2)}, {}, healthy=True)
    since = engine.verdicts()[0].since_seconds
    engine.reconfigure(serving(min_seconds_in_state=60), scrape_interval_seconds=SCRAPE_S, tick_interval_seconds=1)
    out = engine.update(NOW_MS + 20_000, {"a": reading("a", kv_free=0.9, at_ms=NOW_MS + 20_000)}, {}, healthy=True)
    assert (out[0].verdict, out[0].since_seconds, out[0].proposed) == (SO, since, A)
    assert out[0].reasons[-1].code == "hysteresis"


def test_every_emitted_reason_code_is_documented() -> None:
    engine = _engine()
    cases = {"a": reading("a", faults=(LOST,)), "b": reading("b", up=0.0), "c": reading("c", kv_free=0.05),
             "d": reading("d", at_ms=NOW_MS - 60_000), "e": reading("e", faults=(CANARY,)),
             "f": reading("f", predicted_wait_ratio=3.0)}
    manual = {"b": ManualState("b", DR, "x", "y", 0.0)}
    codes = {r.code for v in engine.update(NOW_MS, cases, manual, healthy=True) for r in v.reasons}
    assert codes <= set(REASON_CODES) and len(codes) >= 7


def test_state_set_series() -> None:
    engine = _engine()
    engine.update(NOW_MS, {"a": reading("a", kv_free=0.2)}, {}, healthy=True)
    verdict = {dict(s.labels)["verdict"]: s.value for s in engine.samples()
               if dict(s.labels)["__name__"] == "watchdog_engine_verdict"}
    assert verdict == {v.value: (1.0 if v is SO else 0.0) for v in Verdict}


def _ingest(store: Store, t_ms: int, up: float, kv: float | None = None) -> None:
    store.ingest("collector:engine:vllm-a", [StoreSample(metric("up", job="vllm-a", instance="127.0.0.1:8000"), up)],
                 t_ms)
    if kv is not None:
        store.ingest("rules:kv", [StoreSample(metric("engine:kv_cache_usage_ratio:max", job="vllm-a",
                                                     instance="127.0.0.1:8000"), kv)], t_ms)


def test_readings_from_a_real_store() -> None:
    store = Store()
    _ingest(store, NOW_MS - 5000, 1.0, 0.75)
    store.ingest("collector:nvml", [StoreSample(metric("watchdog_engine_gpu_info", gpu="1", uuid="GPU-1",
                                                       job="vllm-a", instance="127.0.0.1:8000"), 1.0),
                                    StoreSample(metric("watchdog_gpu_lost", gpu="1", uuid="GPU-1"), 1.0)], NOW_MS)
    firing = [{"alertname": "GpuHwSlowdown", "gpu": "1", "uuid": "GPU-1", "severity": "warning"}]
    r = read_engines(store, NOW_MS, [("vllm-a", "127.0.0.1:8000"), ("vllm-z", "127.0.0.1:9")], firing)
    a = r["vllm-a"]
    assert (a.reading_ms, a.up, a.kv_usage_ratio, a.kv_reading_ms, a.gpus) == (
        NOW_MS - 5000, 1.0, 0.75, NOW_MS - 5000, ("1",))
    assert [(f.code, f.fault_class) for f in a.faults] == [("gpu_lost", FaultClass.FATAL),
                                                           ("thermal_slowdown", FaultClass.DEGRADED)]
    assert (r["vllm-z"].reading_ms, r["vllm-z"].kv_usage_ratio) == (None, None)

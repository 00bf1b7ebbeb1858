"""The policy as a table: readings (and the engine's current verdict) → raw verdict, reasons, weight."""

from __future__ import annotations

from typing import Any

import pytest

from tests.serving.helpers import NOW_MS, SCRAPE_S, reading, serving
from watchdog.serving.faults import Fault, FaultClass
from watchdog.serving.model import Verdict
from watchdog.serving.policy import propose, scores
from watchdog.serving.reasons import REASON_CODES

A, SO, SH, DR, DN, UK = (Verdict.ADMIT, Verdict.SHORT_ONLY, Verdict.SHED, Verdict.DRAIN, Verdict.DOWN,
                         Verdict.UNKNOWN)
LOST = Fault("gpu_lost", FaultClass.FATAL, "GPU 3 lost (NVML)")
WEDGED = Fault("engine_wedged", FaultClass.FATAL, "EngineWedged on vllm-a")
CANARY = Fault("canary_failing", FaultClass.GUARDED, "EngineOutputChanged on vllm-a")
LINK = Fault("degraded_link", FaultClass.DEGRADED, "GpuPcieLinkDegraded on GPU 1")
STALE_MS = NOW_MS - int(3 * SCRAPE_S * 1000) - 1

CASES: list[tuple[str, dict[str, Any], Verdict, Verdict, tuple[str, ...], int, bool]] = [
    # (name, reading fields, previous verdict, verdict, reason codes, weight, fatal)
    ("plenty free", {"kv_free": 0.8}, A, A, (), 100, False),
    ("exactly 40 % free, admitted", {"kv_free": 0.40}, A, A, (), 100, False),
    ("35 % free, admitted: in the gap, stays", {"kv_free": 0.35}, A, A, (), 100, False),
    ("35 % free, short-only: in the gap, stays", {"kv_free": 0.35}, SO, SO, ("kv_free_low",), 50, False),
    ("29 % free enters short-only", {"kv_free": 0.29}, A, SO, ("kv_free_low",), 50, False),
    ("41 % free leaves short-only", {"kv_free": 0.41}, SO, A, (), 100, False),
    ("12 % free, short-only: in the gap, stays", {"kv_free": 0.12}, SO, SO, ("kv_free_low",), 50, False),
    ("9 % free enters shed", {"kv_free": 0.09}, SO, SH, ("kv_free_low",), 0, False),
    ("9 % free from admit enters shed", {"kv_free": 0.09}, A, SH, ("kv_free_low",), 0, False),
    ("12 % free, shed: in the gap, stays", {"kv_free": 0.12}, SH, SH, ("kv_free_low",), 0, False),
    ("16 % free leaves shed for short-only", {"kv_free": 0.16}, SH, SO, ("kv_free_low",), 50, False),
    ("50 % free leaves shed for admit", {"kv_free": 0.5}, SH, A, (), 100, False),
    ("predicted wait over TTFT sheds", {"predicted_wait_ratio": 1.3, "predicted_wait_seconds": 3.2}, A, SH,
     ("predicted_wait_over_ttft",), 0, False),
    ("predicted wait 0.9×, shed: in the gap, stays", {"predicted_wait_ratio": 0.9}, SH, SH,
     ("predicted_wait_over_ttft",), 0, False),
    ("predicted wait 0.9×, admitted: under the objective", {"predicted_wait_ratio": 0.9}, A, A, (), 100, False),
    ("both capacity signals", {"kv_free": 0.2, "predicted_wait_ratio": 2.0}, A, SH,
     ("kv_free_low", "predicted_wait_over_ttft"), 0, False),
    ("lost GPU drains at once", {"faults": (LOST,)}, A, DR, ("gpu_lost",), 0, True),
    ("fatal wins over stale data", {"faults": (LOST,), "reading_ms": STALE_MS}, A, DR, ("gpu_lost",), 0, True),
    ("fatal wins over down", {"faults": (WEDGED,), "up": 0.0}, A, DR, ("engine_wedged",), 0, True),
    ("stale scrape is unknown, never saturation", {"kv_free": 0.01, "reading_ms": STALE_MS}, SH, UK,
     ("stale_data",), 100, False),
    ("never scraped is unknown", {"reading_ms": None, "up": None}, A, UK, ("stale_data",), 100, False),
    ("no KV and no wait reading is unknown", {"kv_free": None}, A, UK, ("stale_data",), 100, False),
    ("stale KV alone with a fresh wait reading", {"kv_free": 0.01, "kv_reading_ms": STALE_MS,
                                                  "predicted_wait_ratio": 0.1}, A, A, (), 100, False),
    ("not answering is down", {"up": 0.0}, A, DN, ("not_answering",), 0, False),
    ("guarded fault drains (not fatal)", {"faults": (CANARY,)}, A, DR, ("canary_failing",), 0, False),
    ("degraded while burning: half weight", {"faults": (LINK,), "burn_rate": 4.0}, A, A, ("degraded_link",), 50,
     False),
    ("degraded, objectives met: full weight", {"faults": (LINK,), "burn_rate": 0.5}, A, A, (), 100, False),
    ("degraded short-only while burning", {"kv_free": 0.2, "faults": (LINK,), "burn_rate": 3.0}, A, SO,
     ("kv_free_low", "degraded_link"), 25, False),
]


@pytest.mark.parametrize(("name", "fields", "previous", "verdict", "codes", "weight", "fatal"), CASES,
                         ids=[c[0] for c in CASES])
def test_policy_table(name: str, fields: dict[str, Any], previous: Verdict, verdict: Verdict,
                      codes: tuple[str, ...], weight: int, fatal: bool) -> None:
    proposal = propose(reading(**fields), previous, serving(), NOW_MS, SCRAPE_S)
    assert (proposal.verdict, tuple(r.code for r in proposal.reasons), proposal.weight_percent,
            proposal.fatal) == (verdict, codes, weight, fatal), name
    assert all(r.code in REASON_CODES for r in proposal.reasons)


def test_thresholds_are_settings() -> None:
    """A stricter configured band moves the edges."""
    strict = serving(short_only_enter_free_ratio=0.5, short_only_leave_free_ratio=0.6)
    assert propose(reading(kv_free=0.45), A, strict, NOW_MS, SCRAPE_S).verdict is SO
    assert propose(reading(kv_free=0.45), A, serving(), NOW_MS, SCRAPE_S).verdict is A


def test_reason_detail_has_the_figures() -> None:
    proposal = propose(reading(kv_free=0.09), A, serving(), NOW_MS, SCRAPE_S)
    assert proposal.reasons[0].detail == "free KV 9 % < 10 %"


def test_scores_report_free_share_and_missing_as_none() -> None:
    got = scores(reading(kv_free=0.25, requests_waiting=3.0))
    assert got.kv_free_ratio == pytest.approx(0.25)
    assert got.requests_waiting == 3.0
    assert got.prefix_cache_hit_ratio is None

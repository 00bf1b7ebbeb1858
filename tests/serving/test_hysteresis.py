"""Hysteresis: N-of-M readings, a minimum time in a state, fatal and unknown at once, and no flapping on a
noisy KV gauge around a threshold."""

from __future__ import annotations

import random

import pytest

from tests.serving.helpers import NOW_MS, SCRAPE_S, reading, serving
from watchdog.config.settings import SettingsError
from watchdog.serving.hysteresis import EngineState, step
from watchdog.serving.model import Reason, Verdict
from watchdog.serving.policy import Proposal, propose

A, SO, SH, DR, UK = Verdict.ADMIT, Verdict.SHORT_ONLY, Verdict.SHED, Verdict.DRAIN, Verdict.UNKNOWN
S = serving()  # 3 of 5 readings, 10 s in a state


def _p(verdict: Verdict, reading_ms: int, fatal: bool = False) -> Proposal:
    return Proposal(verdict, (Reason("kv_free_low", "x"),), 0, fatal=fatal, reading_ms=reading_ms)


def _run(proposals: list[tuple[int, Verdict]], state: EngineState | None = None,
         fatal_at: int | None = None) -> list[Verdict]:
    """Feed (seconds, proposal) pairs, one new scrape each; the verdict after each."""
    out = []
    for t, verdict in proposals:
        state = step(state, _p(verdict, NOW_MS + t * 1000, fatal=t == fatal_at), NOW_MS + t * 1000, S)
        out.append(state.verdict)
    return out


def test_first_proposal_applies_at_once() -> None:
    assert _run([(0, SH)]) == [SH]


def test_worsening_needs_n_of_m_readings_and_the_dwell() -> None:
    seq = [(0, A), (10, SO), (15, SO), (20, SO), (25, SO)]
    assert _run(seq) == [A, A, A, SO, SO]


def test_dwell_holds_a_change_even_with_support() -> None:
    state = EngineState(A, NOW_MS, (SO, SO, SO, SO), NOW_MS)
    held = step(state, _p(SO, NOW_MS + 5000), NOW_MS + 5000, S)
    assert held.verdict is A
    moved = step(held, _p(SO, NOW_MS + 10_000), NOW_MS + 10_000, S)
    assert (moved.verdict, moved.since_ms) == (SO, NOW_MS + 10_000)


def test_same_scrape_read_on_many_ticks_is_one_reading() -> None:
    state = EngineState(A, NOW_MS - 60_000, (A,), NOW_MS)
    for tick in range(1, 10):  # nine ticks, one scrape
        state = step(state, _p(SH, NOW_MS + 1000), NOW_MS + tick * 1000, S)
    assert state.verdict is A and state.window == (A, SH)


def test_noise_between_bands_moves_to_the_nth_worst_not_the_extreme() -> None:
    state = EngineState(A, NOW_MS - 60_000, (), NOW_MS - 60_000)
    for i, verdict in enumerate([SO, SH, SO, SO, A]):
        state = step(state, _p(verdict, NOW_MS + i), NOW_MS + i, S)
    assert state.verdict is SO


def test_improving_needs_n_good_readings() -> None:
    state = EngineState(SH, NOW_MS - 60_000, (SH, SH, SH, SH, SH), NOW_MS - 1)
    verdicts = []
    for i, verdict in enumerate([A, SH, A, A]):
        state = step(state, _p(verdict, NOW_MS + i), NOW_MS + i, S)
        verdicts.append(state.verdict)
    assert verdicts == [SH, SH, SH, A]


def test_fatal_drains_at_once_and_leaves_only_after_n_readings() -> None:
    seq = [(0, A), (1, DR), (20, A), (25, A), (30, A)]
    assert _run(seq, fatal_at=1) == [A, DR, DR, DR, A]


def test_unknown_applies_at_once_and_known_data_replaces_it_at_once() -> None:
    state = EngineState(SH, NOW_MS, (SH,) * 5, NOW_MS)
    state = step(state, _p(UK, NOW_MS + 1), NOW_MS + 1, S)
    assert state.verdict is UK
    state = step(state, _p(A, NOW_MS + 2), NOW_MS + 2, S)
    assert (state.verdict, state.window) == (A, (A,))


def _changes(kv_free_series: list[float]) -> int:
    """Verdict changes of an engine scraped every 5 s, ticked every second, with the given free KV."""
    state: EngineState | None = None
    changes = 0
    for i, free in enumerate(kv_free_series):
        for tick in range(5):
            now = NOW_MS + (i * 5 + tick) * 1000
            r = reading(kv_free=free, at_ms=NOW_MS + i * 5000)
            proposal = propose(r, state.verdict if state else A, S, now, SCRAPE_S)
            new = step(state, proposal, now, S)
            changes += state is not None and new.verdict is not state.verdict
            state = new
    return changes


@pytest.mark.parametrize("centre", [0.30, 0.40, 0.10, 0.15])
def test_no_flapping_on_a_noisy_gauge_around_a_threshold(centre: float) -> None:
    rng = random.Random(26)
    noisy = [min(1.0, max(0.0, centre + rng.gauss(0, 0.03))) for _ in range(720)]  # an hour of scrapes
    assert _changes(noisy) <= 2


def test_a_real_trend_still_moves_the_verdict() -> None:
    falling = [0.8 - i * 0.01 for i in range(80)] + [0.02] * 10 + [0.8] * 10
    assert _changes(falling) >= 3  # admit → short-only → shed → ... → admit


def test_band_edges_must_be_apart_in_order() -> None:
    with pytest.raises(SettingsError, match=r"serving\.shed_leave_free_ratio"):
        serving(shed_leave_free_ratio=0.05)
    with pytest.raises(SettingsError, match="readings_to_change"):
        serving(readings_to_change=6)

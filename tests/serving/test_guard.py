"""The drain guard: the share of engines out, at least one stays, and the capacity check."""

from __future__ import annotations

from tests.serving.helpers import guard_settings, reading
from watchdog.serving.guard import GuardCase, absorbable, guard
from watchdog.serving.model import Verdict

A, SO, SH, DR, DN = Verdict.ADMIT, Verdict.SHORT_ONLY, Verdict.SHED, Verdict.DRAIN, Verdict.DOWN
NO_CAPACITY_CHECK = guard_settings(check_capacity=False)


def _case(job: str, verdict: Verdict, published: Verdict | None = A, fatal: bool = False) -> GuardCase:
    return GuardCase(job, verdict, fatal, published)


def _roomy(job: str, in_flight: float = 10, max_conc: float = 100) -> object:
    return reading(job, requests_in_flight=in_flight, max_concurrency=max_conc)


def test_one_engine_is_never_drained_for_a_non_fatal_reason() -> None:
    held = guard([_case("a", DR)], {}, NO_CAPACITY_CHECK)
    assert "0 of 1 engines already out; at most 0" in held["a"]


def test_half_of_four_may_be_drained_not_more() -> None:
    cases = [_case("a", DR), _case("b", DR), _case("c", DR), _case("d", A)]
    assert sorted(guard(cases, {}, NO_CAPACITY_CHECK)) == ["c"]


def test_engines_already_out_and_fatal_drains_count_and_are_never_held() -> None:
    cases = [_case("a", DR, published=DR), _case("b", DR, fatal=True), _case("c", DR), _case("d", A)]
    assert guard(cases, {}, NO_CAPACITY_CHECK) == {"c": "2 of 4 engines already out; at most 2 may be drained "
                                                        "for a non-fatal reason"}


def test_down_engines_count_against_the_share() -> None:
    cases = [_case("a", DN), _case("b", DR)]
    assert "b" in guard(cases, {}, guard_settings(max_drained_share=1.0, check_capacity=False))


def test_share_of_one_still_keeps_one_engine() -> None:
    cases = [_case("a", DR), _case("b", DR)]
    assert list(guard(cases, {}, guard_settings(max_drained_share=1.0, check_capacity=False))) == ["b"]


def test_capacity_check_allows_when_the_others_have_room() -> None:
    readings = {"a": reading("a", requests_in_flight=30, max_concurrency=100), "b": _roomy("b", 40, 100)}
    assert guard([_case("a", DR), _case("b", A)], readings, guard_settings()) == {}


def test_capacity_check_holds_when_the_others_are_full() -> None:
    readings = {"a": reading("a", requests_in_flight=80, max_concurrency=100), "b": _roomy("b", 90, 100)}
    held = guard([_case("a", DR), _case("b", A)], readings, guard_settings())
    assert held == {"a": "the other engines cannot absorb its load (80 requests in flight, room for 10 on the "
                         "others)"}


def test_shedding_peers_absorb_nothing() -> None:
    readings = {"a": reading("a", requests_in_flight=5, max_concurrency=100), "b": _roomy("b", 0, 100)}
    assert "a" in guard([_case("a", DR), _case("b", SH)], readings, guard_settings())


def test_unknown_capacity_holds_and_kv_tokens_are_the_fallback() -> None:
    engine = reading("a", requests_in_flight=5, kv_capacity_tokens=10_000, kv_free=0.5)
    ok, why = absorbable(engine, [reading("b")])
    assert (ok, why) == (False, "the other engines' spare capacity is unknown")
    ok, why = absorbable(engine, [reading("b", kv_free_tokens=6000)])
    assert (ok, why) == (True, "5000 KV tokens in use, 6000 free on the others")


def test_idle_engine_needs_no_room_but_needs_a_peer() -> None:
    assert absorbable(reading("a", requests_in_flight=0), [reading("b")]) == (True, "idle")
    assert absorbable(reading("a", requests_in_flight=0), [])[0] is False


def test_engines_of_other_models_do_not_count() -> None:
    readings = {"a": reading("a", requests_in_flight=5, max_concurrency=100, models=("llama",)),
                "b": reading("b", requests_in_flight=0, max_concurrency=100, models=("qwen",))}
    assert "a" in guard([_case("a", DR), _case("b", A)], readings, guard_settings())

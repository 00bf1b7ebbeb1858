"""The rule engine's precomputed per-rule plans write exactly what a plain evaluation would.

The engine reads the evaluator's internal result, memoises each recording rule's output label sets
and skips the store ingest of an empty result after an empty one. The reference here does none of
that: the public ``evaluate`` with no cache, ``vector_of``, labels merged with ``make_labels`` and an
ingest at every evaluation. Random series appear, vanish, change values and go NaN tick by tick, so
rule results switch between empty and non-empty, collide after rule labels, and churn label sets.
"""

from __future__ import annotations

import random
import struct

import pytest

from watchdog.model import METRIC_NAME, Sample, make_labels
from watchdog.promql import evaluate
from watchdog.rules import engine as rules_engine
from watchdog.rules.engine import RuleEngine, RuleEvaluationError, vector_of
from watchdog.rules.loader import RecordingRule, load_rule_text
from watchdog.store import Store

RULES = """
groups:
  - name: first
    rules:
      - record: r:sum
        expr: sum by (job) (m1)
      - record: r:copy
        expr: m1
        labels: {team: infra}
      - record: r:rate
        expr: rate(c1[30s])
      - record: r:filtered
        expr: m1 > 0.5
      - record: r:either
        expr: m1 or on (job) m2
      - record: r:collides
        expr: m1
        labels: {job: fixed}
      - record: r:scalar
        expr: scalar(sum(m1))
      - alert: Many
        expr: r:sum > 1
  - name: second
    rules:
      - record: r:chained
        expr: r:sum * 2 unless on (job) m2 < 0.2
      - record: r:never
        expr: m_missing
      - record: r:renamed
        expr: label_replace(m1, "job", "$1-x", "job", "(.*)")
"""


def _random_tick(rng: random.Random, store: Store, t_ms: int, churn: bool) -> None:
    """One scrape: a random subset of series, with random values (sometimes NaN)."""
    samples: list[Sample] = []
    jobs = [f"j{rng.randrange(50)}" for _ in range(3)] if churn else ["a", "b", "c"]
    for job in jobs:
        for name in ("m1", "m2"):
            if rng.random() < 0.6:
                value = float("nan") if rng.random() < 0.05 else rng.random()
                samples.append(Sample(make_labels({METRIC_NAME: name, "job": job, "i": rng.choice("xy")}),
                                      value))
        if rng.random() < 0.8:
            samples.append(Sample(make_labels({METRIC_NAME: "c1", "job": job}), float(t_ms // 1000)))
    store.ingest("scrape", samples, t_ms)


def _reference_tick(ruleset: object, store: Store, t_ms: int) -> list[str]:
    """What the engine did before per-rule plans: every recording rule evaluated and ingested."""
    failed: list[str] = []
    for group in ruleset.groups:  # type: ignore[attr-defined]
        for index, rule in enumerate(group.rules):
            if not isinstance(rule, RecordingRule):
                continue
            try:
                vector = vector_of(evaluate(rule.query, store, t_ms))
                samples: list[Sample] = []
                seen: set[tuple[tuple[str, str], ...]] = set()
                for labels, value in vector:
                    out = make_labels({**dict(labels), METRIC_NAME: rule.record, **rule.labels})
                    if out in seen:
                        raise RuleEvaluationError("same labelset")
                    seen.add(out)
                    samples.append(Sample(out, value))
            except RuleEvaluationError:
                failed.append(rule.name)
                continue
            store.ingest(f"rules:{group.name}/{index}", samples, t_ms)
    return failed


def _contents(store: Store) -> dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]:
    """Every series but ALERTS*, its points with values as bit patterns (NaNs and stale markers exact)."""
    out = {}
    for series in store.select([(METRIC_NAME, "=~", ".+")]):
        name = dict(series.labels)[METRIC_NAME]
        if name.startswith("ALERTS"):
            continue
        times, values = series.window(-(1 << 62), 1 << 62)
        out[series.labels] = [(t, struct.unpack("<Q", struct.pack("<d", v))[0])
                              for t, v in zip(times, values, strict=True)]
    return out


@pytest.mark.parametrize(("seed", "churn", "slack"), [(1, False, 1024), (2, True, 0), (3, True, 1024)])
def test_engine_writes_what_plain_evaluation_writes(monkeypatch: pytest.MonkeyPatch, seed: int, churn: bool,
                                                    slack: int) -> None:
    monkeypatch.setattr(rules_engine, "OUTPUT_MEMO_SLACK", slack)
    rng = random.Random(seed)
    ruleset = load_rule_text(RULES)
    ours, theirs = Store(), Store()
    engine = RuleEngine(ruleset, ours)
    failures: list[str] = []
    for tick in range(60):
        t_ms = tick * 5_000
        state = rng.getstate()
        _random_tick(rng, ours, t_ms, churn)
        rng.setstate(state)
        _random_tick(rng, theirs, t_ms, churn)
        engine.evaluate(t_ms)
        expected_failures = _reference_tick(ruleset, theirs, t_ms)
        assert [f.rule for f in engine.failures_at(t_ms)
                if not f.rule[0].isupper()] == expected_failures, tick
        assert _contents(ours) == _contents(theirs), tick
        failures += expected_failures
    assert "r:collides" in failures  # the duplicate-after-rule-labels path ran

"""The rule engine's per-pass cache stores exactly what the plain path (each rule evaluated alone) stores.

Two engines run the same rules over two stores fed the same scrapes: one with the cache
(:mod:`watchdog.promql.cache`), one without. The scrapes keep a steady series set most of the time and
now and then change it: values that change, NaN, -0.0; a series that goes stale, or silently stops and
leaves the lookback, or comes back; new series; gc removing series; an evaluation behind the newest
scrape; a rule whose result collides after its labels; results over the sample limit. Store contents
(bit patterns), failures and alerts must be the same after every tick.
"""

from __future__ import annotations

import random
import struct

import pytest

from tests.support.plain_rules import PlainRuleEngine
from watchdog.model import METRIC_NAME, STALE_NAN, Sample, make_labels
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_text
from watchdog.store import Store

RULES = """
groups:
  - name: copies
    rules:
      - record: r:copy
        expr: m1{server=""}
        labels: {team: infra}
      - record: r:first
        expr: m1 or m2 or label_replace(m_absent, "a", "$1", "b", "(.*)")
      - record: r:bucket
        expr: b1 or (b3 unless ignoring(le) b1)
      - record: r:kept
        expr: (m1 and on (job) m2) or m2 unless on (job, i) m_absent
      - record: r:self
        expr: m2{job="a"} or r:self
      - record: r:self_labelled
        expr: m2{job="a"} or r:self_labelled
        labels: {team: t}
      - record: r:collides
        expr: m1
        labels: {job: fixed, i: fixed, server: fixed}
      - record: r:big
        expr: b1 or m1 or m2 or b2
      - record: r:offset
        expr: m1 offset 5s
      - record: r:filtered
        expr: m1 > 0.5
      - record: r:read_back
        expr: sum by (job) (r:copy) + count(r:first)
      - alert: BucketsVanished
        expr: absent(r:bucket)
"""

JOBS = ("a", "b", "c")


class Feed:
    """The scrapes: a steady set of series with random values, and random events that change it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.silent: set[str] = set()  # jobs whose series are not scraped at all (they leave the lookback)
        self.dropped: set[str] = set()  # jobs whose series a scrape no longer reports (stale markers)
        self.extra = 0  # extra m2 series
        self.b3 = False  # the third histogram, partly unmatched by the first

    def step(self) -> None:
        rng = self.rng
        if rng.random() < 0.08:
            self.silent ^= {rng.choice(JOBS)}
        if rng.random() < 0.08:
            self.dropped ^= {rng.choice(JOBS)}
        if rng.random() < 0.05:
            self.extra = rng.randrange(3)
        if rng.random() < 0.05:
            self.b3 = not self.b3

    def value(self) -> float:
        roll = self.rng.random()
        if roll < 0.02:
            return float("nan")
        if roll < 0.04:
            return -0.0
        return self.rng.choice([0.25, 1.0, self.rng.random(), 1e300 * self.rng.random()])

    def scrape(self, store: Store, t_ms: int) -> None:
        rng = self.rng
        by_job: dict[str, list[Sample]] = {job: [] for job in JOBS}
        for job in JOBS:
            for i in ("x", "y"):
                by_job[job].append(Sample(make_labels({METRIC_NAME: "m1", "job": job, "i": i}), self.value()))
            by_job[job].append(Sample(make_labels({METRIC_NAME: "m1", "job": job, "server": "s"}), self.value()))
            by_job[job].append(Sample(make_labels({METRIC_NAME: "m2", "job": job, "i": "x"}), self.value()))
            for le in ("0.1", "1", "+Inf"):
                by_job[job].append(Sample(make_labels({METRIC_NAME: "b1", "job": job, "le": le}), self.value()))
                by_job[job].append(Sample(make_labels({METRIC_NAME: "b2", "job": job, "le": le}), self.value()))
            if self.b3:
                by_job[job].append(Sample(make_labels({METRIC_NAME: "b3", "job": job, "le": "2"}), self.value()))
        for k in range(self.extra):
            by_job["c"].append(Sample(make_labels({METRIC_NAME: "m2", "job": "c", "i": f"e{k}"}), self.value()))
        for job, samples in by_job.items():
            if job in self.silent:
                continue
            if job in self.dropped:
                samples = samples[:2]
            store.ingest(f"collector:{job}", samples, t_ms)
        if rng.random() < 0.03:  # a stray stale marker written directly
            store.append(make_labels({METRIC_NAME: "m1", "job": "a", "i": "x"}), t_ms, STALE_NAN)


def _contents(store: Store) -> dict[object, list[tuple[int, int]]]:
    out = {}
    for series in store.all_series():
        times, values = series.window(-(1 << 62), 1 << 62)
        out[series.labels] = [(t, struct.unpack("<Q", struct.pack("<d", v))[0])
                              for t, v in zip(times, values, strict=True)]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_pass_cache_stores_what_evaluating_each_rule_alone_stores(seed: int) -> None:
    ruleset = load_rule_text(RULES)
    stores = [Store(retention_ms=40_000), Store(retention_ms=40_000)]
    engines = [RuleEngine(ruleset, stores[0], lookback_ms=12_000, sample_limit=26),
               PlainRuleEngine(ruleset, stores[1], lookback_ms=12_000, sample_limit=26)]
    feeds = [Feed(seed), Feed(seed)]
    failures: set[str] = set()
    lag = random.Random(seed)
    t_ms = 1_000_000
    for tick in range(240):
        t_ms += 5_000
        behind = lag.random() < 0.1
        seen = []
        for store, feed, engine in zip(stores, feeds, engines, strict=True):
            feed.step()
            feed.scrape(store, t_ms)
            if tick % 7 == 0:
                store.gc(t_ms)
            alerts = engine.evaluate(t_ms - 2_500 if behind else t_ms)
            seen.append([(a.labels, a.state) for a in alerts])
        at = t_ms - 2_500 if behind else t_ms
        mine, reference = ([(f.rule, f.index, f.error) for f in e.failures_at(at)] for e in engines)
        assert mine == reference, tick
        assert seen[0] == seen[1], tick
        assert _contents(stores[0]) == _contents(stores[1]), tick
        failures.update(rule for rule, _, _ in mine)
    assert {"r:collides", "r:big"} <= failures  # a clash; the sample limit with every job present

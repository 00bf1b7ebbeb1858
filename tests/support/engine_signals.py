"""Engine fixture pages as the agent stores them: parsed by the collector, engine rules evaluated."""

from __future__ import annotations

from pathlib import Path

from watchdog.collectors.engines import parse_payload
from watchdog.engines.config_series import config_series
from watchdog.model import Labels, metric_name
from watchdog.promql import evaluate, parse_query
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_files
from watchdog.store import Store

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
RULES = ROOT / "rules" / "engines.yaml"
T_MS = 1_700_000_000_000
TARGETS = {"job": "engine", "instance": "127.0.0.1:8000"}
CANONICAL_COUNTERS_AND_GAUGES = (
    "engine:requests_running", "engine:requests_waiting", "engine:kv_cache_usage_ratio",
    "engine:preemptions_total", "engine:prefix_cache_queries_total", "engine:prefix_cache_hits_total",
    "engine:prompt_tokens_total", "engine:generation_tokens_total", "engine:requests_finished_total",
)


def agent_store(*paths: Path) -> Store:
    """The pages at *paths* after one scrape each (same tick), with rules/engines.yaml evaluated."""
    store = Store(retention_ms=3_600_000, max_points=100, max_series=100_000)
    for path in paths:
        samples = parse_payload(path.read_text(encoding="utf-8"), TARGETS)
        samples += config_series(samples, TARGETS)
        for sample in samples:
            store.append(sample.labels, T_MS, sample.value)
    RuleEngine(load_rule_files([str(RULES)]), store).evaluate(T_MS)
    return store


def query(store: Store, expr: str) -> dict[Labels, float]:
    """Instant query at the scrape's time: labels -> value."""
    return {s.labels: s.value for s in evaluate(parse_query(expr), store, T_MS)}  # type: ignore[union-attr]


def without_target(labels: Labels) -> dict[str, str]:
    """Labels minus job, instance and the name."""
    return {k: v for k, v in labels if k not in ("job", "instance", "__name__")}


def canonical(
    store: Store, names: tuple[str, ...] = CANONICAL_COUNTERS_AND_GAUGES
) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of the canonical series *names*: (name, labels without target labels, value)."""
    pattern = "|".join(names)
    return [(metric_name(labels), without_target(labels), value)
            for labels, value in query(store, f'{{__name__=~"{pattern}"}}').items()]

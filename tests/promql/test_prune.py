"""Nodes known to evaluate to ``[]`` (:mod:`watchdog.promql.prune`) change no result.

Each query is evaluated with and without the marks, at sample limits from 0 up and without one: the
result, or the error (message and kind included), must be the same. The queries cover what the
default rule pack does with selectors that match nothing (an engine kind's alternatives in ``or``
chains, ``label_replace`` over them, ``sum without``, range functions) and what must not be taken for
empty (``absent``, invalid regular expressions, ``count_values`` with a bad label, subqueries).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.exposition import parse_exposition
from watchdog.model import Sample, make_labels
from watchdog.promql import PromQLError, TooManySamples, parse_query
from watchdog.promql.engine import evaluate_expr
from watchdog.promql.nodes import VectorSelector, as_rule_manager_runs_it, walk
from watchdog.promql.prune import EmptyNodes, empty_nodes
from watchdog.rules.loader import load_rule_files
from watchdog.store import Store

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000_000


def _store() -> Store:
    store = Store(retention_ms=3_600_000)
    for step in range(4):
        store.ingest("a", [Sample(make_labels({"__name__": "up", "job": "x", "i": str(i)}), float(i + step))
                           for i in range(3)], T0 + step * 15_000)
        store.ingest("b", [Sample(make_labels({"__name__": "req_total", "job": "x"}), float(10 * step))],
                     T0 + step * 15_000)
    return store


def _outcome(query: str, store: Store, limit: int | None, marked: bool) -> object:
    expr = as_rule_manager_runs_it(parse_query(query).expr)
    empty = empty_nodes(expr, lambda vs: not list(store.select(vs.matchers))) if marked else None
    try:
        return repr(("ok", evaluate_expr(expr, store, T0 + 60_000, sample_limit=limit, empty=empty)))
    except (PromQLError, TooManySamples) as exc:  # repr: NaN equals NaN, -0.0 differs from 0.0
        return repr(("error", type(exc).__name__, str(exc), getattr(exc, "kind", None)))


QUERIES = [
    'missing or up',
    'up or missing',
    'missing or missing_too',
    'up unless missing',
    'missing unless up',
    'missing and missing_too',
    'label_replace(label_replace(missing, "model", "$1", "name", "(.+)"), "name", "", "name", ".*")',
    'up or label_replace(missing, "model", "$1", "name", "(.+)")',
    'label_replace(missing, "model", "$1", "name", "(.+")',
    'label_replace(missing, "1bad", "$1", "name", "(.+)")',
    'sum without (is_streaming) (label_replace(missing, "a", "$1", "b", "(.+)")) or up',
    'sum(missing) or vector(1)',
    'count_values("bad label", missing)',
    'count_values("value", missing)',
    'topk(2, missing) or topk(1, up)',
    'quantile(0.5, missing)',
    'rate(missing[5m]) or rate(req_total[5m])',
    'quantile_over_time(0.9, missing[5m])',
    'predict_linear(missing[5m], 3600) > 0',
    'histogram_quantile(0.9, sum by (le) (rate(missing_bucket[5m])))',
    'absent(missing)',
    'absent(missing{job="x"}) or absent(up)',
    'absent_over_time(missing[5m])',
    'timestamp(missing) or timestamp(up)',
    'timestamp((missing))',
    'timestamp(sum(missing))',
    'missing > 1 + 2',
    '(1 + 2) * missing',
    '-missing',
    'clamp(missing, 0, 1) or clamp_min(up, 2)',
    'missing / on(job) group_left up',
    'up / on(job) group_left missing',
    'max_over_time(missing[5m:1m]) or up',
    'sum_over_time((missing or up)[2m:30s])',
    'scalar(missing) + 1',
    'missing + scalar(up)',
    'round(missing, 5) or sort_desc(up)',
    'label_join(missing, "x", "-", "a", "b") or up',
    'hour(missing)',
]


@pytest.mark.parametrize("query", QUERIES)
def test_marked_evaluation_gives_what_full_evaluation_gives(query: str) -> None:
    store = _store()
    for limit in [*range(0, 10), None]:
        assert _outcome(query, store, limit, True) == _outcome(query, store, limit, False), limit


def test_what_is_marked() -> None:
    store = _store()

    def marks(query: str) -> list[str]:
        """The marked nodes, by type."""
        expr = parse_query(query).expr
        found = empty_nodes(expr, lambda vs: not list(store.select(vs.matchers)))
        return [type(node).__name__ for node in walk(expr) if id(node) in found]

    chain = parse_query('up or label_replace(label_replace(missing, "a", "$1", "b", "(.+)"), "b", "", "b", ".*")')
    found = empty_nodes(chain.expr, lambda vs: not list(store.select(vs.matchers)))
    # The outer label_replace only; 4 strings held at once (the inner call's are freed before the outer's).
    assert found == {id(chain.expr.rhs): 4}
    assert marks("up") == []
    # An invalid regular expression or label name raises even over nothing: only the selector is marked.
    assert marks('label_replace(missing, "a", "$1", "b", "(.+")') == ["VectorSelector"]
    assert marks('count_values("bad label", missing)') == ["VectorSelector"]
    assert marks('count_values("value", missing)') == ["Aggregate"]
    whole = parse_query("rate(missing[5m])")
    assert empty_nodes(whole.expr, lambda vs: True) == {id(whole.expr): 0}
    assert marks("absent(missing)") == ["VectorSelector"]  # never absent() itself
    assert marks("sum_over_time(missing[5m:1m])") == []  # nothing inside a subquery


def test_marks_follow_the_store() -> None:
    store = _store()
    expr = parse_query("up or later").expr
    nodes = EmptyNodes(expr)
    select = lambda s, matchers: list(s.select(matchers))  # noqa: E731
    first = nodes.current(store, select)
    assert first is not None and list(first) == [id(expr.rhs)]
    assert nodes.current(store, select) is first  # the series set did not change
    store.ingest("c", [Sample(make_labels({"__name__": "later"}), 1.0)], T0 + 60_000)
    assert nodes.current(store, select) is None  # now every selector matches


def test_every_default_rule_gives_the_same_with_marks() -> None:
    """The default pack over one vLLM engine's real series: no SGLang series, many empty branches."""
    store = Store(retention_ms=3_600_000)
    text = (ROOT / "tests" / "fixtures" / "engines" / "vllm-v1-full.txt").read_text()
    samples = [Sample(make_labels({**dict(labels), "job": "vllm", "instance": "e:1"}), value)
               for labels, value, _ in parse_exposition(text)]
    for step in range(3):
        store.ingest("engine", [Sample(s.labels, s.value + step) for s in samples], T0 + step * 5_000)
    ruleset = load_rule_files([str(ROOT / "rules" / "*.yaml")])
    marked = 0
    for group in ruleset.groups:
        for rule in group.rules:
            expr = as_rule_manager_runs_it(rule.query.expr)
            empty = empty_nodes(expr, lambda vs: not list(store.select(vs.matchers)))
            marked += bool(empty)
            for limit in (None, 3, 50):
                outcomes = []
                for marks in (empty, None):
                    try:
                        outcomes.append(evaluate_expr(expr, store, T0 + 10_000, sample_limit=limit, empty=marks))
                    except (PromQLError, TooManySamples) as exc:
                        outcomes.append((type(exc).__name__, str(exc)))
                assert repr(outcomes[0]) == repr(outcomes[1]), (rule.name, limit)
    assert marked > 50  # the SGLang alternatives of the canonical rules, at least


def test_selectors_inside_subqueries_are_not_consulted() -> None:
    expr = parse_query("up or max_over_time(missing[5m:1m])").expr
    assert [vs.name for vs in EmptyNodes(expr).selectors if isinstance(vs, VectorSelector)] == ["up"]

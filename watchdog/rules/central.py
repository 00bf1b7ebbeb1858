"""The node's rule set translated for a central Prometheus that scrapes many agents (``rules render
--target central``). Pure: a :class:`RuleSet` in, rule-file groups and what was changed or left out.

On the node every series belongs to this node and is read every tick (1 s). A central Prometheus holds
every node's series, read every scrape interval (15-30 s). So, rule by rule:

1. **Node identity.** An aggregation ``by (...)`` over node series, and a join ``on (...)`` between two
   sides that both carry node series, gets the node label (``--node-label``, default ``node``) added:
   ``sum(rate(watchdog_host_cpu_seconds_total[2m]))`` would otherwise add up the whole fleet, ``on ()``
   would pair one node's GPUs with another's driver state, and an alert would lose which node it is
   about. Sides built from ``vector()`` or ``absent()`` carry no node (the SLO objectives: one per
   ``job`` for the whole fleet) and are left alone, as is a join already on ``uuid`` (a GPU's UUID is
   unique in the world). With ``instance`` as the node label, a join between the agent's own series
   (``instance`` = the agent's address) and an engine's (``honor_labels: true`` keeps the engine's
   ``instance``) cannot be made per node: such a rule is left out. The agent's own series gain the
   agent's ``job``/``instance`` at the central scrape, so a match on all labels between one of them and
   an aggregation ``by (G)`` becomes ``on (G)``; a rule that falls back to ``vector()`` where a series
   is missing is left out (centrally the fallback names no node).
2. **The engines' ``up``.** The agent stores ``up`` for each engine it scrapes but never exports it
   (it would collide with Prometheus' own); centrally ``up`` is every target of every job, so
   ``EngineDown`` would page for any of them. It reads ``watchdog_engine_up``, the agent's export of
   the same value with the engine's ``job``/``instance``.
3. **Sampling.** A range window shorter than four scrape intervals holds too few samples for
   ``rate``/``deriv``/``*_over_time`` to mean what the rule says (Prometheus' own advice for ``rate``):
   the rule is left out. So is every rule that reads a series such a rule records (a partial recording
   would silently change its meaning). A ``for:`` hold shorter than two scrape intervals is lengthened
   to two, so one sample cannot fire a held alert; a group ``interval:`` shorter than the scrape
   interval is dropped (the server's ``evaluation_interval`` applies).

Each change and each left-out rule comes back with its reason, for the comment header and stderr.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from watchdog.promql import nodes as n
from watchdog.rules.durations import format_duration
from watchdog.rules.loader import AlertingRule, RecordingRule, RuleSet, rule_to_dict
from watchdog.rules.unparse import to_promql

DEFAULT_NODE_LABEL = "node"
DEFAULT_SCRAPE_INTERVAL_MS = 15_000
MIN_WINDOW_SCRAPES = 4
MIN_FOR_SCRAPES = 2
ENGINE_SERIES_PREFIXES = ("vllm:", "sglang:", "engine:", "tp:", "watchdog_engine_")
"""Series about one engine endpoint: they carry the engine's ``job`` and ``instance``."""
ENGINE_SERIES_NAMES = frozenset({"up", "http_requests_total"})
NO_NODE_FUNCTIONS = frozenset({"vector", "absent", "absent_over_time", "time", "scalar", "pi"})
UNIQUE_JOIN_LABELS = frozenset({"uuid"})

AGENT, ENGINE = "agent", "engine"


@dataclasses.dataclass(frozen=True)
class CentralOptions:
    """How the central Prometheus labels and samples the agents' series."""

    node_label: str = DEFAULT_NODE_LABEL
    scrape_interval_ms: int = DEFAULT_SCRAPE_INTERVAL_MS


@dataclasses.dataclass(frozen=True)
class RuleNote:
    """One rule changed or left out, and why."""

    group: str
    rule: str
    index: int
    reason: str

    def line(self) -> str:
        """``group "G", rule N "NAME": reason``."""
        return f'group "{self.group}", rule {self.index} "{self.rule}": {self.reason}'


@dataclasses.dataclass(frozen=True)
class CentralRules:
    """The translated groups (rule-file shape), and what was changed and left out."""

    groups: tuple[dict[str, Any], ...]
    changed: tuple[RuleNote, ...]
    left_out: tuple[RuleNote, ...]


class _Untranslatable(Exception):
    """A rule that cannot be made to mean the same centrally; the message says why."""


class _Translator:
    """Rewrites one rule set's expressions; knows which recorded names carry node or engine series."""

    def __init__(self, ruleset: RuleSet, options: CentralOptions) -> None:
        self.options = options
        self.recordings: dict[str, list[n.Expr]] = {}
        for group in ruleset.groups:
            for rule in group.rules:
                if isinstance(rule, RecordingRule):
                    self.recordings.setdefault(rule.record, []).append(rule.query.expr)
        self._scopes: dict[str, frozenset[str]] = {}

    # -- which series an expression's result is made of ------------------------------------------

    def _name_scope(self, name: str) -> frozenset[str]:
        if name in self._scopes:
            return self._scopes[name]
        if name in self.recordings:
            self._scopes[name] = frozenset()  # a recursion guard; recordings do not read themselves
            scope = frozenset().union(*(self._recorded_scope(expr) for expr in self.recordings[name]))
        elif name in ENGINE_SERIES_NAMES or name.startswith(ENGINE_SERIES_PREFIXES):
            scope = frozenset({ENGINE})
        else:
            scope = frozenset({AGENT})
        self._scopes[name] = scope
        return scope

    def _recorded_scope(self, expr: n.Expr) -> frozenset[str]:
        try:
            return self.scope(self.rewrite(expr))
        except _Untranslatable:
            return frozenset()  # left out, and so is every rule that reads it

    def scope(self, expr: n.Expr) -> frozenset[str]:
        """Whose series a rewritten expression's result holds (``{"agent", "engine"}``); empty when it
        carries no node."""
        if isinstance(expr, n.VectorSelector):
            return self._name_scope(expr.name) if expr.name else frozenset({AGENT})
        if isinstance(expr, n.MatrixSelector):
            return self.scope(expr.selector)
        if isinstance(expr, (n.Subquery, n.Paren, n.Negate)):
            return self.scope(expr.expr)
        if isinstance(expr, n.Call):
            if expr.name in NO_NODE_FUNCTIONS:
                return frozenset()
            return frozenset().union(*(self.scope(arg) for arg in expr.args))
        if isinstance(expr, n.Aggregate):
            label = self.options.node_label
            keeps = label not in expr.grouping if expr.without else label in expr.grouping
            return self.scope(expr.expr) if keeps else frozenset()
        if isinstance(expr, n.Binary):
            if expr.op == "or":
                return self.scope(expr.lhs) | self.scope(expr.rhs)
            if expr.matching is not None and expr.matching.card == n.CARD_ONE_TO_MANY:
                return self.scope(expr.rhs)
            if expr.lhs.type == n.SCALAR:
                return self.scope(expr.rhs)
            return self.scope(expr.lhs)
        return frozenset()

    # -- the rewrite -------------------------------------------------------------------------------

    def rewrite(self, expr: n.Expr) -> n.Expr:
        """``expr`` with the node label added and ``up`` renamed (rules 1 and 2 of the module docstring);
        raises :class:`_Untranslatable`."""
        label = self.options.node_label
        if isinstance(expr, n.VectorSelector):
            return _engine_up(expr)
        if isinstance(expr, n.MatrixSelector):
            return replace(expr, selector=_engine_up(expr.selector))
        if isinstance(expr, (n.Subquery, n.Paren, n.Negate)):
            return replace(expr, expr=self.rewrite(expr.expr))
        if isinstance(expr, n.Call):
            return replace(expr, args=tuple(self.rewrite(arg) for arg in expr.args))
        if isinstance(expr, n.Aggregate):
            inner = self.rewrite(expr.expr)
            param = self.rewrite(expr.param) if expr.param is not None else None
            grouping = expr.grouping
            if not expr.without and label not in grouping and self.scope(inner):
                grouping = tuple(sorted({*grouping, label}))
            return replace(expr, expr=inner, param=param, grouping=grouping)
        if isinstance(expr, n.Binary):
            lhs, rhs = self.rewrite(expr.lhs), self.rewrite(expr.rhs)
            matching = expr.matching
            if (matching is not None and matching.on and label not in matching.labels
                    and not UNIQUE_JOIN_LABELS & set(matching.labels)):
                left, right = self.scope(lhs), self.scope(rhs)
                if left and right:
                    if label == "instance" and left != right:
                        raise _Untranslatable(
                            "joins the agent's own series with an engine's on the node; with instance "
                            "labelling the two carry different instances (honor_labels keeps the "
                            "engine's), so the join cannot be made per node: give every target a node "
                            "label and render with --node-label node")
                    matching = replace(matching, labels=(*matching.labels, label))
            if matching is not None and not matching.on and not matching.labels:
                matching = self._implicit_match(lhs, rhs, matching)
            return replace(expr, lhs=lhs, rhs=rhs, matching=matching)
        return expr

    def _implicit_match(self, lhs: n.Expr, rhs: n.Expr, matching: n.VectorMatching) -> n.VectorMatching:
        """A match on all labels between rewritten sides (rule 1 of the module docstring, continued). The
        agent's own series gain the agent's ``job`` and ``instance`` at the central scrape, so an
        aggregation ``by (G)`` no longer matches them on all labels: the match becomes ``on (G)``. A side
        that falls back to ``vector()`` where a series is missing cannot say which node lacks it."""
        left, right = _shape(lhs), _shape(rhs)
        if (CONSTANT in left or CONSTANT in right) and (self.scope(lhs) or self.scope(rhs)):
            raise _Untranslatable(
                "falls back to vector() where a series is missing; centrally that fallback carries no "
                "node, so which node lacks the series cannot be told")
        for grouped, other, raw in ((left, rhs, right), (right, lhs, left)):
            if len(grouped) == 1 and isinstance(next(iter(grouped)), tuple) and raw == {RAW} \
                    and AGENT in self.scope(other):
                (grouping,) = grouped
                return replace(matching, on=True, labels=tuple(grouping))  # type: ignore[arg-type]
        return matching

    def short_window(self, expr: n.Expr) -> str:
        """Why ``expr`` needs the agent's sampling ("" when a central Prometheus samples often enough)."""
        least = MIN_WINDOW_SCRAPES * self.options.scrape_interval_ms
        for node in n.walk(expr):
            if isinstance(node, (n.MatrixSelector, n.Subquery)) and node.range_ms < least:
                return (f"a {format_duration(node.range_ms)} window holds fewer than {MIN_WINDOW_SCRAPES} "
                        f"samples at a {format_duration(self.options.scrape_interval_ms)} scrape interval; "
                        "the agent evaluates it on its 1 s samples")
        return ""


CONSTANT, RAW = "constant", "raw"


def _shape(expr: n.Expr) -> set[object]:
    """What label sets a rewritten vector expression yields, as far as matching cares: the grouping of an
    aggregation ``by``, :data:`CONSTANT` for ``vector()``/``absent()``, else :data:`RAW` (the series' own)."""
    expr = n.unwrap_parens(expr)
    if isinstance(expr, n.Aggregate) and not expr.without:
        return {expr.grouping}
    if isinstance(expr, n.Call) and expr.name in NO_NODE_FUNCTIONS:
        return {CONSTANT}
    if isinstance(expr, n.Binary):
        if expr.op == "or":
            return _shape(expr.lhs) | _shape(expr.rhs)
        if expr.matching is None:  # vector and scalar
            return _shape(expr.rhs if expr.lhs.type == n.SCALAR else expr.lhs)
        if expr.op in ("and", "unless") or expr.matching.card != n.CARD_ONE_TO_MANY:
            return _shape(expr.lhs)
        return _shape(expr.rhs)
    return {RAW}


def _engine_up(vs: n.VectorSelector) -> n.VectorSelector:
    """``up`` (the agent's copy of each engine's) as ``watchdog_engine_up``; other selectors unchanged."""
    if vs.name != "up":
        return vs
    matchers = tuple(("__name__", "=", "watchdog_engine_up") if m == ("__name__", "=", "up") else m
                     for m in vs.matchers)
    return replace(vs, name="watchdog_engine_up", matchers=matchers)


def _reads(expr: n.Expr) -> set[str]:
    return {node.name for node in n.walk(expr) if isinstance(node, n.VectorSelector) and node.name}


def translate_for_central(ruleset: RuleSet, options: CentralOptions = CentralOptions(),
                          runbook_url: Callable[[str], str] | None = None) -> CentralRules:
    """``ruleset`` for a central Prometheus (see the module docstring). ``runbook_url(runbook_id)``, when
    given, is what every alert's ``runbook_url`` annotation is set to (unless the rule sets its own)."""
    translator = _Translator(ruleset, options)
    changed: list[RuleNote] = []
    out_reasons: dict[tuple[int, int], str] = {}
    exprs: dict[tuple[int, int], n.Expr] = {}
    for gi, group in enumerate(ruleset.groups):
        for ri, rule in enumerate(group.rules):
            reason = translator.short_window(rule.query.expr)
            if not reason:
                try:
                    exprs[gi, ri] = translator.rewrite(rule.query.expr)
                except _Untranslatable as exc:
                    reason = str(exc)
            if reason:
                out_reasons[gi, ri] = reason
    # A rule that reads a name some left-out rule records is left out too, until nothing changes.
    while True:
        lost = {ruleset.groups[gi].rules[ri].name: (gi, ri) for gi, ri in out_reasons
                if isinstance(ruleset.groups[gi].rules[ri], RecordingRule)}
        added = False
        for gi, group in enumerate(ruleset.groups):
            for ri, rule in enumerate(group.rules):
                if (gi, ri) in out_reasons:
                    continue
                missing = sorted(_reads(rule.query.expr) & lost.keys())
                if missing:
                    out_reasons[gi, ri] = f"reads {missing[0]}, whose recording is left out"
                    added = True
        if not added:
            break
    groups: list[dict[str, Any]] = []
    left_out: list[RuleNote] = []
    least_for = MIN_FOR_SCRAPES * options.scrape_interval_ms
    for gi, group in enumerate(ruleset.groups):
        rules: list[dict[str, Any]] = []
        for ri, rule in enumerate(group.rules):
            note = RuleNote(group.name, rule.name, ri + 1, "")
            if (gi, ri) in out_reasons:
                left_out.append(replace(note, reason=out_reasons[gi, ri]))
                continue
            out = rule_to_dict(rule)
            expr = exprs[gi, ri]
            if expr != rule.query.expr:
                out["expr"] = to_promql(expr)
                changed.append(replace(note, reason="node label or up rewritten: " + out["expr"]))
            if isinstance(rule, AlertingRule) and 0 < rule.for_ms < least_for:
                out["for"] = format_duration(least_for)
                changed.append(replace(note, reason=f"for: {format_duration(rule.for_ms)} lengthened to "
                                                    f"{out['for']} (two scrape intervals)"))
            rules.append(with_runbook_url(out, runbook_url))
        if not rules:
            continue
        doc: dict[str, Any] = {"name": group.name}
        if group.interval_ms and group.interval_ms >= options.scrape_interval_ms:
            doc["interval"] = format_duration(group.interval_ms)
        if group.limit:
            doc["limit"] = group.limit
        doc["rules"] = rules
        groups.append(doc)
    return CentralRules(tuple(groups), tuple(changed), tuple(left_out))


def with_runbook_url(rule: dict[str, Any], runbook_url: Callable[[str], str] | None) -> dict[str, Any]:
    """``rule`` (rule-file shape) with ``runbook_url: runbook_url(<its runbook annotation>)`` added, unless
    it sets its own, names no runbook, or the URL is empty."""
    annotations = rule.get("annotations")
    if runbook_url is None or not annotations or "runbook_url" in annotations or not annotations.get("runbook"):
        return rule
    url = runbook_url(str(annotations["runbook"]))
    if url:
        rule["annotations"] = {**annotations, "runbook_url": url}
    return rule

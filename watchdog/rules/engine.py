"""Evaluate a rule set against the store, tick by tick, like Prometheus' rule manager.

Contract:
- :meth:`RuleEngine.evaluate` runs groups in order and rules in order at ``t_ms``. A recording rule's
  output is written into the store at once (so later rules in the same tick see it) under the source
  ``rules:<group>/<index>``; series it stops producing get a staleness marker, as in Prometheus.
  Alerting rules go through :class:`watchdog.rules.alerting.AlertingRuleState`; their ``ALERTS`` and
  ``ALERTS_FOR_STATE`` series are written the same way.
- A rule that fails (evaluation error, non-vector result, duplicate label sets) is logged and counted
  in ``watchdog_rule_evaluation_failures_total{rule_group, reason}``; the tick goes on with the next rule
  and the failed rule's previous output is left to age out, as in Prometheus. ``reason`` is ``error``,
  ``timeout`` (the rule used more than ``rule_timeout_s`` of CPU time, its time budget per evaluation,
  and was stopped; time spent waiting for a core on a busy host does not count),
  ``samples`` (it would have held more than ``sample_limit`` samples in memory at once, Prometheus'
  ``--query.max-samples``, and was stopped), ``quota`` or ``internal`` (a bug of ours).
- With ``honour_group_intervals`` (the agent), a group with its own ``interval:`` is evaluated only when
  that interval, less ``group_interval_slack_ms``, has passed since its last evaluation (the agent passes
  half a tick, so that tick-time jitter does not push a 5 s group to 6 s; its alerts' ``for`` holds are
  met within the same slack, so that jitter does not cost them a whole interval either); otherwise
  (promtool's unit tests, which ignore group intervals) every group runs at every ``evaluate`` call.
- ``lane`` (the agent) evaluates only the groups of one :class:`~watchdog.rules.lanes.Lane` (the fault
  path every tick, engine groups when new engine data arrived); without it every group runs. With a
  ``deadline`` (``time.monotonic()``), a lane stops between groups once it has passed and the groups not
  yet evaluated are :meth:`RuleEngine.pending`: the next call for that lane starts with them. A group is
  never cut in the middle, so its rules always see each other's output of the same evaluation.
- The returned alerts are every pending, firing and recently resolved alert of every rule.
- :meth:`RuleEngine.export_state` and ``restored_state=`` carry alert state (active_at, fired_at, ...)
  across restarts; restored alerts resume where they were (a firing alert keeps its ``fired_at``).
Evaluation is pure apart from the store and the injected ``clock`` (for durations only).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.model import METRIC_NAME, Alert, Labels, Sample, make_labels
from watchdog.promql import CpuBudget, EvalOptions, PromQLError, TooManySamples, evaluate, parse_query
from watchdog.promql.cache import CounterIndex, EvalCache, Selections, SharedPlan
from watchdog.promql.engine import DEFAULT_SUBQUERY_STEP_MS, evaluate_expr
from watchdog.promql.nodes import SCALAR, VECTOR
from watchdog.rules.alerting import AlertEvaluationError, AlertingRuleState, Candidate
from watchdog.rules.lanes import Lane, classify_groups
from watchdog.rules.loader import AlertingRule, RecordingRule, RuleGroup, RuleSet
from watchdog.rules.templates import TemplateContext, expand
from watchdog.store import SeriesQuotaExceeded, Store

log = logging.getLogger("watchdog.rules")

DEFAULT_LOOKBACK_MS = 300_000


class RuleEvaluationError(Exception):
    """One rule failed at one evaluation (the message is Prometheus' where one exists)."""


@dataclass
class GroupStats:
    """Self-metrics of one rule group."""

    name: str
    rules: int
    evaluations_total: int = 0
    failures_total: int = 0
    failures_by_reason: dict[str, int] = field(
        default_factory=lambda: {"error": 0, "timeout": 0, "samples": 0})
    last_duration_seconds: float = 0.0
    last_evaluation_ms: int | None = None


@dataclass
class RuleFailure:
    """The most recent failure of one rule (``rule`` is its name, ``index`` its position)."""

    group: str
    rule: str
    index: int
    t_ms: int
    error: str
    reason: str = "error"
    """As in ``watchdog_rule_evaluation_failures_total``: ``timeout`` and ``samples`` are the budget's."""


@dataclass(frozen=True)
class RuleStatus:
    """One rule as the query API's ``/api/v1/rules`` shows it."""

    rule: AlertingRule | RecordingRule
    alerts: tuple[Alert, ...]
    last_error: str | None


@dataclass(frozen=True)
class GroupStatus:
    """One group with its self-metrics and its rules' status."""

    group: RuleGroup
    stats: GroupStats
    rules: tuple[RuleStatus, ...]


@dataclass
class _GroupRuntime:
    group: RuleGroup
    key: str
    lane: Lane
    alert_states: dict[int, AlertingRuleState] = field(default_factory=dict)
    plans: list[_RulePlan] = field(default_factory=list)


OUTPUT_MEMO_SLACK = 1024
"""A recording rule's memo of output label sets is cleared once it holds this many more entries than
twice the rule's last result (label churn cannot grow it without bound)."""


class _RulePlan:
    """What a rule's evaluation needs that does not change between evaluations, resolved once: its
    query as the rule manager runs it, its store source, the names it writes, and (recording rules) a
    memo from each result label set to the label set it is written under."""

    __slots__ = ("expr", "extra_labels", "last", "outputs", "record", "source", "stored", "written")

    def __init__(self, rule: AlertingRule | RecordingRule, expr: Any, source: str) -> None:
        self.expr = expr
        self.source = source
        self.written = _written_names(rule)
        self.record = rule.record if isinstance(rule, RecordingRule) else ""
        self.extra_labels = dict(rule.labels) if isinstance(rule, RecordingRule) else {}
        self.outputs: dict[Labels, Labels] = {}
        self.last: tuple[list[Labels], list[Labels]] | None = None
        """The last result's label sets and the (distinct) label sets they were written under."""
        self.stored = -1
        """Series the last store ingest of this rule's output kept (-1: none yet)."""

    def output_labels(self, labels: Labels) -> Labels:
        """The label set a recording rule writes the result ``labels`` under (memoised)."""
        found = self.outputs.get(labels)
        if found is None:
            found = make_labels({**dict(labels), METRIC_NAME: self.record, **self.extra_labels})
            self.outputs[labels] = found
        return found


def _raw_vector(expr: Any, raw: Any) -> list[tuple[Labels, float]]:
    """The evaluator's internal result of ``expr`` as (labels, value) pairs, as :func:`vector_of` gives
    them for the public result: a scalar becomes one sample with no labels; matrix and string results
    raise :class:`RuleEvaluationError`."""
    kind = expr.type
    if kind == VECTOR:
        return raw
    if kind == SCALAR:
        return [((), float(raw))]
    raise RuleEvaluationError("rule result is not a vector or scalar")


def vector_of(value: Any) -> list[tuple[Labels, float]]:
    """A query result as (labels, value) pairs; a scalar becomes one sample with no labels.

    Raises :class:`RuleEvaluationError` for matrix and string results, as Prometheus does.
    """
    from watchdog.promql import MatrixList, Scalar, VectorSample

    if isinstance(value, Scalar):
        return [((), value.value)]
    if isinstance(value, list) and not isinstance(value, MatrixList) and all(
            isinstance(s, VectorSample) for s in value):
        return [(s.labels, s.value) for s in value]
    raise RuleEvaluationError("rule result is not a vector or scalar")


def _written_names(rule: AlertingRule | RecordingRule) -> tuple[str, ...]:
    """The metric names a rule's output series have."""
    if isinstance(rule, RecordingRule):
        return (rule.record,)
    return ("ALERTS", "ALERTS_FOR_STATE")


class RuleEngine:
    """Evaluates a :class:`RuleSet` against a store; see the module docstring for the contract."""

    def __init__(
        self,
        ruleset: RuleSet,
        store: Store,
        external_labels: Mapping[str, str] | None = None,
        *,
        restored_state: Iterable[Mapping[str, Any]] | None = None,
        external_url: str | None = None,
        lookback_ms: int = DEFAULT_LOOKBACK_MS,
        subquery_step_ms: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        logger: logging.Logger | None = None,
        rule_timeout_s: float | None = None,
        honour_group_intervals: bool = False,
        group_interval_slack_ms: int = 0,
        max_samples: int | None = None,
        sample_limit: int | None = None,
    ) -> None:
        self.ruleset = ruleset
        self.store = store
        self.external_labels = dict(external_labels or {})
        self.external_url = external_url
        self.lookback_ms = lookback_ms
        self.subquery_step_ms = DEFAULT_SUBQUERY_STEP_MS if subquery_step_ms is None else subquery_step_ms
        self.clock = clock
        self.log = logger or log
        self.rule_timeout_s = rule_timeout_s
        self.honour_group_intervals = honour_group_intervals
        self.group_interval_slack_ms = group_interval_slack_ms
        self.max_samples = max_samples
        self.sample_limit = sample_limit
        self._deadline: CpuBudget | None = None  # the current rule's time budget
        self._plan: SharedPlan | None = None
        self._counters = CounterIndex()
        self._selections = Selections()
        self._cache: EvalCache | None = None  # the current pass's (None between passes)
        self._rule_queries: dict[int, Any] = {}
        self.last_failures: dict[tuple[str, int], RuleFailure] = {}
        names = [g.name for g in ruleset.groups]
        self._groups: list[_GroupRuntime] = []
        self._resume: dict[Lane, int] = {}  # lane -> position in its group list where a deferred pass resumes
        for group, lane in zip(ruleset.groups, classify_groups(ruleset.groups), strict=True):
            key = group.name if names.count(group.name) == 1 else f"{group.file}:{group.name}"
            runtime = _GroupRuntime(group, key, lane)
            # A group on its own interval meets its holds within the same slack, or one jittered tick
            # would cost the alert a whole interval.
            hold_slack = group_interval_slack_ms if honour_group_intervals and group.interval_ms else 0
            for index, rule in enumerate(group.rules):
                runtime.plans.append(_RulePlan(rule, self._rule_query(rule).expr, self._source(runtime, index)))
                if isinstance(rule, AlertingRule):
                    for_ms = max(rule.for_ms - hold_slack, 1) if rule.for_ms else 0
                    runtime.alert_states[index] = AlertingRuleState(
                        rule.alert, rule.labels, for_ms, rule.keep_firing_for_ms, group.name, rule.expr)
            self._groups.append(runtime)
        self.stats: dict[str, GroupStats] = {
            rt.key: GroupStats(rt.group.name, len(rt.group.rules)) for rt in self._groups}
        self._self_labels: dict[tuple[str, str, str], Labels] = {}  # (name, group, reason) -> label set
        self._alert_states = [rt.alert_states[index] for rt in self._groups for index in sorted(rt.alert_states)]
        """Every alerting rule's state, in rule order (what :meth:`alerts` and :meth:`export_state` walk)."""
        if restored_state:
            self._restore(restored_state)

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, t_ms: int, lane: Lane | None = None, *, deadline: float | None = None) -> list[Alert]:
        """Evaluate every group (of ``lane``) in order at ``t_ms``, stopping between groups past
        ``deadline``; returns every held alert."""
        self._cache = self._pass_cache()
        try:
            if lane is None:
                for runtime in self._groups:
                    self._evaluate_group(runtime, t_ms)
                return self.alerts()
            runtimes = [rt for rt in self._groups if rt.lane is lane]
            start = self._resume.pop(lane, 0)
            for position in range(start, len(runtimes)):
                if deadline is not None and position > start and time.monotonic() > deadline:
                    self._resume[lane] = position
                    break
                self._evaluate_group(runtimes[position], t_ms)
            return self.alerts()
        finally:
            if self._cache is not None:
                self._selections.end(self.store)
            self._cache = None

    def _pass_cache(self) -> EvalCache | None:
        """The cache one evaluation pass shares between its rules (:mod:`watchdog.promql.cache`: the results
        are the plain evaluator's; a subclass returning None evaluates each rule on its own, for tests)."""
        if self._plan is None:
            self._plan = SharedPlan(self._rule_query(rule).expr for rt in self._groups for rule in rt.group.rules)
        self._selections.begin(self.store)
        return EvalCache(self._plan, self._counters, self._selections)

    def pending(self, lane: Lane) -> bool:
        """True when a pass over ``lane`` was cut short by its deadline and has groups left."""
        return lane in self._resume

    def lanes(self) -> dict[str, Lane]:
        """Each group's lane, by group key."""
        return {rt.key: rt.lane for rt in self._groups}

    def alerts(self) -> list[Alert]:
        """Every pending, firing and recently resolved alert, in rule order."""
        out: list[Alert] = []
        for state in self._alert_states:
            if state.active:
                out.extend(state.alerts())
        return out

    def failures_at(self, t_ms: int) -> list[RuleFailure]:
        """Rules whose most recent evaluation, at ``t_ms``, failed (group order, then rule order)."""
        out: list[RuleFailure] = []
        for runtime in self._groups:
            for index in range(len(runtime.group.rules)):
                failure = self.last_failures.get((runtime.key, index))
                if failure is not None and failure.t_ms == t_ms:
                    out.append(failure)
        return out

    def status(self) -> list[GroupStatus]:
        """Every group and rule with its held alerts and most recent error (None when it last
        succeeded), in evaluation order."""
        out: list[GroupStatus] = []
        for runtime in self._groups:
            rules: list[RuleStatus] = []
            for index, rule in enumerate(runtime.group.rules):
                state = runtime.alert_states.get(index)
                failure = self.last_failures.get((runtime.key, index))
                rules.append(RuleStatus(rule, tuple(state.alerts()) if state else (),
                                        failure.error if failure else None))
            out.append(GroupStatus(runtime.group, self.stats[runtime.key], tuple(rules)))
        return out

    def rule_alerts(self, alertname: str) -> list[Alert]:
        """The alerts of every alerting rule named ``alertname`` (any group)."""
        return [a for a in self.alerts() if a.name == alertname]

    def _due(self, runtime: _GroupRuntime, t_ms: int) -> bool:
        """Whether the group runs at ``t_ms`` (its own ``interval:`` honoured when asked to)."""
        interval = runtime.group.interval_ms
        last = self.stats[runtime.key].last_evaluation_ms
        if not self.honour_group_intervals or not interval or last is None:
            return True
        return t_ms - last >= interval - self.group_interval_slack_ms or t_ms < last

    def _evaluate_group(self, runtime: _GroupRuntime, t_ms: int) -> None:
        if not self._due(runtime, t_ms):
            return
        started = self.clock()
        stats = self.stats[runtime.key]
        plans = runtime.plans
        for index, rule in enumerate(runtime.group.rules):
            plan = plans[index]
            self._deadline = None if self.rule_timeout_s is None else CpuBudget(self.rule_timeout_s)
            try:
                samples = self._evaluate_rule(runtime, index, rule, t_ms)
            except TooManySamples as exc:
                self._record_failure(runtime, index, rule, t_ms, str(exc), "samples")
                continue
            except (RuleEvaluationError, AlertEvaluationError, PromQLError) as exc:
                timed_out = isinstance(exc, PromQLError) and exc.kind == "timeout"
                self._record_failure(runtime, index, rule, t_ms, str(exc), "timeout" if timed_out else "error")
                continue
            except Exception as exc:  # a bug in evaluation must not stop the tick: count it, log it
                self.log.exception("rule evaluation crashed", extra={"rule_group": runtime.group.name,
                                                                "rule": rule.name})
                self._record_failure(runtime, index, rule, t_ms, f"{type(exc).__name__}: {exc}", "internal")
                continue
            finally:
                self._deadline = None
            if samples or plan.stored != 0:  # an empty result after an empty one changes nothing
                generation = self.store.generation
                try:
                    plan.stored = -1
                    plan.stored = self.store.ingest(plan.source, samples, t_ms)
                except SeriesQuotaExceeded as exc:  # a rule whose output would crowd out the others
                    self._record_failure(runtime, index, rule, t_ms, exc.reason, "quota")
                    continue
                finally:
                    if self._cache is not None:
                        changed = generation != self.store.generation
                        for name in plan.written:
                            self._cache.wrote(name, changed)
            if self.last_failures:
                self.last_failures.pop((runtime.key, index), None)
        stats.evaluations_total += 1
        stats.last_duration_seconds = max(self.clock() - started, 0.0)
        stats.last_evaluation_ms = t_ms

    def _record_failure(self, runtime: _GroupRuntime, index: int, rule: Any, t_ms: int, error: str,
                        reason: str) -> None:
        stats = self.stats[runtime.key]
        stats.failures_total += 1
        stats.failures_by_reason[reason] = stats.failures_by_reason.get(reason, 0) + 1
        if reason == "timeout":  # kept in the failure too: `rules eval` and `rules test` print it
            error = f"{error}: stopped after the rule time budget of {self.rule_timeout_s:g}s"
        self.last_failures[(runtime.key, index)] = RuleFailure(runtime.group.name, rule.name, index, t_ms,
                                                               error, reason)
        if reason == "samples":
            error = f"{error}: stopped at the rule sample limit of {self.sample_limit}"
        self.log.warning("rule evaluation failed", extra={
            "file": runtime.group.file, "rule_group": runtime.group.name, "rule": rule.name, "index": index,
            "t_ms": t_ms, "reason": reason, "error": error})

    @staticmethod
    def _source(runtime: _GroupRuntime, index: int) -> str:
        return f"rules:{runtime.key}/{index}"

    def _rule_query(self, rule: AlertingRule | RecordingRule) -> Any:
        """The rule's query as Prometheus' rule manager runs it (re-printed: matchers sorted)."""
        found = self._rule_queries.get(id(rule))
        if found is None:
            from watchdog.promql import Query
            from watchdog.promql.nodes import as_rule_manager_runs_it

            found = self._rule_queries[id(rule)] = Query(rule.query.text, as_rule_manager_runs_it(rule.query.expr))
        return found

    def _query(self, query: Any, t_ms: int) -> Any:
        return evaluate(query, self.store, t_ms, self._options())

    def _options(self) -> EvalOptions:
        """How the current rule is evaluated (its time budget included)."""
        return EvalOptions(self.lookback_ms, self.subquery_step_ms, self._deadline, self.max_samples,
                           self.sample_limit)

    def _evaluate_rule(self, runtime: _GroupRuntime, index: int, rule: Any, t_ms: int) -> list[Sample]:
        plan = runtime.plans[index]
        expr = plan.expr
        raw = evaluate_expr(expr, self.store, int(t_ms), self._options(), self._cache)
        vector = _raw_vector(expr, raw)
        if plan.record:
            return self._recording_samples(plan, vector)
        assert isinstance(rule, AlertingRule)
        state = runtime.alert_states[index]
        candidates = [self._candidate(rule, labels, value, t_ms) for labels, value in vector]
        return state.step(t_ms, candidates)

    @staticmethod
    def _recording_samples(plan: _RulePlan, vector: list[tuple[Labels, float]]) -> list[Sample]:
        """The samples a recording rule writes; :class:`RuleEvaluationError` when two results get the
        same label set."""
        if not vector:
            return []
        keys = [labels for labels, _ in vector]
        last = plan.last
        if last is None or last[0] != keys:  # else the same label sets as the last result: known distinct
            outputs = plan.outputs
            if len(outputs) > 2 * len(vector) + OUTPUT_MEMO_SLACK:
                outputs.clear()
            output_labels = plan.output_labels
            written = [output_labels(labels) for labels in keys]
            if len(written) > 1 and len(set(written)) != len(written):
                raise RuleEvaluationError(
                    "vector contains metrics with the same labelset after applying rule labels")
            last = plan.last = (keys, written)
        return [Sample(labels, value) for labels, (_, value) in zip(last[1], vector, strict=True)]

    def _candidate(self, rule: AlertingRule, labels: Labels, value: float, t_ms: int) -> Candidate:
        series_labels = dict(labels)
        ctx = TemplateContext(
            labels=series_labels,
            value=value,
            external_labels=self.external_labels,
            external_url=self.external_url,
            query=lambda expr: self._template_query(expr, t_ms),
        )
        out = {k: v for k, v in series_labels.items() if k != METRIC_NAME}
        for name in rule.labels:
            rendered = expand(rule.labels[name], rule.alert, ctx)
            if rendered == "":
                out.pop(name, None)
            else:
                out[name] = rendered
        out["alertname"] = rule.alert
        annotations = {name: expand(text, rule.alert, ctx) for name, text in rule.annotations.items()}
        return Candidate(out, annotations, value)

    def _template_query(self, expr: str, t_ms: int) -> list[tuple[dict[str, str], float]]:
        return [(dict(labels), value) for labels, value in vector_of(self._query(parse_query(expr), t_ms))]

    def retire(self, t_ms: int) -> None:
        """Stale-mark every series this engine wrote (call on the old engine when rules are reloaded),
        as Prometheus does for the series of removed rule groups."""
        for runtime in self._groups:
            for index in range(len(runtime.group.rules)):
                self.store.forget_source(self._source(runtime, index), t_ms)

    # ------------------------------------------------------------------ state and self-metrics

    def export_state(self) -> list[dict[str, Any]]:
        """Every held alert as plain data, for :class:`RuleEngine` ``restored_state=`` after a restart."""
        out: list[dict[str, Any]] = []
        for state in self._alert_states:
            if state.active:
                out.extend(state.export())
        return out

    def _restore(self, entries: Iterable[Mapping[str, Any]]) -> None:
        for entry in entries:
            state = self._state_for(str(entry.get("rule_group", "")), str(entry.get("alertname", "")),
                                    dict(entry.get("labels") or {}))
            if state is None:
                self.log.info("dropping restored alert of a rule that no longer exists", extra={
                    "rule_group": entry.get("rule_group"), "alertname": entry.get("alertname")})
                continue
            state.restore(entry)

    def _state_for(self, group_name: str, alertname: str,
                   labels: Mapping[str, str]) -> AlertingRuleState | None:
        fallback: AlertingRuleState | None = None
        for runtime in self._groups:
            if runtime.group.name != group_name:
                continue
            for _index, state in sorted(runtime.alert_states.items()):
                if state.name != alertname:
                    continue
                static = {k: v for k, v in state.rule_labels.items() if "{{" not in v}
                if all(labels.get(k) == v for k, v in static.items()):
                    return state
                fallback = fallback or state
        return fallback

    def self_samples(self) -> list[Sample]:
        """The engine's own series for the exporter (per group: rules, evaluations, failures,
        last duration and last evaluation time)."""
        out: list[Sample] = []
        labels = self._self_labels

        def add(name: str, group: str, value: float, reason: str = "") -> None:
            key = (name, group, reason)
            found = labels.get(key)
            if found is None:
                extra = {"reason": reason} if reason else {}
                found = labels[key] = make_labels({METRIC_NAME: name, "rule_group": group, **extra})
            out.append(Sample(found, value))

        for stats in self.stats.values():
            last = math.nan if stats.last_evaluation_ms is None else stats.last_evaluation_ms / 1000.0
            add("watchdog_rule_group_rules", stats.name, float(stats.rules))
            add("watchdog_rule_group_evaluations_total", stats.name, float(stats.evaluations_total))
            for reason, count in sorted(stats.failures_by_reason.items()):
                add("watchdog_rule_evaluation_failures_total", stats.name, float(count), reason=reason)
            add("watchdog_rule_group_last_duration_seconds", stats.name, stats.last_duration_seconds)
            add("watchdog_rule_group_last_evaluation_timestamp_seconds", stats.name, last)
        return out


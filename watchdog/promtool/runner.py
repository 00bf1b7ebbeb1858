"""Run promtool-format rule unit tests (``promtool test rules``) with our evaluator.

Contract: behaves like Prometheus 2.42's ``promtool test rules`` (cmd/promtool/unittest.go):
- The test file is decoded strictly (unknown fields are errors); ``rule_files`` are relative to the test
  file and globbed (a pattern matching nothing is a warning); ``evaluation_interval`` defaults to 1m.
- Each test group gets a fresh store and fresh rule state. Input series (expanding notation, one
  point per ``interval`` from t=0) are loaded lazily, up to the current evaluation time. Time steps from 0
  to the largest ``eval_time`` of the group by ``evaluation_interval``; at each step every rule group is
  evaluated, sorted by position in ``group_eval_order`` (unlisted groups count as position 0, ties keep
  file order); a rule error ends the test group.
- ``alert_rule_test`` cases with ``ts <= eval_time < ts + evaluation_interval`` are checked after the
  evaluation at ``ts``: the *firing* alerts of the named rules (labels and annotations, order-free)
  must equal ``exp_alerts`` (``alertname`` added).
- ``promql_expr_test`` cases run after the loop at their ``eval_time``; results are compared
  order-free and exactly (floats with ``==``, so NaN never matches, as in promtool 2.42).
- Output and exit codes are promtool's: ``Unit Testing:  FILE`` then ``  SUCCESS`` or ``  FAILED:`` with
  the differences in promtool's words; exit 1 when any file fails.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import yaml

from watchdog.golang.gostrconv import format_float, quote
from watchdog.infra.yamllines import line_of
from watchdog.model import AlertState, Labels, make_labels
from watchdog.promql.limits import COMMAND_BUDGET, QueryBudget, stopped_because
from watchdog.promtool.notation import SeriesNotationError, expand_values
from watchdog.rules.durations import DurationError, format_duration, format_go_duration, parse_duration
from watchdog.rules.engine import RuleEngine, RuleEvaluationError, vector_of
from watchdog.rules.labelsets import MetricSyntaxError, format_labels_go, parse_metric, sorted_pairs
from watchdog.rules.loader import RuleLoadError, RuleSet, load_rule_files
from watchdog.rules.yamlnodes import (
    NULL_TAG,
    YamlError,
    compose,
    is_null,
    mapping_entries,
    sequence,
    string_map,
)
from watchdog.store import Store

DEFAULT_EVALUATION_INTERVAL_MS = 60_000

QUIET_LOG = logging.getLogger("watchdog.rules.unittest")
"""Rule failures in unit tests are reported as test errors, not logged (promtool uses a no-op logger)."""
QUIET_LOG.propagate = False
QUIET_LOG.addHandler(logging.NullHandler())
_UNLIMITED = 1 << 62
PROMTOOL_MAX_SAMPLES = 10_000
"""promtool 2.42's unit-test engine runs with ``MaxSamples: 10000``."""


# ------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class InputSeries:
    """``series`` + ``values`` as written."""

    series: str
    values: str
    line: int = 0


@dataclass(frozen=True)
class ExpAlert:
    """One expected alert: labels (without ``alertname``) and annotations."""

    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True)
class AlertTestCase:
    """``alert_rule_test`` item."""

    eval_time_ms: int
    alertname: str
    exp_alerts: tuple[ExpAlert, ...]


@dataclass(frozen=True)
class ExpSample:
    """``exp_samples`` item: labels in metric syntax and the value."""

    labels: str
    value: float


@dataclass(frozen=True)
class PromqlTestCase:
    """``promql_expr_test`` item."""

    expr: str
    eval_time_ms: int
    exp_samples: tuple[ExpSample, ...]


@dataclass(frozen=True)
class TestGroup:
    """One item of ``tests``."""

    __test__ = False  # not a pytest test class

    interval_ms: int
    input_series: tuple[InputSeries, ...]
    alert_rule_tests: tuple[AlertTestCase, ...]
    promql_expr_tests: tuple[PromqlTestCase, ...]
    external_labels: dict[str, str]
    external_url: str
    name: str

    def max_eval_time_ms(self) -> int:
        """The largest ``eval_time`` of the group's test cases (0 when none)."""
        times = [t.eval_time_ms for t in self.alert_rule_tests]
        times += [t.eval_time_ms for t in self.promql_expr_tests]
        return max(times, default=0)


@dataclass(frozen=True)
class UnitTestFile:
    """A whole test file."""

    rule_files: tuple[str, ...]
    evaluation_interval_ms: int
    group_eval_order: tuple[str, ...]
    tests: tuple[TestGroup, ...]


@dataclass
class TestFileResult:
    """The outcome of one test file: ``errors`` are promtool-style failure texts."""

    __test__ = False  # not a pytest test class

    path: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every test group passed."""
        return not self.errors


class TestFileError(Exception):
    """The test file itself is invalid (promtool reports these before running anything)."""

    __test__ = False  # not a pytest test class


# ------------------------------------------------------------------------------------------ decoding


class StrictDecoder:
    """yaml.v2 ``UnmarshalStrict`` semantics over a node tree; collects 'unmarshal errors'."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def fields(self, node: yaml.Node, go_type: str, known: Sequence[str]) -> dict[str, yaml.Node]:
        if is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            self.errors.append(f"line {line_of(node)}: cannot unmarshal {_yaml_kind(node)} into {go_type}")
            return {}
        out: dict[str, yaml.Node] = {}
        for entry in mapping_entries(node, go_type):
            if entry.key not in known:
                self.errors.append(
                    f"line {line_of(entry.key_node)}: field {entry.key} not found in type {go_type}")
                continue
            out[entry.key] = entry.value
        return out

    def string(self, node: yaml.Node | None) -> str:
        if node is None or is_null(node):
            return ""
        if not isinstance(node, yaml.ScalarNode):
            self.errors.append(f"line {line_of(node)}: cannot unmarshal {_yaml_kind(node)} into string")
            return ""
        return str(node.value)

    def strings(self, node: yaml.Node | None) -> list[str]:
        if node is None:
            return []
        return [self.string(item) for item in sequence(node, "list")]

    def duration(self, node: yaml.Node | None) -> int:
        text = self.string(node)
        if node is None or is_null(node):
            return 0
        try:
            return parse_duration(text)
        except DurationError as exc:
            raise TestFileError(str(exc).replace("'", '"')) from exc

    def float(self, node: yaml.Node | None) -> float:
        if node is None or is_null(node):
            return 0.0
        if not isinstance(node, yaml.ScalarNode):
            self.errors.append(f"line {line_of(node)}: cannot unmarshal {_yaml_kind(node)} into float64")
            return 0.0
        value = _yaml_v2_float(node)
        if value is None:
            self.errors.append(f"line {line_of(node)}: cannot unmarshal {_yaml_kind(node)} into float64")
            return 0.0
        return value


_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_YAML_SPECIAL = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf, "+.inf": math.inf,
                 "+.Inf": math.inf, "+.INF": math.inf, "-.inf": -math.inf, "-.Inf": -math.inf,
                 "-.INF": -math.inf, ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}


def _yaml_v2_float(node: yaml.ScalarNode) -> float | None:
    """A plain YAML scalar as yaml.v2 resolves it into a float64 (None when it would refuse)."""
    if node.style not in (None, ""):
        return None
    text = str(node.value)
    if text in _YAML_SPECIAL:
        return _YAML_SPECIAL[text]
    plain = text.replace("_", "")
    try:
        return float(int(plain, 0))
    except ValueError:
        pass
    if _YAML_FLOAT.match(plain):
        return float(plain)
    return None


def _yaml_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "!!map"
    if isinstance(node, yaml.SequenceNode):
        return "!!seq"
    assert isinstance(node, yaml.ScalarNode)
    if node.style in (None, "") and node.tag != NULL_TAG:
        value = str(node.value)
        if value in ("true", "false", "True", "False", "yes", "no", "on", "off"):
            return f"!!bool `{value}`"
        if _yaml_v2_float(node) is not None:
            return f"!!float `{value}`" if not re.fullmatch(r"[-+]?[0-9_]+", value) else f"!!int `{value}`"
    return f"!!str `{node.value}`"


def parse_test_file(text: str) -> UnitTestFile:
    """Decode a promtool test file strictly; raises :class:`TestFileError` with promtool's wording."""
    try:
        root = compose(text)
    except YamlError as exc:
        raise TestFileError(f"yaml: line {exc.line}: {exc.problem.removeprefix('yaml: ')}") from exc
    dec = StrictDecoder()
    try:
        top = dec.fields(root, "main.unitTestFile",
                         ("rule_files", "evaluation_interval", "group_eval_order", "tests")) if root else {}
        rule_files = dec.strings(top.get("rule_files"))
        evaluation_interval = dec.duration(top.get("evaluation_interval"))
        order = dec.strings(top.get("group_eval_order"))
        tests = [decode_test_group(dec, node) for node in sequence(top.get("tests"), "tests")] \
            if "tests" in top else []
    except YamlError as exc:
        raise TestFileError(f"yaml: line {exc.line}: {exc.problem}") from exc
    if dec.errors:
        raise TestFileError("yaml: unmarshal errors:\n" + "\n".join("  " + e for e in dec.errors))
    return UnitTestFile(tuple(rule_files), evaluation_interval, tuple(order), tuple(tests))


def decode_test_group(dec: StrictDecoder, node: yaml.Node) -> TestGroup:
    """One item of ``tests`` (problems are collected in ``dec.errors``)."""
    f = dec.fields(node, "main.testGroup", ("interval", "input_series", "alert_rule_test",
                                              "promql_expr_test", "external_labels", "external_url", "name"))
    series: list[InputSeries] = []
    for item in sequence(f.get("input_series"), "input_series") if "input_series" in f else []:
        sf = dec.fields(item, "main.series", ("series", "values"))
        series.append(InputSeries(dec.string(sf.get("series")), dec.string(sf.get("values")), line_of(item)))
    alerts: list[AlertTestCase] = []
    for item in sequence(f.get("alert_rule_test"), "alert_rule_test") if "alert_rule_test" in f else []:
        af = dec.fields(item, "main.alertTestCase", ("eval_time", "alertname", "exp_alerts"))
        exp: list[ExpAlert] = []
        for e in sequence(af.get("exp_alerts"), "exp_alerts") if "exp_alerts" in af else []:
            ef = dec.fields(e, "main.alert", ("exp_labels", "exp_annotations"))
            exp.append(ExpAlert(
                string_map(ef["exp_labels"], "exp_labels") if "exp_labels" in ef else {},
                string_map(ef["exp_annotations"], "exp_annotations") if "exp_annotations" in ef else {}))
        alerts.append(AlertTestCase(dec.duration(af.get("eval_time")), dec.string(af.get("alertname")),
                                    tuple(exp)))
    exprs: list[PromqlTestCase] = []
    for item in sequence(f.get("promql_expr_test"), "promql_expr_test") if "promql_expr_test" in f else []:
        pf = dec.fields(item, "main.promqlTestCase", ("expr", "eval_time", "exp_samples"))
        samples: list[ExpSample] = []
        for s in sequence(pf.get("exp_samples"), "exp_samples") if "exp_samples" in pf else []:
            sf = dec.fields(s, "main.sample", ("labels", "value"))
            samples.append(ExpSample(dec.string(sf.get("labels")), dec.float(sf.get("value"))))
        exprs.append(PromqlTestCase(dec.string(pf.get("expr")), dec.duration(pf.get("eval_time")),
                                    tuple(samples)))
    external = string_map(f["external_labels"], "external_labels") if "external_labels" in f else {}
    return TestGroup(dec.duration(f.get("interval")), tuple(series), tuple(alerts), tuple(exprs),
                     external, dec.string(f.get("external_url")), dec.string(f.get("name")))


# ------------------------------------------------------------------------------------------ input series


def load_input_series(series: Iterable[InputSeries],
                      interval_ms: int) -> dict[Labels, list[tuple[int, float]]]:
    """Points of every input series (t=0, interval, ...); omitted values skipped. A series listed twice
    keeps its last definition; with a zero interval only the first point survives (as in promtool).
    Raises ValueError naming the bad series."""
    out: dict[Labels, list[tuple[int, float]]] = {}
    for item in series:
        try:
            labels = make_labels(parse_metric(item.series, unique=True))
            values = expand_values(item.values)
        except (MetricSyntaxError, SeriesNotationError) as exc:
            raise ValueError(f"{item.series} {item.values}: {exc}") from exc
        points = [(i * interval_ms, v) for i, v in enumerate(values) if v is not None]
        if interval_ms == 0:
            points = points[:1]
        out[labels] = points
    return out


class LazySeries:
    """Appends input points to the store as evaluation time advances (promtool's lazy loader)."""

    def __init__(self, store: Store, points: dict[Labels, list[tuple[int, float]]]) -> None:
        self.store = store
        self.pending = {labels: list(reversed(p)) for labels, p in points.items()}

    def load_till(self, t_ms: int) -> None:
        for labels, stack in self.pending.items():
            while stack and stack[-1][0] <= t_ms:
                ts, value = stack.pop()
                self.store.append(labels, ts, value)


# ------------------------------------------------------------------------------------------ running


def order_groups(ruleset: RuleSet, order: Sequence[str]) -> RuleSet:
    """Groups sorted by position in ``order``; unlisted groups count as position 0, as in promtool
    (which leaves ties in random map order; we keep file order)."""
    index = {name: i for i, name in enumerate(order)}
    groups = sorted(ruleset.groups, key=lambda g: index.get(g.name, 0))
    return RuleSet(tuple(groups), ruleset.files)


def _indent_lines(text: str, indent: str) -> str:
    lines = text.split("\n")
    return "\n".join(line if i == 0 else indent + line for i, line in enumerate(lines))


AlertPair = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


def _alerts_string(alerts: list[AlertPair]) -> str:
    if not alerts:
        return "[]"

    def one(pair: AlertPair) -> str:
        labels, annotations = format_labels_go(dict(pair[0])), format_labels_go(dict(pair[1]))
        return "Labels:" + labels + "\nAnnotations:" + annotations

    out = "[\n0:" + _indent_lines("\n" + one(alerts[0]), "  ")
    for i, pair in enumerate(alerts[1:], start=1):
        out += ",\n" + str(i) + ":" + _indent_lines("\n" + one(pair), "  ")
    return out + "\n]"


def _samples_string(samples: list[tuple[tuple[tuple[str, str], ...], float]]) -> str:
    if not samples:
        return "nil"
    return ", ".join(format_labels_go(dict(lbl)) + " " + format_float(v, "E", -1) for lbl, v in samples)


def run_test_group(tg: TestGroup, rule_files: Sequence[str], evaluation_interval_ms: int,
                   group_eval_order: Sequence[str], budget: QueryBudget = COMMAND_BUDGET) -> list[str]:
    """Run one test group; returns promtool-style error texts (empty when it passes). Every rule
    evaluation and every ``promql_expr_test`` runs under ``budget`` (besides promtool's own sample
    accounting): a rule or query past it fails its test with the budget named, instead of running on."""
    try:
        points = load_input_series(tg.input_series, tg.interval_ms)
    except ValueError as exc:
        return [str(exc)]
    try:
        ruleset = order_groups(load_rule_files(rule_files, lint_duplicates=False), group_eval_order)
    except RuleLoadError as exc:
        return [str(p) for p in exc.problems]
    store = Store(retention_ms=_UNLIMITED, max_points=_UNLIMITED, max_series=_UNLIMITED)
    lazy = LazySeries(store, points)
    engine = RuleEngine(ruleset, store, tg.external_labels, external_url=tg.external_url or None,
                        subquery_step_ms=evaluation_interval_ms, logger=QUIET_LOG,
                        max_samples=PROMTOOL_MAX_SAMPLES, rule_timeout_s=budget.cpu_seconds,
                        sample_limit=budget.max_samples)
    group_label = f"    name: {tg.name},\n" if tg.name else ""
    for case in tg.alert_rule_tests:
        if case.alertname == "":
            suffix = f" (in TestGroup {tg.name})" if tg.name else ""
            return [f"an item under alert_rule_test misses required attribute alertname at eval_time "
                    f"{format_duration(case.eval_time_ms)}{suffix}"]
    alert_times = sorted({c.eval_time_ms for c in tg.alert_rule_tests})
    max_t = tg.max_eval_time_ms()
    errors: list[str] = []
    curr = 0
    ts = 0
    while ts <= max_t:
        lazy.load_till(ts)
        engine.evaluate(ts)
        failures = engine.failures_at(ts)
        if failures:
            errors.extend(f"    rule: {f.rule}, time: {format_go_duration(ts)}, err: {f.error}"
                          for f in failures)
            return errors
        while curr < len(alert_times) and ts <= alert_times[curr] < ts + evaluation_interval_ms:
            t = alert_times[curr]
            errors.extend(_check_alerts(engine, [c for c in tg.alert_rule_tests if c.eval_time_ms == t],
                                        group_label))
            curr += 1
        ts += evaluation_interval_ms
    for expr_case in tg.promql_expr_tests:
        errors.extend(_check_expr(store, expr_case, evaluation_interval_ms, budget))
    return errors


def _check_alerts(engine: RuleEngine, cases: list[AlertTestCase], group_label: str) -> list[str]:
    errors: list[str] = []
    for case in cases:
        got: list[AlertPair] = [
            (sorted_pairs(a.labels), sorted_pairs(a.annotations))
            for a in engine.rule_alerts(case.alertname)
            if a.state is AlertState.FIRING and a.resolved_at_ms == 0
        ]
        exp: list[AlertPair] = [
            (sorted_pairs({**e.labels, "alertname": case.alertname}), sorted_pairs(e.annotations))
            for e in case.exp_alerts
        ]
        got.sort()
        exp.sort()
        if got != exp:
            indent = "            "
            errors.append(
                f"{group_label}    alertname: {case.alertname}, "
                f"time: {format_duration(case.eval_time_ms)}, \n"
                f"        exp:{_indent_lines(_alerts_string(exp), indent)}, \n"
                f"        got:{_indent_lines(_alerts_string(got), indent)}")
    return errors


def _check_expr(store: Store, case: PromqlTestCase, evaluation_interval_ms: int,
                budget: QueryBudget) -> list[str]:
    from watchdog.promql import EvalOptions, PromQLError, evaluate, parse_query

    when = format_duration(case.eval_time_ms)
    try:
        query = parse_query(case.expr)
        options = budget.options(EvalOptions(subquery_step_ms=evaluation_interval_ms,
                                             max_samples=PROMTOOL_MAX_SAMPLES))
        value = evaluate(query, store, case.eval_time_ms, options)
        vector = vector_of(value)
    except PromQLError as exc:
        return [f"    expr: {quote(case.expr)}, time: {when}, err: {stopped_because(exc, budget)}"]
    except RuleEvaluationError as exc:
        return [f"    expr: {quote(case.expr)}, time: {when}, err: {exc}"]
    except Exception as exc:  # an evaluator bug fails this case, not the whole run
        return [f"    expr: {quote(case.expr)}, time: {when}, err: internal error: "
                f"{type(exc).__name__}: {exc}"]
    got = [(sorted_pairs(dict(labels)), v) for labels, v in vector]
    exp: list[tuple[tuple[tuple[str, str], ...], float]] = []
    for sample in case.exp_samples:
        try:
            exp.append((sorted_pairs(parse_metric(sample.labels)), sample.value))
        except MetricSyntaxError as exc:
            return [f"    expr: {quote(case.expr)}, time: {when}, "
                    f"err: labels {quote(sample.labels)}: {exc}"]
    got.sort(key=lambda s: s[0])
    exp.sort(key=lambda s: s[0])
    same = len(got) == len(exp) and all(
        g[0] == e[0] and g[1] == e[1] for g, e in zip(got, exp, strict=True))
    if same:
        return []
    return [f"    expr: {quote(case.expr)}, time: {when},\n"
            f"        exp: {_samples_string(exp)}\n"
            f"        got: {_samples_string(got)}"]


def run_test_file(path: str, budget: QueryBudget = COMMAND_BUDGET) -> TestFileResult:
    """Run every test group of one promtool test file, each evaluation under ``budget``."""
    result = TestFileResult(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        result.errors.append(f"open {path}: {exc.strerror if isinstance(exc, OSError) else exc}")
        return result
    try:
        spec = parse_test_file(text)
    except TestFileError as exc:
        result.errors.append(str(exc))
        return result
    base = os.path.dirname(path)
    rule_files: list[str] = []
    for pattern in spec.rule_files:
        full = pattern if (pattern == "" or os.path.isabs(pattern)) else os.path.join(base, pattern)
        matches = sorted(glob.glob(full))
        if not matches:
            result.warnings.append(f"  WARNING: no file match pattern {full}")
        rule_files.extend(matches)
    interval = spec.evaluation_interval_ms or DEFAULT_EVALUATION_INTERVAL_MS
    if len(set(spec.group_eval_order)) != len(spec.group_eval_order):
        seen: set[str] = set()
        for name in spec.group_eval_order:
            if name in seen:
                result.errors.append(f"group name repeated in evaluation order: {name}")
                return result
            seen.add(name)
    for group in spec.tests:
        result.errors.extend(run_test_group(group, rule_files, interval, spec.group_eval_order, budget))
    return result


def run_test_files(paths: Sequence[str], out: TextIO | None = None, err: TextIO | None = None,
                   budget: QueryBudget = COMMAND_BUDGET) -> int:
    """Run test files, printing like promtool; returns 0 when all pass, else 1."""
    out = out or sys.stdout
    err = err or sys.stderr
    failed = False
    for path in paths:
        print("Unit Testing: ", path, file=out)
        out.flush()
        result = run_test_file(path, budget)
        for warning in result.warnings:
            print(warning, file=err)
        if result.errors:
            print("  FAILED:", file=err)
            for error in result.errors:
                print(error, file=err)
                err.flush()
                print(file=out)
                out.flush()
            failed = True
        else:
            print("  SUCCESS", file=out)
        print(file=out)
        out.flush()
    return 1 if failed else 0

"""``rules eval``: evaluate rules over promtool-style input series and report the alerts at time D.

Contract: the input file holds promtool's ``interval`` and ``input_series`` at top level (optionally
``rule_files`` relative to the file, ``evaluation_interval``, ``external_labels``, ``external_url``,
``group_eval_order``), or is a whole promtool test file (its first test group is used). Rules are
evaluated from t=0 to D every evaluation interval (default 1m), exactly as ``promtool test rules`` steps
time, so the alerts reported at D are the ones an ``alert_rule_test`` at ``eval_time: D`` would see
(the last evaluation at or before D).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml

from watchdog.model import Alert
from watchdog.promql.limits import COMMAND_BUDGET, QueryBudget
from watchdog.promtool.runner import (
    DEFAULT_EVALUATION_INTERVAL_MS,
    QUIET_LOG,
    LazySeries,
    StrictDecoder,
    TestFileError,
    TestGroup,
    decode_test_group,
    load_input_series,
    order_groups,
    parse_test_file,
)
from watchdog.rules.durations import DurationError, parse_duration, parse_time_arg
from watchdog.rules.engine import RuleEngine, RuleFailure
from watchdog.rules.loader import RuleLoadError, expand_paths, load_rule_files
from watchdog.rules.yamlnodes import YamlError, compose, mapping_entries
from watchdog.store import Store

_FILE_KEYS = ("rule_files", "evaluation_interval", "group_eval_order")
_GROUP_KEYS = ("interval", "input_series", "alert_rule_test", "promql_expr_test", "external_labels",
               "external_url", "name")
_UNLIMITED = 1 << 62


class EvalInputError(Exception):
    """The input file, the rules or the time argument is invalid."""


@dataclass
class EvalResult:
    """Alerts held after the last evaluation at or before ``at_ms`` (``evaluated_at_ms``)."""

    at_ms: int
    evaluated_at_ms: int
    alerts: list[Alert] = field(default_factory=list)
    failures: list[RuleFailure] = field(default_factory=list)


@dataclass(frozen=True)
class EvalInput:
    """The decoded input file."""

    group: TestGroup
    rule_files: tuple[str, ...]
    evaluation_interval_ms: int
    group_eval_order: tuple[str, ...]


def read_eval_input(path: str) -> EvalInput:
    """Decode an eval input file; raises :class:`EvalInputError`."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise EvalInputError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        root = compose(text)
        entries = mapping_entries(root, "input") if root is not None else []
    except YamlError as exc:
        raise EvalInputError(f"{path}:{exc.line}: {exc.problem}") from exc
    keys = {e.key for e in entries}
    try:
        if "tests" in keys:
            spec = parse_test_file(text)
            if not spec.tests:
                raise EvalInputError(f"{path}: no test group in 'tests'")
            return EvalInput(spec.tests[0], spec.rule_files, spec.evaluation_interval_ms,
                             spec.group_eval_order)
        unknown = sorted(keys - set(_FILE_KEYS) - set(_GROUP_KEYS))
        if unknown:
            raise EvalInputError(f"{path}: unknown field(s): {', '.join(unknown)}")
        dec = StrictDecoder()
        group_node = yaml.MappingNode("tag:yaml.org,2002:map",
                                      [(e.key_node, e.value) for e in entries if e.key in _GROUP_KEYS])
        group = decode_test_group(dec, group_node)
        by_key = {e.key: e.value for e in entries}
        rule_files = dec.strings(by_key.get("rule_files"))
        interval = dec.duration(by_key.get("evaluation_interval"))
        order = dec.strings(by_key.get("group_eval_order"))
    except (TestFileError, YamlError) as exc:
        raise EvalInputError(f"{path}: {exc}") from exc
    if dec.errors:
        raise EvalInputError(f"{path}: " + "; ".join(dec.errors))
    return EvalInput(group, tuple(rule_files), interval, tuple(order))


def default_rule_files() -> list[str]:
    """The shipped default rule pack (``rules/*.yaml`` of the first asset dir), used when the input
    names no rule files and no ``--rules`` is given."""
    from watchdog.rules.loader import shipped_rule_files

    return shipped_rule_files()


def evaluate_input(path: str, at: str, extra_rules: Sequence[str] = (),
                   evaluation_interval: str | None = None, budget: QueryBudget = COMMAND_BUDGET) -> EvalResult:
    """Evaluate the input file's rules (plus ``extra_rules``) up to time ``at``; see the module doc.
    Each rule evaluation runs under ``budget``: a rule past it is one of the result's failures."""
    spec = read_eval_input(path)
    try:
        at_ms = parse_time_arg(at)
        step_ms = parse_duration(evaluation_interval) if evaluation_interval else (
            spec.evaluation_interval_ms or DEFAULT_EVALUATION_INTERVAL_MS)
    except DurationError as exc:
        raise EvalInputError(str(exc)) from exc
    if at_ms < 0 or step_ms <= 0:
        raise EvalInputError("--at must be >= 0 and the evaluation interval > 0")
    files = expand_paths(spec.rule_files, base_dir=os.path.dirname(path)) + expand_paths(extra_rules)
    if not files:
        files = default_rule_files()
    if not files:
        raise EvalInputError("no rule files: give --rules PATH or rule_files in the input")
    try:
        ruleset = order_groups(load_rule_files(files, lint_duplicates=False), spec.group_eval_order)
        points = load_input_series(spec.group.input_series, spec.group.interval_ms)
    except RuleLoadError as exc:
        raise EvalInputError(str(exc)) from exc
    except ValueError as exc:
        raise EvalInputError(f"input_series: {exc}") from exc
    store = Store(retention_ms=_UNLIMITED, max_points=_UNLIMITED, max_series=_UNLIMITED)
    lazy = LazySeries(store, points)
    engine = RuleEngine(ruleset, store, spec.group.external_labels,
                        external_url=spec.group.external_url or None, subquery_step_ms=step_ms,
                        logger=QUIET_LOG, rule_timeout_s=budget.cpu_seconds, sample_limit=budget.max_samples)
    ts = 0
    last = 0
    while ts <= at_ms:
        lazy.load_till(ts)
        engine.evaluate(ts)
        last = ts
        ts += step_ms
    return EvalResult(at_ms, last, engine.alerts(), engine.failures_at(last))

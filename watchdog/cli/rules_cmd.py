"""``inference-watchdog rules check|test|eval|render``: rule files, their tests, and what they decide.

- ``rules check PATH...``: load and validate rule files like ``promtool check rules`` (plus PromQL support
  in our evaluator); prints ``Checking FILE`` and ``SUCCESS: N rules found`` or one
  ``FILE:LINE: group "G", rule N "NAME": problem`` line per problem; exit 1 on any problem.
  ``--json`` prints ``{"files": [{"path", "rules", "errors": [...]}]}`` (docs/cli.md).
- ``rules test PATH...``: promtool-format unit tests with our evaluator; promtool's output and exit codes.
- ``rules eval --input F --at D [--rules PATH]... [--json]``: loads ``interval`` + ``input_series`` (and
  ``rule_files``, ``evaluation_interval``, ``external_labels``) from F, evaluates from 0 to D every
  evaluation interval as promtool does, and prints the alerts pending or firing at D.
- ``rules render [--config PATH]``: the node's whole rule set (config rule paths plus generated SLO
  groups) as one Prometheus rule file on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from watchdog.model import AlertState

EXIT_OK = 0
EXIT_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``rules`` command and its subcommands."""
    parser = sub.add_parser("rules", help="check, test, evaluate and render Prometheus rule files",
                            description="Prometheus rule files: validate, unit-test, evaluate, render.")
    rules_sub = parser.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    rules_sub.required = True

    check = rules_sub.add_parser("check", help="load and validate rule files")
    check.add_argument("paths", nargs="+", metavar="PATH", help="rule files or globs")
    check.add_argument("--json", action="store_true", help="machine-readable result")
    check.set_defaults(func=_check)

    test = rules_sub.add_parser("test", help="run promtool-format rule tests with our evaluator")
    test.add_argument("paths", nargs="+", metavar="PATH", help="promtool test files")
    test.set_defaults(func=_test)

    ev = rules_sub.add_parser("eval", help="which alerts are pending/firing at time D for given series")
    ev.add_argument("--input", required=True, metavar="F",
                    help="YAML with promtool's interval + input_series (and optionally rule_files)")
    ev.add_argument("--at", required=True, metavar="D",
                    help="time since the first sample: a duration (10m) or seconds (600)")
    ev.add_argument("--rules", action="append", default=[], metavar="PATH",
                    help="rule file or glob; repeatable (added to F's rule_files)")
    ev.add_argument("--evaluation-interval", default=None, metavar="DURATION",
                    help="rule evaluation step (default: F's evaluation_interval, else 1m)")
    ev.add_argument("--json", action="store_true", help="print {\"alerts\": [...]} (docs/cli.md)")
    ev.set_defaults(func=_eval)

    render = rules_sub.add_parser("render", help="print the node's full rule set as one rule file")
    render.add_argument("--config", default=None, metavar="PATH",
                        help="config file (default /etc/inference-watchdog/config.yaml when present)")
    render.set_defaults(func=_render)


# ------------------------------------------------------------------------------------------ check


def _check(args: argparse.Namespace) -> int:
    from watchdog.rules.loader import RuleLoadError, expand_paths, load_rule_files

    files = expand_paths(args.paths)
    reports: list[dict[str, Any]] = []
    failed = False
    for path in files:
        report: dict[str, Any] = {"path": path, "rules": 0, "errors": []}
        try:
            ruleset = load_rule_files([path])
            report["rules"] = ruleset.rule_count
            warnings = _cost_warnings(ruleset)
            if warnings:
                report["warnings"] = warnings
        except RuleLoadError as exc:
            failed = True
            report["errors"] = [
                {"file": p.file, "line": p.line, "group": p.group, "rule": p.rule, "index": p.index,
                 "problem": p.problem, "message": str(p)} for p in exc.problems]
        reports.append(report)
    if not files:
        failed = True
    if args.json:
        json.dump({"files": reports, "success": not failed}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_FAILED if failed else EXIT_OK
    if not files:
        print("no rule files match " + " ".join(args.paths), file=sys.stderr)
    for report in reports:
        print(f"Checking {report['path']}")
        if report["errors"]:
            print("  FAILED:", file=sys.stderr)
            for error in report["errors"]:
                print(error["message"], file=sys.stderr)
        else:
            print(f"  SUCCESS: {report['rules']} rules found")
        for warning in report.get("warnings", []):
            print(f"  WARNING: {warning}", file=sys.stderr)
        print()
    return EXIT_FAILED if failed else EXIT_OK


AGENT_TICK_MS = 1000
"""The step of subqueries without one, in the agent (``tick_interval_seconds`` defaults to 1)."""


def _cost_warnings(ruleset: Any) -> list[str]:
    """One line per rule whose subqueries evaluate their inner expression many times per evaluation."""
    from watchdog.promql.cost import SUBQUERY_STEPS_WARNING, subquery_cost

    out: list[str] = []
    for group in ruleset.groups:
        for index, rule in enumerate(group.rules, start=1):
            cost = subquery_cost(rule.query.expr, group.interval_ms or AGENT_TICK_MS)
            if cost.steps < SUBQUERY_STEPS_WARNING:
                continue
            out.append(
                f"{group.file}:{rule.line}: group {json.dumps(group.name)}, rule {index} {json.dumps(rule.name)}: "
                f"costly subquery: {' inside '.join(cost.chain)}: {cost.steps} inner evaluations per "
                f"evaluation, each over every series the inner expression matches; cost grows with "
                f"steps x series (use a coarser step, a shorter range, a recording rule for the inner "
                f"expression, or a group interval:)")
    return out


# ------------------------------------------------------------------------------------------ test


def _test(args: argparse.Namespace) -> int:
    from watchdog.promtool.runner import run_test_files

    return run_test_files(list(args.paths))


# ------------------------------------------------------------------------------------------ eval


def _json_number(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def _eval(args: argparse.Namespace) -> int:
    from watchdog.promtool.eval_input import EvalInputError, evaluate_input

    try:
        result = evaluate_input(args.input, args.at, extra_rules=args.rules,
                                evaluation_interval=args.evaluation_interval)
    except EvalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    alerts = [a for a in result.alerts if a.state in (AlertState.PENDING, AlertState.FIRING)]
    if args.json:
        payload = {
            "at": result.at_ms / 1000.0,
            "evaluated_at": result.evaluated_at_ms / 1000.0,
            "alerts": [
                {
                    "name": a.name,
                    "state": a.state.value,
                    "labels": dict(sorted(a.labels.items())),
                    "annotations": dict(sorted(a.annotations.items())),
                    "value": _json_number(a.value),
                    "active_at": a.active_at_ms / 1000.0,
                    "fired_at": a.fired_at_ms / 1000.0 if a.state is AlertState.FIRING else None,
                }
                for a in alerts
            ],
            "rule_failures": [
                {"group": f.group, "rule": f.rule, "error": f.error} for f in result.failures],
        }
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    from watchdog.golang.gostrconv import format_float
    from watchdog.rules.durations import format_duration
    from watchdog.rules.labelsets import format_labels_go

    evaluated = format_duration(result.evaluated_at_ms)
    print(f"at {format_duration(result.at_ms)} (last evaluation at {evaluated}): "
          f"{sum(a.state is AlertState.FIRING for a in alerts)} firing, "
          f"{sum(a.state is AlertState.PENDING for a in alerts)} pending")
    for a in alerts:
        labels = {k: v for k, v in a.labels.items() if k != "alertname"}
        print(f"{a.state.value:<8} {a.name} {format_labels_go(labels)} value={format_float(a.value)} "
              f"active_at={format_duration(a.active_at_ms)}")
    for failure in result.failures:
        print(f"rule failed: group {failure.group!r}, rule {failure.rule!r}: {failure.error}",
              file=sys.stderr)
    return EXIT_OK


# ------------------------------------------------------------------------------------------ render


def _render(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError, load_settings
    from watchdog.rules.loader import RuleLoadError, load_ruleset
    from watchdog.rules.render import render_ruleset

    path = args.config
    if path is None:
        from watchdog.config.loader import DEFAULT_CONFIG_PATH

        path = str(DEFAULT_CONFIG_PATH) if os.path.exists(DEFAULT_CONFIG_PATH) else None
    try:
        ruleset = load_ruleset(load_settings(path))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except RuleLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    text, renamed = render_ruleset(ruleset)
    for old, new in renamed:
        print(f"warning: group {old!r} appears in several files; rendered as {new!r}", file=sys.stderr)
    sys.stdout.write(text)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience for python -m
    """Run ``rules`` alone (``python -m watchdog.cli.rules_cmd check x.yaml``)."""
    parser = argparse.ArgumentParser(prog="inference-watchdog")
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))

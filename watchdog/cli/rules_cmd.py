"""``inference-watchdog rules check|test|eval|render``: rule files, their tests, and what they decide.

- ``rules check PATH...``: load and validate rule files like ``promtool check rules`` (plus PromQL support
  in our evaluator); prints ``Checking FILE`` and ``SUCCESS: N rules found`` or one
  ``FILE:LINE: group "G", rule N "NAME": problem`` line per problem; exit 1 on any problem.
  ``--json`` prints ``{"files": [{"path", "rules", "errors": [...]}]}`` (docs/cli.md).
- ``rules test PATH...``: promtool-format unit tests with our evaluator; promtool's output and exit codes.
- ``rules eval --input F --at D [--rules PATH]... [--json]``: loads ``interval`` + ``input_series`` (and
  ``rule_files``, ``evaluation_interval``, ``external_labels``) from F, evaluates from 0 to D every
  evaluation interval as promtool does, and prints the alerts pending or firing at D.
- ``rules render [--config PATH] [--target node|central] [--format rules|prometheusrule] ...``: the
  node's whole rule set (config rule paths plus generated SLO groups) as one Prometheus rule file or
  ``PrometheusRule`` object on stdout, every alert with a static ``runbook_url``; ``--target central``
  translates it for a central Prometheus (watchdog/rules/central.py), each left-out rule named on stderr
  and in a comment of the output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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
    render.add_argument("--target", choices=("node", "central"), default="node",
                        help="node: exactly what the agent evaluates; central: translated for a central "
                             "Prometheus scraping many agents (node label added, up -> watchdog_engine_up, "
                             "rules that need 1 s samples left out with the reason; docs/fleet.md)")
    render.add_argument("--format", choices=("rules", "prometheusrule"), default="rules", dest="output_format",
                        help="rules: a Prometheus rule file; prometheusrule: a monitoring.coreos.com/v1 "
                             "PrometheusRule object for the prometheus-operator")
    render.add_argument("--runbook-url-base", default=None, metavar="URL",
                        help="every alert gets runbook_url = URL/<runbook id>.md (default: the config's "
                             "runbooks.url_base; without either, the node target links the installed "
                             "Markdown as file:// and the central target fails)")
    render.add_argument("--node-label", default=None, metavar="LABEL",
                        help="central: the label that names the node on every series (default node; "
                             "instance when targets carry no node label)")
    render.add_argument("--scrape-interval", default=None, metavar="DURATION",
                        help="central: the central Prometheus' scrape interval of the agents (default 15s)")
    render.add_argument("--name", default="inference-watchdog", help="prometheusrule: metadata.name")
    render.add_argument("--namespace", default="", help="prometheusrule: metadata.namespace")
    render.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="prometheusrule: a metadata label (repeatable), e.g. release=kube-prometheus-stack "
                             "for the Prometheus' ruleSelector")
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


def _render_options(args: argparse.Namespace, url_base: str, runbook_url: Any) -> Any:
    """The :class:`RenderOptions` the flags ask for; raises ValueError naming the flag that is wrong."""
    from watchdog.rules.central import CentralOptions
    from watchdog.rules.durations import DurationError, parse_duration
    from watchdog.rules.render import PrometheusRuleMeta, RenderOptions

    central = None
    if args.target == "central":
        if not url_base:
            raise ValueError("--target central needs --runbook-url-base or runbooks.url_base in the config: "
                             "a file:// link to the node's runbooks opens nowhere else")
        interval_ms = 15_000
        if args.scrape_interval is not None:
            try:
                interval_ms = parse_duration(args.scrape_interval)
            except DurationError as exc:
                raise ValueError(f"--scrape-interval: {exc}") from None
            if interval_ms <= 0:
                raise ValueError(f"--scrape-interval: must be more than 0: {args.scrape_interval!r}")
        label = args.node_label or "node"
        if not _LABEL_NAME.fullmatch(label):
            raise ValueError(f"--node-label: not a label name: {label!r}")
        central = CentralOptions(node_label=label, scrape_interval_ms=interval_ms)
    elif args.node_label is not None or args.scrape_interval is not None:
        raise ValueError("--node-label and --scrape-interval apply to --target central only")
    kubernetes = None
    if args.output_format == "prometheusrule":
        labels = []
        for item in args.label:
            key, sep, value = item.partition("=")
            if not sep or not _LABEL_NAME.fullmatch(key):
                raise ValueError(f"--label: expected KEY=VALUE with KEY a label name: {item!r}")
            labels.append((key, value))
        if not _DNS_NAME.fullmatch(args.name):
            raise ValueError(f"--name: not a Kubernetes object name (lower-case DNS subdomain): {args.name!r}")
        if args.namespace and not _DNS_LABEL.fullmatch(args.namespace):
            raise ValueError(f"--namespace: not a Kubernetes namespace name: {args.namespace!r}")
        kubernetes = PrometheusRuleMeta(name=args.name, namespace=args.namespace, labels=tuple(labels))
    elif args.label or args.namespace or args.name != "inference-watchdog":
        raise ValueError("--name, --namespace and --label apply to --format prometheusrule only")
    return RenderOptions(runbook_url=runbook_url, central=central, kubernetes=kubernetes)


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _render(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError, load_settings
    from watchdog.rules.loader import RuleLoadError, load_ruleset
    from watchdog.rules.render import render_rules
    from watchdog.runbooks.catalogue import catalogue_from_settings
    from watchdog.runbooks.links import RunbookLinks

    path = args.config
    if path is None:
        from watchdog.config.loader import DEFAULT_CONFIG_PATH

        path = str(DEFAULT_CONFIG_PATH) if os.path.exists(DEFAULT_CONFIG_PATH) else None
    try:
        settings = load_settings(path)
        ruleset = load_ruleset(settings)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except RuleLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    url_base = settings.runbooks.url_base if args.runbook_url_base is None else args.runbook_url_base
    try:
        links = RunbookLinks(catalogue_from_settings(settings.runbooks, path), url_base)
        options = _render_options(args, url_base, links.url)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    rendered = render_rules(ruleset, options)
    for old, new in rendered.renamed:
        print(f"warning: group {old!r} appears in several files; rendered as {new!r}", file=sys.stderr)
    for note in rendered.left_out:
        print(f"left out for a central Prometheus: {note.line()}", file=sys.stderr)
    sys.stdout.write(rendered.text)
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

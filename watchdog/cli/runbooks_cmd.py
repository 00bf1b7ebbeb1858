"""``inference-watchdog runbooks list | show ID | check``: the runbook catalogue.

- ``list [--json]``: id, alerts and title of every runbook (``--json``: a list of
  ``{"id", "title", "summary", "alerts", "source", "markdown"}``).
- ``show ID [--alert NAME --labels k=v,...] [--json]``: the human runbook (markdown), its machine part, and
  the **suggestion** for an alert: every remediation step with its rendered action and what this node's policy
  decides for it (``suggested``, ``awaiting_approval``, ``skipped: not in remediation.allow.units`` ...).
  The alert is the one given with ``--alert``/``--labels``; without them, alerts of this runbook that are
  firing on the live node (read-only from its state database) are used when there are any. Conditions
  (``requires``) are not evaluated here: the store lives in the agent.
  ``--json``: ``{"id", "title", "alerts", "markdown", "diagnose": [...], "remediate": [...],
  "suggestions": [{"alert", "labels", "fingerprint", "source", "steps": [{"step", "kind", "verdict",
  "reason", "action"}]}]}``.
- ``check [PATH...]``: load and validate runbook files (default: the configured search path), including
  that ``requires``/``verify`` expressions parse as PromQL; exit 1 on the first error.

``--config`` (default ``/etc/inference-watchdog/config.yaml`` when it exists) gives the policy, the runbook
search path and the state directory; ``--path`` replaces the search path.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from watchdog.config.settings import Settings

DEFAULT_CONFIG = Path("/etc/inference-watchdog/config.yaml")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``runbooks`` command."""
    parser = sub.add_parser("runbooks", help="the runbook catalogue: list, show, check")
    inner = parser.add_subparsers(dest="runbooks_command", metavar="ACTION")
    inner.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help=f"config file (default: {DEFAULT_CONFIG} if it exists)")
        p.add_argument("--path", action="append", default=[], metavar="DIR",
                       help="runbook directory or file (repeatable); replaces the configured search path")

    lst = inner.add_parser("list", help="id, alerts and title of every runbook")
    common(lst)
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.set_defaults(func=_list)

    show = inner.add_parser("show", help="a runbook (by id or by an alert it serves), with the suggestion for an alert")
    common(show)
    show.add_argument("id", metavar="ID|ALERT", help="runbook id (gpu-xid) or alert name (GpuXidFatal)")
    show.add_argument("--alert", metavar="NAME", help="alert name to plan for (default: the runbook's first)")
    show.add_argument("--labels", default="", metavar="K=V,...", help="alert labels, e.g. gpu=3,job=vllm")
    show.add_argument("--no-markdown", action="store_true", help="only the machine part and suggestion")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show)

    check = inner.add_parser("check", help="validate runbook files")
    check.add_argument("paths", nargs="*", metavar="PATH")
    check.add_argument("--config", help="config file whose search path to check when no PATH is given")
    check.set_defaults(func=_check)


# -- loading ----------------------------------------------------------------------------------------


def _config(args: argparse.Namespace) -> tuple[Settings, Path | None]:
    from watchdog.config import load_settings

    path = Path(args.config) if args.config else (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    return load_settings(path), path


def _catalogue(args: argparse.Namespace, settings: Settings, config_path: Path | None) -> Any:
    from watchdog.runbooks.catalogue import catalogue_from_settings, load_catalogue

    if args.path:
        return load_catalogue(args.path)
    return catalogue_from_settings(settings.runbooks, config_path)


def _load(args: argparse.Namespace) -> tuple[Settings, Path | None, Any] | None:
    from watchdog.config import ConfigError
    from watchdog.runbooks.catalogue import RunbookError

    try:
        config, config_path = _config(args)
        return config, config_path, _catalogue(args, config, config_path)
    except (ConfigError, RunbookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


# -- list -------------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if loaded is None:
        return 2
    catalogue = loaded[2]
    if args.json:
        rows = [{"id": r.id, "title": r.title, "summary": r.summary, "alerts": list(r.alerts),
                 "source": r.source, "markdown": r.markdown_path} for r in catalogue]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not len(catalogue):
        print("no runbooks found (see runbooks.paths in the config, or pass --path)", file=sys.stderr)
        return 1
    width = max(len(r.id) for r in catalogue)
    for runbook in catalogue:
        print(f"{runbook.id:<{width}}  {runbook.title}")
        print(f"{'':<{width}}  alerts: {', '.join(runbook.alerts)}")
    return 0


# -- show -------------------------------------------------------------------------------------------


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise ValueError(f"label {item!r} is not NAME=VALUE")
        name, value = item.split("=", 1)
        labels[name.strip()] = value.strip().strip('"')
    return labels


class _ReadOnlyState:
    """The live node's state, read through the components' own stores from its state database opened
    read-only (:meth:`StateDB.read_only`): never written here. Absent, unreadable or missing tables: no
    history, no escalations, nothing firing."""

    def __init__(self, state_dir: str) -> None:
        from watchdog.infra.state import StateDB
        from watchdog.notify.delivery.state_store import AlertStateStore
        from watchdog.runbooks.audit import RunbookState

        db = StateDB.read_only(Path(state_dir) / "state.db")
        self.runbooks = RunbookState(db) if db is not None else None
        self.alerts = AlertStateStore(db) if db is not None else None

    def runs(self, key: str, since_ms: int) -> tuple[int, ...]:
        if self.runbooks is None:
            return ()
        try:
            return self.runbooks.target_runs(key, since_ms)
        except sqlite3.Error:
            return ()

    def escalated(self, fingerprint: str) -> bool:
        if self.runbooks is None:
            return False
        try:
            return self.runbooks.escalation(fingerprint) is not None
        except sqlite3.Error:
            return False

    def firing(self, alertnames: tuple[str, ...]) -> list[tuple[str, dict[str, str]]]:
        from watchdog.model import AlertState

        if self.alerts is None:
            return []
        try:
            known = self.alerts.load_alerts()
        except (sqlite3.Error, ValueError, KeyError, TypeError):
            return []
        found = [(k.name, fp, dict(k.labels)) for fp, k in known.items()
                 if k.state is AlertState.FIRING and k.name in alertnames]
        return [(fp, labels) for _name, fp, labels in sorted(found, key=lambda row: row[:2])]


def _suggestion(runbook: Any, labels: Mapping[str, str], fingerprint: str, source: str,
                settings: Settings, state: _ReadOnlyState, now_ms: int) -> dict[str, Any]:
    from watchdog.config.settings import settings_document
    from watchdog.infra.logs import redact
    from watchdog.runbooks.planner import Policy, guards_text, history_from, plan_step, render_step
    from watchdog.runbooks.templating import TemplateContext

    policy = Policy.from_settings(settings.remediation)
    ctx = TemplateContext(labels=labels, config=settings_document(settings), vars=dict(settings.remediation.vars),
                          node=settings.node or _hostname())
    escalated = state.escalated(fingerprint)
    steps = []
    for step in runbook.remediate:
        decision = plan_step(step, render_step(step, ctx, runbook=runbook.id), policy,
                             history_from(state.runs, now_ms), now_ms, escalated=escalated)
        steps.append({"step": step.name, "kind": step.kind, "verdict": decision.verdict.value,
                      "reason": redact(decision.reason),
                      "action": redact(decision.action.display) if decision.action else "",
                      "guards": redact(guards_text(step, decision.requires_expr, decision.verify_expr))})
    diagnose = []
    for step in runbook.diagnose:
        rendered = render_step(step, ctx)
        diagnose.append({"step": step.name, "action": redact(rendered.action.display) if rendered.action
                         else "", "error": rendered.error})
    return {"alert": labels.get("alertname", ""), "labels": dict(labels), "fingerprint": fingerprint,
            "source": source, "escalated": escalated,
            "policy": {"mode": policy.mode.value, "dry_run": policy.dry_run},
            "steps": steps, "diagnose": diagnose}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _step_json(step: Any) -> dict[str, Any]:
    from watchdog.runbooks.planner import guards_text

    return {"name": step.name, "kind": step.kind, "description": step.description,
            "action": _template_text(step.action), "guards": guards_text(step),
            "timeout_seconds": step.timeout_s}


def _template_text(action: Any) -> str:
    """The action without an alert at hand, its placeholders in outline (``<labels.job>``)."""
    from watchdog.runbooks.steps import format_duration

    kind = action.kind
    if kind == "command":
        return " ".join(t.outline for t in action.argv)
    if kind == "systemd":
        return f"systemctl {action.verb} {action.unit.outline}"
    if kind == "http":
        return f"{action.method} {action.url.outline}"
    if kind == "signal":
        return f"{action.signal} -> MainPID of {action.unit.outline}"
    if kind in ("drain", "wait_idle", "canary", "readmit"):
        target = action.target
        text = f"{kind} job={target.job.outline}" if target.job is not None else f"{kind} gpu={target.gpu.outline}"
        if kind == "drain" and action.for_s:
            text += f" for {format_duration(action.for_s)}"
        if kind == "wait_idle":
            text += f" at most {format_duration(action.wait_s)}, then {action.on_timeout}"
        if kind == "canary":
            text += f" {action.passes} passes in a row within {format_duration(action.wait_s)}"
        return text
    return str(action.text.outline)


def _show(args: argparse.Namespace) -> int:
    from watchdog.infra.suggest import did_you_mean
    from watchdog.rules.alerting import fingerprint as alert_fingerprint

    loaded = _load(args)
    if loaded is None:
        return 2
    config, _, catalogue = loaded
    runbook = catalogue.get(args.id) or catalogue.for_alert(args.id)
    if runbook is None:
        names = [r.id for r in catalogue] + [a for r in catalogue for a in r.alerts]
        print(f"error: no runbook or alert named {args.id!r}{did_you_mean(args.id, names)}; runbooks: "
              f"{', '.join(r.id for r in catalogue)}", file=sys.stderr)
        return 1
    try:
        extra = _parse_labels(args.labels)
    except ValueError as exc:
        print(f"error: --labels: {exc}", file=sys.stderr)
        return 2
    if args.alert and args.alert not in runbook.alerts:
        print(f"warning: runbook {runbook.id} does not list alert {args.alert}", file=sys.stderr)
    now_ms = int(time.time() * 1000)
    state = _ReadOnlyState(config.state_dir)
    suggestions = []
    if args.alert or extra:
        labels = {"alertname": args.alert or runbook.alerts[0], **extra}
        fingerprint = alert_fingerprint(labels)
        suggestions.append(_suggestion(runbook, labels, fingerprint, "cli", config, state, now_ms))
    else:
        for fp, labels in state.firing(runbook.alerts):
            suggestions.append(_suggestion(runbook, labels, fp, "live", config, state, now_ms))
    if args.json:
        json.dump({"id": runbook.id, "title": runbook.title, "summary": runbook.summary,
                   "alerts": list(runbook.alerts), "markdown": runbook.markdown(),
                   "diagnose": [_step_json(s) for s in runbook.diagnose],
                   "remediate": [_step_json(s) for s in runbook.remediate],
                   "suggestions": suggestions}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _print_show(runbook, suggestions, args.no_markdown)
    return 0


def _print_show(runbook: Any, suggestions: list[dict[str, Any]], no_markdown: bool) -> None:
    from watchdog.runbooks.planner import guards_text

    markdown = runbook.markdown()
    if markdown and not no_markdown:
        print(markdown.rstrip())
        print()
    print(f"== {runbook.id}: {runbook.title}")
    print(f"alerts: {', '.join(runbook.alerts)}")
    print(f"source: {runbook.source}")
    print("diagnose (read-only, run when the alert fires):")
    for step in runbook.diagnose:
        print(f"  - {step.name}: {_template_text(step.action)}")
    print("remediate (in order):")
    for i, step in enumerate(runbook.remediate, 1):
        print(f"  {i}. {step.name} [{step.kind}] {_template_text(step.action)}")
        print(f"     guards: {guards_text(step)}")
    if not suggestions:
        print("\nno alert given and none firing here: pass --alert NAME --labels k=v,... for a suggestion")
    for s in suggestions:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(s["labels"].items()) if k != "alertname")
        print(f"\n== suggestion for {s['alert']}{{{shown}}} ({s['source']}; policy mode={s['policy']['mode']}"
              f"{', dry_run' if s['policy']['dry_run'] else ''}{'; ESCALATED' if s['escalated'] else ''})")
        for d in s["diagnose"]:
            print(f"  diagnose {d['step']}: {d['action'] or d['error']}")
        for i, step in enumerate(s["steps"], 1):
            print(f"  {i}. {step['step']} [{step['kind']}] {step['action'] or '(not rendered)'}")
            print(f"     → {step['verdict']}: {step['reason']}")
            print(f"     guards: {step['guards']}")


# -- check ------------------------------------------------------------------------------------------


class _AnyLabel(dict[str, str]):
    """Labels where every name has the placeholder value ``x`` (to render expressions for parsing)."""

    def get(self, key: str, default: Any = None) -> str:
        return "x"


def _check(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError, load_settings
    from watchdog.runbooks.catalogue import RunbookError, catalogue_from_settings, load_catalogue
    from watchdog.runbooks.conditions import check_expression
    from watchdog.runbooks.planner import render_step
    from watchdog.runbooks.templating import TemplateContext

    try:
        if args.paths:
            catalogue = load_catalogue(args.paths)
        else:
            config_path = Path(args.config) if args.config else None
            catalogue = catalogue_from_settings(load_settings(config_path).runbooks, config_path)
    except (ConfigError, RunbookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ctx = TemplateContext(labels=_AnyLabel(), vars=_AnyLabel(), node="x")
    problems = 0
    for runbook in catalogue:
        for step in runbook.remediate:
            rendered = render_step(step, ctx)
            for what, expr in (("requires", rendered.requires_expr), ("verify", rendered.verify_expr)):
                problem = check_expression(expr) if expr else ""
                if problem:
                    problems += 1
                    print(f"error: {runbook.source}: remediate step {step.name}: {what}: {problem}",
                          file=sys.stderr)
    if problems:
        return 1
    print(f"{len(catalogue)} runbooks ok, serving {len(catalogue.by_alert)} alerts")
    return 0

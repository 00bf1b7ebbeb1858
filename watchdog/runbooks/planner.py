"""Remediation decisions as pure logic: (step, rendered action, policy, history, now) → a decision.

Nothing here performs I/O: the manager gathers history from the audit table and condition results
from the store, and passes them in. The order of checks, first match wins:

1. ``remediation.mode: off``                       → skipped
2. a template that cannot be rendered               → refused (hostile value) / skipped (missing)
3. mode ``suggest``                                 → suggested (the agent never runs anything)
4. the node's allowlists (units, commands, URLs,    → skipped ("not allowlisted")
   engines for drain/readmit; waits need none)
5. no human approval and
   - a notify step that will not post by itself     → suggested (its text is in the suggestion)
   - mode ``approve``                               → awaiting_approval
   - mode ``auto`` but the step is not ``auto``      → awaiting_approval
   - mode ``auto`` but the alert is escalated        → awaiting_approval
6. ``cooldown`` since the last run of the same target → skipped
7. ``max_per_day`` runs of the same target in 24 h  → skipped
8. ``requires`` does not hold                       → skipped (``requires_not_met``: the plan moves on)
9. ``dry_run``                                      → dry_run (decided, audited, not executed)
10. otherwise                                       → run
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from urllib.parse import urlsplit

from watchdog.config.settings import RemediationMode, RemediationSettings
from watchdog.runbooks.steps import (
    EnginesOnGpu,
    NoEngine,
    RenderedAction,
    Step,
    StepError,
    format_duration,
    render_action,
)
from watchdog.runbooks.templating import Template, TemplateContext, TemplateMissing, TemplateRefused, render

DAY_MS = 86_400_000
SYSTEMCTL_READ_ONLY = ("status", "show", "is-active", "is-failed", "is-enabled", "list-units", "cat")


class Verdict(str, Enum):
    """What the planner decided for one step."""

    RUN = "run"
    DRY_RUN = "dry_run"
    SUGGEST = "suggested"
    AWAIT_APPROVAL = "awaiting_approval"
    SKIP = "skipped"
    REFUSE = "refused"


@dataclass(frozen=True)
class Policy:
    """The node's remediation policy: what the planner reads of the ``remediation`` settings."""

    mode: RemediationMode
    dry_run: bool
    allow_units: tuple[str, ...]
    allow_commands: tuple[str, ...]
    allow_urls: tuple[str, ...]
    approvers: tuple[str, ...]
    max_attempts_before_escalation: int
    escalation_window_ms: int
    diagnostics_commands: tuple[str, ...]
    diagnostics_urls: tuple[str, ...]
    allow_engines: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: RemediationSettings) -> Policy:
        """The policy of the ``remediation`` settings (defaults come from the config schema)."""
        return cls(
            mode=settings.mode,
            dry_run=settings.dry_run,
            allow_units=settings.allow.units,
            allow_commands=settings.allow.commands,
            allow_urls=settings.allow.urls,
            approvers=settings.approvers,
            max_attempts_before_escalation=settings.max_attempts_before_escalation,
            escalation_window_ms=int(settings.escalation_window_seconds * 1000),
            diagnostics_commands=settings.diagnostics.commands,
            diagnostics_urls=settings.diagnostics.urls,
            allow_engines=settings.allow.engines,
        )


# -- allowlists -------------------------------------------------------------------------------------


_PORT_WILDCARD = re.compile(r":\*(?=/|$)")


def url_allowed(url: str, prefixes: Sequence[str]) -> bool:
    """True when ``url`` has the scheme, host and port of one prefix and its path lies under the
    prefix's path (segment-wise: ``/drain`` allows ``/drain`` and ``/drain/x``, not ``/drainage``).
    A prefix ``http://host:*/`` matches any port. User info (``user@host``) never matches."""
    try:
        target = urlsplit(url)
        target_port = target.port
    except ValueError:
        return False
    if target.scheme not in ("http", "https") or not target.hostname or "@" in target.netloc:
        return False
    target_port = target_port or (443 if target.scheme == "https" else 80)
    for prefix in prefixes:
        any_port = bool(_PORT_WILDCARD.search(prefix))
        try:
            allowed = urlsplit(_PORT_WILDCARD.sub("", prefix, count=1))
            allowed_port = allowed.port or (443 if allowed.scheme == "https" else 80)
        except ValueError:
            continue
        if allowed.scheme != target.scheme or (allowed.hostname or "") != target.hostname:
            continue
        if not any_port and allowed_port != target_port:
            continue
        base = allowed.path.rstrip("/")
        if base and not (target.path == base or target.path.startswith(base + "/")):
            continue
        return True
    return False


def unit_allowed(unit: str, patterns: Sequence[str]) -> bool:
    """True when ``unit`` equals or glob-matches (``vllm@*.service``) an allowlisted unit."""
    return any(fnmatch.fnmatchcase(unit, pattern) for pattern in patterns)


def command_allowed(argv0: str, allowed: Sequence[str]) -> bool:
    """True when the program is allowlisted, compared exactly (name with name, path with path)."""
    return argv0 in allowed


def allowlist_problem(action: RenderedAction, policy: Policy) -> str:
    """Why the node's allowlists forbid executing ``action``; "" when they allow it."""
    if action.kind == "command":
        if not command_allowed(action.argv[0], policy.allow_commands):
            return f"command {action.argv[0]!r} is not in remediation.allow.commands"
    elif action.kind in ("systemd", "signal"):
        if not unit_allowed(action.unit, policy.allow_units):
            return f"unit {action.unit!r} is not in remediation.allow.units"
    elif action.kind == "http" and not url_allowed(action.url, policy.allow_urls):
        return f"URL {action.url!r} is not under remediation.allow.urls"
    elif action.kind in ("drain", "readmit"):
        if not action.jobs:
            return f"the engines on GPU {action.gpu} are resolved only by the agent (from its store)"
        refused = [job for job in action.jobs if not unit_allowed(job, policy.allow_engines)]
        if refused:
            return f"engine {refused[0]!r} is not in remediation.allow.engines"
    return ""


def diagnostic_problem(action: RenderedAction, policy: Policy) -> str:
    """Why a diagnose step may not run here; "" when it may (read-only tools and loopback GETs)."""
    if action.kind == "command":
        program = action.argv[0]
        if not command_allowed(program, policy.diagnostics_commands):
            return f"{program!r} is not in remediation.diagnostics.commands"
        if program.rsplit("/", 1)[-1] == "systemctl":
            verbs = [a for a in action.argv[1:] if not a.startswith("-")]
            if not verbs or verbs[0] not in SYSTEMCTL_READ_ONLY:
                return f"systemctl in diagnostics is limited to {', '.join(SYSTEMCTL_READ_ONLY)}"
        return ""
    if action.kind == "http":
        if action.method != "GET":
            return "diagnostics may only GET"
        if not url_allowed(action.url, policy.diagnostics_urls + policy.allow_urls):
            return f"URL {action.url!r} is not under remediation.diagnostics.urls"
        return ""
    return f"{action.kind} is not a diagnostic action"


# -- history and decisions --------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetHistory:
    """Past runs of one target (``RenderedAction.key``): run timestamps in ms, newest last."""

    runs_ms: tuple[int, ...] = ()

    def last_run_ms(self) -> int | None:
        """When it last ran, or None."""
        return self.runs_ms[-1] if self.runs_ms else None

    def runs_since(self, since_ms: int) -> int:
        """How many runs at or after ``since_ms``."""
        return sum(1 for t in self.runs_ms if t >= since_ms)


def history_from(target_runs: Callable[[str, int], tuple[int, ...]], now_ms: int) -> Callable[[str], TargetHistory]:
    """The ``history_for`` of :func:`plan_step`: each target's runs of the last day, read through an audit
    store's ``target_runs(action_key, since_ms)`` (:meth:`watchdog.runbooks.audit.RunbookState.target_runs`)."""
    def lookup(key: str) -> TargetHistory:
        return TargetHistory(target_runs(key, now_ms - DAY_MS))
    return lookup


@dataclass(frozen=True)
class Condition:
    """The result of a PromQL condition (``requires``): whether it holds and why (for messages)."""

    holds: bool
    detail: str = ""


@dataclass(frozen=True)
class StepDecision:
    """The planner's verdict on one step, with the reason shown to humans and written to the audit."""

    step: Step
    verdict: Verdict
    reason: str
    action: RenderedAction | None = None
    requires_not_met: bool = field(default=False)
    requires_expr: str = ""
    """The ``requires`` guard rendered with the alert's labels ("" when none, or not rendered)."""
    verify_expr: str = ""
    """The ``verify`` guard rendered with the alert's labels ("" when none, or not rendered)."""


def decide_step(
    step: Step,
    action: RenderedAction | None,
    render_error: str,
    policy: Policy,
    history: TargetHistory,
    now_ms: int,
    *,
    approved: bool = False,
    escalated: bool = False,
    refused: bool = False,
    requires: Condition | None = None,
) -> StepDecision:
    """Decide one step. ``action`` is None when rendering failed: ``render_error`` says why and
    ``refused`` tells a hostile value (refused) from a missing one (skipped). ``requires`` is the
    evaluated ``requires`` guard (None: none, or not evaluated)."""
    if policy.mode is RemediationMode.OFF:
        return StepDecision(step, Verdict.SKIP, "remediation.mode is off", action)
    if action is None:
        verdict = Verdict.REFUSE if refused else Verdict.SKIP
        return StepDecision(step, verdict, render_error, None)
    problem = allowlist_problem(action, policy) if action.kind != "notify" else ""
    if policy.mode is RemediationMode.SUGGEST:
        note = f" ({problem})" if problem else ""
        return StepDecision(step, Verdict.SUGGEST, f"remediation.mode is suggest: run it by hand{note}",
                            action)
    if problem:
        return StepDecision(step, Verdict.SKIP, f"{problem}: the agent will not run it", action)
    if not approved:
        if action.kind == "notify" and not (policy.mode is RemediationMode.AUTO and step.guards.auto):
            return StepDecision(step, Verdict.SUGGEST, "text only: shown in this suggestion", action)
        if policy.mode is RemediationMode.APPROVE:
            return StepDecision(step, Verdict.AWAIT_APPROVAL, "remediation.mode is approve", action)
        if not step.guards.auto:
            return StepDecision(step, Verdict.AWAIT_APPROVAL, "step is not auto: a human must approve",
                                action)
        if escalated:
            return StepDecision(step, Verdict.AWAIT_APPROVAL,
                                "alert is escalated: automatic action stopped", action)
    guards = step.guards
    last = history.last_run_ms()
    if guards.cooldown_s > 0 and last is not None and now_ms - last < guards.cooldown_s * 1000:
        ago = format_duration((now_ms - last) / 1000)
        return StepDecision(step, Verdict.SKIP,
                            f"cooldown: last ran {ago} ago, cooldown {format_duration(guards.cooldown_s)}",
                            action)
    if guards.max_per_day is not None and history.runs_since(now_ms - DAY_MS) >= guards.max_per_day:
        return StepDecision(step, Verdict.SKIP,
                            f"max_per_day: already ran {guards.max_per_day} times in 24h", action)
    if requires is not None and not requires.holds:
        return StepDecision(step, Verdict.SKIP, f"requires not met: {requires.detail}".rstrip(": "),
                            action, requires_not_met=True)
    if policy.dry_run:
        return StepDecision(step, Verdict.DRY_RUN, "remediation.dry_run: not executed", action)
    who = "approved" if approved else "auto"
    return StepDecision(step, Verdict.RUN, f"{who}; guards and policy allow it", action)


def should_escalate_recurrence(remediated_episodes: int, policy: Policy) -> bool:
    """True when an alert that fires again has already been remediated too often to try again."""
    return remediated_episodes >= policy.max_attempts_before_escalation


# -- whole-step planning (rendering + decision), shared by the manager and the CLI -------------------


@dataclass(frozen=True)
class RenderedStep:
    """A step rendered for one alert: its action and its requires/verify expressions, or why not."""

    action: RenderedAction | None
    requires_expr: str = ""
    verify_expr: str = ""
    error: str = ""
    refused: bool = False


def render_step(step: Step, ctx: TemplateContext, *, runbook: str = "",
                engines_on_gpu: EnginesOnGpu | None = None) -> RenderedStep:
    """Render the action and the guard expressions; a hostile value is ``refused``, a missing one (or a
    GPU no engine runs on) not. ``runbook`` names the owner of a ``drain`` (``runbook:<id>``) and its
    reason; ``engines_on_gpu`` resolves ``gpu:`` targets of serving steps (None: left symbolic)."""
    origin = f"runbook {runbook or '?'} step {step.name} for {ctx.labels.get('alertname') or 'an alert'}"
    try:
        action = render_action(step.action, ctx, engines_on_gpu=engines_on_gpu, origin=origin,
                               set_by=f"runbook:{runbook}" if runbook else "runbook")
        requires = render(step.guards.requires, ctx) if step.guards.requires else ""
        verify = render(step.guards.verify.expr, ctx) if step.guards.verify else ""
    except TemplateRefused as exc:
        return RenderedStep(None, error=f"refused: {exc}", refused=True)
    except TemplateMissing as exc:
        return RenderedStep(None, _render_or_empty(step.guards.requires, ctx),
                            _render_or_empty(step.guards.verify.expr if step.guards.verify else None, ctx),
                            error=f"cannot render: {exc}")
    except StepError as exc:
        return RenderedStep(None, error=f"refused: {exc.problem}", refused=True)
    except NoEngine as exc:
        return RenderedStep(None, error=f"cannot render: {exc}")
    return RenderedStep(action, requires, verify)


def _render_or_empty(template: Template | None, ctx: TemplateContext) -> str:
    """``template`` rendered for display, or "" when it cannot be (the step is not rendered anyway)."""
    if template is None:
        return ""
    try:
        return render(template, ctx)
    except (TemplateMissing, TemplateRefused):
        return ""


def plan_step(
    step: Step,
    rendered: RenderedStep,
    policy: Policy,
    history_for: Callable[[str], TargetHistory],
    now_ms: int,
    *,
    approved: bool = False,
    escalated: bool = False,
    check: Callable[[str], Condition] | None = None,
) -> StepDecision:
    """:func:`decide_step` with history looked up by target and ``requires`` evaluated only when it
    matters (the step would otherwise run). ``check`` None: requires is not evaluated (offline)."""
    history = history_for(rendered.action.key) if rendered.action is not None else TargetHistory()
    decision = decide_step(step, rendered.action, rendered.error, policy, history, now_ms,
                           approved=approved, escalated=escalated, refused=rendered.refused)
    requires_expr, verify_expr = rendered.requires_expr, rendered.verify_expr
    if decision.verdict in (Verdict.RUN, Verdict.DRY_RUN) and rendered.requires_expr:
        if check is None:
            return StepDecision(step, decision.verdict,
                                f"{decision.reason} (if requires holds: {rendered.requires_expr})",
                                decision.action, requires_expr=requires_expr, verify_expr=verify_expr)
        condition = check(rendered.requires_expr)
        decision = decide_step(step, rendered.action, rendered.error, policy, history, now_ms,
                               approved=approved, escalated=escalated, refused=rendered.refused,
                               requires=condition)
    return replace(decision, requires_expr=requires_expr, verify_expr=verify_expr)


def guards_text(step: Step, requires_expr: str = "", verify_expr: str = "") -> str:
    """The step's guards in one line: ``auto, cooldown 30m, max 3/day, requires ..., verify ...``, with
    the expressions as rendered for an alert when given, else in outline (``<labels.job>``)."""
    g = step.guards
    parts = ["auto" if g.auto else "manual"]
    if g.cooldown_s:
        parts.append(f"cooldown {format_duration(g.cooldown_s)}")
    if g.max_per_day is not None:
        parts.append(f"max {g.max_per_day}/day")
    if g.requires is not None:
        parts.append(f"requires {requires_expr or g.requires.outline}")
    if g.verify is not None:
        parts.append(f"verify within {format_duration(g.verify.timeout_s)}: {verify_expr or g.verify.expr.outline}")
    return ", ".join(parts)


def format_plan(decisions: Sequence[StepDecision], policy: Policy) -> str:
    """The suggestion text: one numbered entry per remediation step with what would run and why."""
    lines = [f"policy: mode={policy.mode.value}" + (", dry_run" if policy.dry_run else "")]
    for i, d in enumerate(decisions, 1):
        what = d.action.display if d.action is not None else "(not rendered)"
        lines.append(f"{i}. {d.step.name} [{d.step.kind}] {what}")
        lines.append(f"   → {d.verdict.value}: {d.reason}")
        lines.append(f"   guards: {guards_text(d.step, d.requires_expr, d.verify_expr)}")
        if d.step.description:
            lines.append(f"   {d.step.description}")
    return "\n".join(lines)

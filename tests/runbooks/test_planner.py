"""The planner's decisions as tables: policy × guards × history → verdict and reason."""

from __future__ import annotations

from typing import Any

import pytest

from watchdog.config.settings import RemediationSettings, section_settings
from watchdog.runbooks.planner import (
    DAY_MS,
    Condition,
    Policy,
    TargetHistory,
    Verdict,
    decide_step,
    diagnostic_problem,
    plan_step,
    render_step,
    unit_allowed,
    url_allowed,
)
from watchdog.runbooks.steps import RenderedAction, parse_step
from watchdog.runbooks.templating import TemplateContext

NOW = 1_700_000_000_000
RESTART = parse_step({"name": "restart", "systemd": {"unit": "vllm.service"}, "auto": True,
                      "cooldown": "30m", "max_per_day": 2}, diagnose=False)
MANUAL = parse_step({"name": "reset", "command": ["nvidia-smi", "-r", "-i", "0"]}, diagnose=False)
ACTION = RenderedAction("systemd", unit="vllm.service", verb="restart")
def policy(mode: str = "suggest", dry_run: bool = False, allow_units: tuple[str, ...] = (),
           allow_commands: tuple[str, ...] = ()) -> Policy:
    """The policy of a ``remediation`` section, with the config schema's defaults for the rest."""
    allow = {"units": list(allow_units), "commands": list(allow_commands)}
    section = {"mode": mode, "dry_run": dry_run, "allow": allow}
    return Policy.from_settings(section_settings(RemediationSettings, "remediation", section))


AUTO = policy(mode="auto", allow_units=("vllm.service",), allow_commands=("nvidia-smi",))


NO_HISTORY = TargetHistory()


def decide(step=RESTART, action=ACTION, policy=AUTO, history=NO_HISTORY, **kw):  # type: ignore[no-untyped-def]
    return decide_step(step, action, "", policy, history, NOW, **kw)


@pytest.mark.parametrize(("policy", "kw", "verdict", "words"), [
    (policy(), {}, Verdict.SUGGEST, "mode is suggest"),
    (policy(mode="off", allow_units=("vllm.service",)), {}, Verdict.SKIP, "mode is off"),
    (policy(mode="approve", allow_units=("vllm.service",)), {}, Verdict.AWAIT_APPROVAL, "approve"),
    (policy(mode="auto"), {}, Verdict.SKIP, "not in remediation.allow.units"),
    (policy(mode="approve"), {"approved": True}, Verdict.SKIP, "not in remediation.allow.units"),
    (AUTO, {}, Verdict.RUN, "auto"),
    (AUTO, {"escalated": True}, Verdict.AWAIT_APPROVAL, "escalated"),
    (AUTO, {"escalated": True, "approved": True}, Verdict.RUN, "approved"),
    (policy(mode="approve", allow_units=("vllm.service",)), {"approved": True}, Verdict.RUN, "approved"),
    (policy(mode="auto", dry_run=True, allow_units=("vllm.service",)), {}, Verdict.DRY_RUN, "dry_run"),
    (AUTO, {"requires": Condition(False, "empty result")}, Verdict.SKIP, "requires not met"),
    (AUTO, {"requires": Condition(True, "1 series")}, Verdict.RUN, "auto"),
])
def test_policy_table(policy: Policy, kw: dict[str, Any], verdict: Verdict, words: str) -> None:
    d = decide(policy=policy, **kw)
    assert d.verdict is verdict, d
    assert words in d.reason, d


def test_a_non_auto_step_waits_for_a_human_even_in_auto_mode() -> None:
    action = RenderedAction("command", argv=("nvidia-smi", "-r", "-i", "0"))
    assert decide(step=MANUAL, action=action).verdict is Verdict.AWAIT_APPROVAL
    assert decide(step=MANUAL, action=action, approved=True).verdict is Verdict.RUN


def test_cooldown_and_daily_cap_come_from_history() -> None:
    recent = TargetHistory((NOW - 10 * 60_000,))
    d = decide(history=recent)
    assert d.verdict is Verdict.SKIP and "cooldown" in d.reason and "10m" in d.reason
    assert decide(history=TargetHistory((NOW - 31 * 60_000,))).verdict is Verdict.RUN
    two_today = TargetHistory((NOW - 5 * 3_600_000, NOW - 2 * 3_600_000))
    d = decide(history=two_today)
    assert d.verdict is Verdict.SKIP and "max_per_day" in d.reason
    yesterday = TargetHistory((NOW - DAY_MS - 1, NOW - 5 * 3_600_000))
    assert decide(history=yesterday).verdict is Verdict.RUN
    # approval does not bypass the guards
    assert decide(history=recent, approved=True).verdict is Verdict.SKIP


def test_a_refused_template_is_refused_and_a_missing_one_skipped() -> None:
    d = decide_step(RESTART, None, "refused: bad", AUTO, TargetHistory(), NOW, refused=True)
    assert d.verdict is Verdict.REFUSE
    d = decide_step(RESTART, None, "cannot render", AUTO, TargetHistory(), NOW)
    assert d.verdict is Verdict.SKIP


def test_plan_step_renders_and_refuses_a_hostile_label() -> None:
    step = parse_step({"name": "reset", "command": ["nvidia-smi", "-r", "-i", "{{ labels.gpu }}"],
                       "auto": True}, diagnose=False)
    rendered = render_step(step, TemplateContext(labels={"gpu": "--help; rm -rf /"}))
    assert rendered.refused and rendered.action is None
    d = plan_step(step, rendered, AUTO, lambda key: TargetHistory(), NOW)
    assert d.verdict is Verdict.REFUSE and "starts with '-'" in d.reason
    rendered = render_step(step, TemplateContext(labels={"gpu": "2"}))
    d = plan_step(step, rendered, AUTO, lambda key: TargetHistory(), NOW)
    assert d.verdict is Verdict.RUN and d.action is not None
    assert d.action.argv == ("nvidia-smi", "-r", "-i", "2")


def test_requires_is_only_evaluated_when_the_step_would_run() -> None:
    step = parse_step({"name": "restart", "systemd": {"unit": "vllm.service"}, "auto": True,
                       "requires": 'up{job="{{ labels.job }}"} == 0'}, diagnose=False)
    rendered = render_step(step, TemplateContext(labels={"job": "vllm"}))
    asked: list[str] = []

    def check(expr: str) -> Condition:
        asked.append(expr)
        return Condition(False, "empty result")

    d = plan_step(step, rendered, policy(), lambda key: TargetHistory(), NOW, check=check)
    assert d.verdict is Verdict.SUGGEST and asked == []
    d = plan_step(step, rendered, AUTO, lambda key: TargetHistory(), NOW, check=check)
    assert d.verdict is Verdict.SKIP and d.requires_not_met
    assert asked == ['up{job="vllm"} == 0']


@pytest.mark.parametrize(("url", "prefixes", "ok"), [
    ("http://gw:8080/drain", ["http://gw:8080/drain"], True),
    ("http://gw:8080/drain/node-1?x=1", ["http://gw:8080/drain"], True),
    ("http://gw:8080/drainage", ["http://gw:8080/drain"], False),
    ("http://gw:8081/drain", ["http://gw:8080/drain"], False),
    ("https://gw:8080/drain", ["http://gw:8080/drain"], False),
    ("http://gw:8080.evil.com/drain", ["http://gw:8080"], False),
    ("http://gw:8080@evil.com/drain", ["http://gw:8080/"], False),
    ("http://user@gw:8080/drain", ["http://gw:8080/"], False),
    ("http://gw/x", ["http://gw:80/"], True),
    ("http://127.0.0.1:8000/metrics", ["http://127.0.0.1:*/"], True),
    ("http://127.0.0.2:8000/metrics", ["http://127.0.0.1:*/"], False),
    ("file:///etc/passwd", ["http://127.0.0.1:*/"], False),
])
def test_url_allowlist(url: str, prefixes: list[str], ok: bool) -> None:
    assert url_allowed(url, prefixes) is ok


def test_unit_allowlist_globs() -> None:
    assert unit_allowed("vllm@3.service", ["vllm@*.service"])
    assert not unit_allowed("sshd.service", ["vllm@*.service"])


def test_diagnostics_are_limited_to_read_only_tools() -> None:
    defaults = policy()

    def command(*argv: str) -> str:
        return diagnostic_problem(RenderedAction("command", argv=argv), defaults)

    assert command("nvidia-smi", "-q") == ""
    assert "not in" in command("/usr/bin/rm", "-rf", "/")
    assert command("systemctl", "status", "x.service") == ""
    assert "limited" in command("systemctl", "restart", "x")
    get = RenderedAction("http", method="GET", url="http://127.0.0.1:8000/metrics")
    assert diagnostic_problem(get, defaults) == ""
    far = RenderedAction("http", method="GET", url="http://10.1.1.1:8000/metrics")
    assert "not under" in diagnostic_problem(far, defaults)

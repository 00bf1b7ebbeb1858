"""The runbooks we ship: every alert of the default rule pack is served, and every runbook is usable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.alert_names import (
    GPU_PRESENCE_ALERTS,
    ISSUE_5_ALERTS,
    ISSUE_15_ALERTS,
    SERVING_VERDICT_ALERTS,
)
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.runbooks.catalogue import Catalogue, Runbook, load_catalogue
from watchdog.runbooks.planner import Policy, diagnostic_problem, render_step
from watchdog.runbooks.templating import TemplateContext

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


SECTIONS = ("## Symptoms", "## How to confirm", "## Root causes", "## Immediate mitigation", "## Lasting fix",
            "## When to escalate")

# Labels a firing alert of each family carries, for rendering every template.
SAMPLE_LABELS = {"gpu": "3", "uuid": "GPU-0f1e2d3c", "xid": "79", "link": "2", "reason": "hw_slowdown",
                 "job": "vllm-llama", "instance": "127.0.0.1:8000", "process": "python3",
                 "model_name": "llama", "notifier": "slack", "knob": "max_num_seqs"}
CONFIG = load_config_text("""
engines:
  - {job: vllm-llama, url: "http://127.0.0.1:8000/metrics", unit: vllm-llama.service}
remediation:
  vars:
    gateway_drain_url: http://gateway.local:9000/admin/drain
    gateway_shed_url: http://gateway.local:9000/admin/shed
    gateway_limits_url: http://gateway.local:9000/admin/limits
    gateway_routing_url: http://gateway.local:9000/admin/routing
    autoscaler_url: http://autoscaler.local/scale
    reduced_power_limit_watts: "500"
""")


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue([RUNBOOKS])


def all_runbooks() -> list[Runbook]:
    return list(load_catalogue([RUNBOOKS]))


def test_every_alert_of_the_rule_pack_has_a_runbook(catalogue: Catalogue) -> None:
    missing = [a for a in (*ISSUE_5_ALERTS, *ISSUE_15_ALERTS) if catalogue.for_alert(a) is None]
    assert missing == []
    # Plus the agent's own alert about a failing notifier (raised by the dispatcher, not a rule).
    assert set(catalogue.by_alert) == {*ISSUE_5_ALERTS, *GPU_PRESENCE_ALERTS, *ISSUE_15_ALERTS,
                                       *SERVING_VERDICT_ALERTS, "WatchdogNotifierFailing"}


@pytest.mark.parametrize("runbook", all_runbooks(), ids=lambda r: r.id)
def test_markdown_has_every_section(runbook: Runbook) -> None:
    text = runbook.markdown()
    assert text.startswith("# "), f"{runbook.id}.md is missing or has no title"
    for section in SECTIONS:
        assert section in text, f"{runbook.id}.md lacks {section}"
    for alert in runbook.alerts:
        assert f"`{alert}`" in text, f"{runbook.id}.md does not name {alert}"
    for step in runbook.remediate:
        assert f"`{step.name}`" in text, f"{runbook.id}.md does not explain step {step.name}"


@pytest.mark.parametrize("runbook", all_runbooks(), ids=lambda r: r.id)
def test_every_step_renders_for_a_typical_alert(runbook: Runbook) -> None:
    ctx = TemplateContext(labels={"alertname": runbook.alerts[0], **SAMPLE_LABELS}, config=CONFIG,
                          vars=CONFIG["remediation"]["vars"], node="gpu-node-1")
    policy = Policy.from_settings(settings_from_config(CONFIG).remediation)
    for step in runbook.diagnose:
        rendered = render_step(step, ctx)
        assert rendered.action is not None, (step.name, rendered.error)
        assert diagnostic_problem(rendered.action, policy) == "", step.name
    for step in runbook.remediate:
        rendered = render_step(step, ctx)
        assert rendered.action is not None, (step.name, rendered.error)


@pytest.mark.parametrize("runbook", all_runbooks(), ids=lambda r: r.id)
def test_guard_expressions_are_valid_promql(runbook: Runbook) -> None:
    promql = pytest.importorskip("watchdog.promql")
    ctx = TemplateContext(labels={"alertname": runbook.alerts[0], **SAMPLE_LABELS}, config=CONFIG, node="n")
    for step in runbook.remediate:
        rendered = render_step(step, ctx)
        for expr in (rendered.requires_expr, rendered.verify_expr):
            if expr:
                promql.parse_query(expr)


@pytest.mark.parametrize("runbook", all_runbooks(), ids=lambda r: r.id)
def test_automatic_steps_are_the_reversible_ones(runbook: Runbook) -> None:
    """Only notify, gateway calls and engine restarts may be auto; resets, reboots and kills never are."""
    for step in runbook.remediate:
        if not step.guards.auto:
            continue
        assert step.kind in ("notify", "http", "systemd"), (runbook.id, step.name)
        if step.kind == "systemd":
            assert step.guards.requires is not None and step.guards.verify is not None, step.name
            assert step.guards.max_per_day is not None and step.guards.cooldown_s > 0, step.name
        if step.kind == "http":
            assert step.guards.cooldown_s > 0 and step.guards.max_per_day is not None, step.name


def test_no_diagnostic_prints_process_arguments(catalogue: Catalogue) -> None:
    """ps with ``args``/``cmd`` would leak API keys passed on engine command lines into notifications."""
    for runbook in catalogue:
        for step in runbook.diagnose:
            argv = " ".join(t.source for t in getattr(step.action, "argv", ()))
            assert not re.search(r"\b(args|cmd|command)\b", argv) or not argv.startswith("ps"), step.name

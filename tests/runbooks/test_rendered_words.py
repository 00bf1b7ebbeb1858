"""Words that render: every step of every shipped runbook, planned for a firing alert of each alert it
covers, reaches the operator without template syntax. Suggestions, diagnostics, guards (requires and
verify expressions) and the reasons a step cannot run are all rendered with the alert's labels; what
cannot be rendered (a label the alert lacks, a var the operator has not set) is named in outline
(``<vars.gateway_shed_url>``), never as raw ``{{ }}``."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from tests.support.settings import settings_of
from watchdog.cli import main
from watchdog.config.settings import settings_document
from watchdog.infra.paths import asset_dir
from watchdog.rules.loader import load_rule_files, shipped_rule_files
from watchdog.runbooks.catalogue import load_catalogue
from watchdog.runbooks.planner import Policy, TargetHistory, format_plan, plan_step, render_step
from watchdog.runbooks.templating import TemplateContext

CATALOGUE = load_catalogue([asset_dir("runbooks")])  # type: ignore[list-item]
SEVERITY = {rule.name: rule.labels.get("severity", "warning")
            for _, rule in load_rule_files(shipped_rule_files()).alerting_rules()}
FULL_LABELS = {"job": "vllm", "instance": "127.0.0.1:8000", "gpu": "3", "uuid": "GPU-5f0c2a",
               "model_name": "llama", "engine": "0", "xid": "79", "knob": "max_num_seqs",
               "notifier": "slack", "process": "python3", "link": "2", "slo": "ttft"}
VARS = {"autoscaler_url": "http://127.0.0.1:9000/scale", "gateway_drain_url": "http://127.0.0.1:9000/drain",
        "gateway_limits_url": "http://127.0.0.1:9000/limits", "gateway_routing_url": "http://127.0.0.1:9000/routing",
        "gateway_shed_url": "http://127.0.0.1:9000/shed", "reduced_power_limit_watts": "500"}
CASES = [(rb.id, alert) for rb in CATALOGUE for alert in rb.alerts]


def _config(tmp_path: Path, with_vars: bool) -> Path:
    doc = {"state_dir": str(tmp_path / "state"), "node": "gpu-node-01",
           "engines": [{"job": "vllm", "url": "http://127.0.0.1:8000/metrics", "unit": "vllm.service"}],
           "remediation": {"vars": VARS if with_vars else {}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _labels(alert: str, full: bool) -> dict[str, str]:
    return {"alertname": alert, "severity": SEVERITY.get(alert, "warning"), **(FULL_LABELS if full else {})}


def test_every_shipped_alert_with_a_runbook_is_covered() -> None:
    assert len(CASES) >= 30
    assert {alert for _, alert in CASES} <= set(SEVERITY) | {"WatchdogNotifierFailing"}


@pytest.mark.parametrize(("with_vars", "full"), [(True, True), (False, False)], ids=["complete", "bare"])
def test_the_planned_suggestion_renders(with_vars: bool, full: bool, tmp_path: Path) -> None:
    """What the agent sends when the alert fires (the runbook_suggestion text, format_plan)."""
    settings = settings_of(yaml.safe_load(_config(tmp_path, with_vars).read_text()))
    policy = Policy.from_settings(settings.remediation)
    problems = []
    for runbook_id, alert in CASES:
        runbook = CATALOGUE.runbooks[runbook_id]
        labels = _labels(alert, full)
        ctx = TemplateContext(labels=labels, config=settings_document(settings),
                              vars=dict(settings.remediation.vars), node="gpu-node-01")
        decisions = [plan_step(step, render_step(step, ctx), policy, lambda _key: TargetHistory(), 0)
                     for step in runbook.remediate]
        diagnose = [render_step(step, ctx) for step in runbook.diagnose]
        text = "\n".join([format_plan(decisions, policy),
                          *(d.action.display if d.action else d.error for d in diagnose)])
        if "{{" in text or "}}" in text:
            problems.append(f"{runbook_id} for {alert}:\n{text}")
        if full and with_vars:
            unrendered = [d.step.name for d in decisions if d.action is None]
            assert not unrendered, f"{runbook_id}/{alert}: not rendered with every label and var: {unrendered}"
            verify = [d.verify_expr for d in decisions if d.step.guards.verify is not None]
            assert all(v and '"vllm"' in v for v in verify if "job" in v), verify
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize(("with_vars", "full"), [(True, True), (False, False)], ids=["complete", "bare"])
def test_runbooks_show_renders(with_vars: bool, full: bool, tmp_path: Path) -> None:
    """What `runbooks show ID --alert NAME --labels ...` prints: the runbook (in outline) and the suggestion."""
    config = _config(tmp_path, with_vars)
    problems = []
    for runbook_id, alert in CASES:
        labels = ",".join(f"{k}={v}" for k, v in _labels(alert, full).items() if k != "alertname")
        out = io.StringIO()
        with redirect_stdout(out):
            code = main(["runbooks", "show", runbook_id, "--alert", alert, "--labels", labels,
                         "--config", str(config), "--no-markdown"])
        assert code == 0, out.getvalue()
        text = out.getvalue()
        assert f"== suggestion for {alert}" in text
        if "{{" in text or "}}" in text:
            problems.append(f"{runbook_id} for {alert}:\n{text}")
    assert not problems, "\n\n".join(problems)

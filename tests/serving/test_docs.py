"""The verdict model's documentation and data tables agree with the code and the rule pack."""

from __future__ import annotations

from pathlib import Path

import yaml

from watchdog.config.loader import schema
from watchdog.serving.faults import ALERT_FAULTS
from watchdog.serving.reasons import REASON_CODES

ROOT = Path(__file__).resolve().parents[2]


def _rule_alerts() -> dict[str, list[dict[str, str]]]:
    """Alert name -> the label sets of its rules, over every shipped rule file."""
    out: dict[str, list[dict[str, str]]] = {}
    for path in sorted((ROOT / "rules").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out.setdefault(rule["alert"], []).append(rule.get("labels", {}))
    return out


def test_every_alert_the_verdict_engine_reads_exists_with_its_labels() -> None:
    alerts = _rule_alerts()
    for row in ALERT_FAULTS:
        assert row.alertname in alerts, row.alertname
        # a row's fixed labels (cause, severity) must be one of the alert's rules' labels
        assert any(all(labels.get(k) == v for k, v in row.labels) for labels in alerts[row.alertname]), row


def test_every_reason_code_and_fault_is_documented() -> None:
    text = (ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8")
    for code in REASON_CODES:
        assert f"`{code}`" in text, code
    for row in ALERT_FAULTS:
        assert f"| `{row.alertname}` |" in text, row.alertname


def test_every_serving_setting_is_documented_with_its_default() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = schema()["properties"]["serving"]["properties"]
    for key, spec in section.items():
        if spec.get("type") == "object":
            for inner, inner_spec in spec["properties"].items():
                assert f"`serving.{key}.{inner}` ({str(inner_spec['default']).lower()}" in text, inner
        else:
            assert f"`serving.{key}` ({spec['default']:g}" in text, key

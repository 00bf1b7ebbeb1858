"""The log notifier on a terminal: one aligned line per event, suggestions as an indented numbered list,
diagnostics folded, values with sensible precision."""

from __future__ import annotations

from watchdog.notify.channels.log import format_text


def _alert(name: str, value: float) -> dict[str, object]:
    return {"event": "alert_firing", "alertname": name, "severity": "critical", "value": value,
            "summary": f"{name} summary", "labels": {"alertname": name, "severity": "critical", "gpu": "3"}}


def test_alert_lines_align_and_values_are_readable() -> None:
    short = format_text(_alert("GpuHot", 125.00000000000001)).splitlines()
    long = format_text(_alert("EnginePrefixCacheThrashing", 0.97312345)).splitlines()
    assert short[0].index("GpuHot summary") == long[0].index("EnginePrefixCacheThrashing summary")
    assert short[0].startswith("FIRING   critical GpuHot")
    assert short[1] == " " * 9 + "gpu=3  value=125"
    assert long[1].endswith("value=0.9731")


def test_suggestions_are_a_numbered_list_and_diagnostics_fold() -> None:
    plan = "policy: mode=suggest\n1. restart-engine [systemd] systemctl restart vllm\n   → suggested\n" \
           "2. tell-oncall [notify] ..."
    lines = format_text({"event": "runbook_suggestion", "kind": "suggestion", "alertname": "EngineDown",
                         "title": "runbook engine-down", "text": plan}).splitlines()
    assert lines[0].startswith("RUNBOOK  suggest  EngineDown ")
    assert lines[0].index("runbook engine-down") == format_text(_alert("GpuHot", 1.0)).index("GpuHot summary")
    assert lines[2] == " " * 11 + "1. restart-engine [systemd] systemctl restart vllm"
    assert lines[4] == " " * 11 + "2. tell-oncall [notify] ..."
    output = "\n".join(f"line {i}" for i in range(40))
    folded = format_text({"event": "runbook_diagnostics", "kind": "diagnostics", "alertname": "EngineDown",
                          "title": "engine-log", "text": output}).splitlines()
    assert len(folded) == 5 and folded[-1].endswith("… 37 more line(s) (JSON log, Slack thread)")

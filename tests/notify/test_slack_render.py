"""Every Slack message kind passes our Block Kit checker (Slack's documented limits and escaping rules),
and reads right to a person: dates render, labels with <, > and & show as typed, nothing is cut mid-way."""

from __future__ import annotations

import pytest

from tests.support.blockkit import escaping_problems, validate_message, visible_text
from watchdog.model import Alert, AlertState
from watchdog.notify.channels.slack.blocks import (
    Links,
    Rendered,
    render_alert_message,
    render_event,
    render_resolved_reply,
    render_standalone_resolved,
    value_text,
)

FIRED_MS = 1_800_000_000_000  # 2027-01-15 08:00:00Z
RESOLVED_MS = FIRED_MS + 754_000
LINKS = Links(grafana_url="https://grafana.example/", runbook_base_url="https://runbooks.example/rb")


def _alert(gpu: str, **annotations: str) -> Alert:
    return Alert(state=AlertState.RESOLVED, active_at_ms=FIRED_MS,
        fingerprint=f"fp{gpu:0>14}", name="GpuThermalMarginLow",
        labels={"alertname": "GpuThermalMarginLow", "severity": "warning", "gpu": gpu, "uuid": f"GPU-{gpu}",
                "job": "vllm<a&b>", "instance": "127.0.0.1:8000", "model_name": "llama <3>"},
        annotations={"summary": annotations.get("summary", f"GPU {gpu} is 4 °C from slowdown (<5 & >0)"),
                     "description": annotations.get("description", "a > b & c < d"), "runbook": "gpu-thermal-margin"},
        value=125.00000000000001, fired_at_ms=FIRED_MS, resolved_at_ms=RESOLVED_MS,
        generator="max(watchdog_gpu_temperature_celsius) > 80")


def _kinds() -> dict[str, Rendered]:
    one, many = [_alert("3")], [_alert(str(g)) for g in range(30)]
    long_output = "line with <tags> & ```fences```\n" * 400
    out = {
        "firing": render_alert_message(one, [], "gpu-node-1", LINKS, "GPU thermal margin", interactive=True),
        "firing-group": render_alert_message(many, [m.fingerprint for m in many[:5]], "gpu-node-1", LINKS),
        "resolved": render_alert_message(one, [one[0].fingerprint], "gpu-node-1", LINKS),
        "resolved-reply": render_resolved_reply(many, "gpu-node-1"),
        "standalone-resolved": render_standalone_resolved(one, "gpu-node-1", Links()),
        "huge-description": render_alert_message([_alert("1", description="x&y " * 2000)], [], "n", LINKS),
    }
    for kind in ("diagnostics", "suggestion", "decision", "result"):
        out[kind] = render_event(kind, "nvidia-smi <q>", long_output, "GpuThermalMarginLow",
                                 approvals=[("fp1", "restart-engine"), ("fp1", "drain-node")], standalone=True)
    return out


@pytest.mark.parametrize("kind", list(_kinds()))
def test_every_message_kind_is_valid_block_kit(kind: str) -> None:
    body = _kinds()[kind]
    assert validate_message(body.text, body.blocks) == []
    assert escaping_problems(body.text) == []  # the fallback text is mrkdwn too


def test_a_person_sees_dates_and_labels_as_typed() -> None:
    body = _kinds()["firing"]
    seen = visible_text(body.blocks)
    assert "<!date" not in seen and "&lt;" not in seen and "&amp;" not in seen
    assert "2027-01-15 08:00:00Z" in seen  # the date token's fallback: the token itself rendered
    assert "Engine\nvllm<a&b> 127.0.0.1:8000" in seen
    assert "GPU 3 is 4 °C from slowdown (<5 & >0)" in seen
    assert "Value\n125" in seen and "125.00000000000001" not in seen
    assert "GPU thermal margin" in seen  # the runbook link's label, not its URL
    assert "[Acknowledge]\n[Silence 1h]" in seen
    raw = str(body.blocks)
    assert "<!date^1800000000^{date_short_pretty} {time_secs}|2027-01-15 08:00:00Z>" in raw


def test_resolved_reply_reads_as_a_sentence() -> None:
    seen = visible_text(_kinds()["resolved-reply"].blocks)
    assert "resolved 2027-01-15 08:12:34Z after 12m 34s" in seen
    assert "… and" not in seen or "more" in seen


def test_diagnostics_stay_one_code_block_when_cut() -> None:
    body = _kinds()["diagnostics"]
    text = body.blocks[0]["text"]["text"]
    assert text.count("```") == 2 and text.endswith("…```")
    assert "line with <tags> & `\u200b``fences" in visible_text(body.blocks)
    assert "[Approve]\n[Skip]\n[Acknowledge]\n[Silence 1h]" in visible_text(body.blocks)


def test_the_checker_catches_what_slack_rejects_or_garbles() -> None:
    too_many = [{"type": "divider"}] * 51
    assert validate_message("t", too_many) == ["blocks: 51 blocks, Slack allows 50"]
    bad = [
        {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "a &lt;!date^1^{date}|x&gt; b & c"}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": "f"}] * 11},
        {"type": "section"},
        {"type": "actions", "elements": [
            {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "x" * 76}},
            {"type": "button", "action_id": "a", "text": {"type": "mrkdwn", "text": "ok"}, "style": "red"}]},
    ]
    problems = validate_message("", bad)
    assert problems == [
        "text: the fallback text is empty",
        "blocks[0].text: 151 chars, Slack allows 150",
        "blocks[1].text: unescaped '&'",
        "blocks[2].fields: 11 fields, Slack allows 10",
        "blocks[3]: a section needs text or fields",
        "blocks[4].elements[0].text: 76 chars, Slack allows 75",
        "blocks[4].elements[1].action_id: 'a' is used twice in one block",
        "blocks[4].elements[1].text: must be plain_text",
        "blocks[4].elements[1].style: 'red' is not primary or danger",
    ]
    assert escaping_problems("<https://x|ok> <!date^1^{date}|d> <@U123> <!here> &amp;") == []
    assert escaping_problems("a <b> c") == ["unescaped '<' near 'a <b> c'", "unescaped '>' near 'a <b> c'"]


def test_the_value_field_reads_like_the_summary() -> None:
    ratio = Alert(state=AlertState.FIRING, active_at_ms=FIRED_MS, fingerprint="fp-ratio", name="EngineRetryStorm",
                  labels={"alertname": "EngineRetryStorm", "severity": "warning", "job": "vllm"},
                  annotations={"summary": "vllm: 49.09% of requests aborted while the queue grows"},
                  value=0.49087, fired_at_ms=FIRED_MS)
    assert value_text(ratio) == "49.09%"
    body = render_alert_message([ratio], [], "gpu-node-1", LINKS)
    assert "0.4909" not in str(body.blocks)  # the Value field says 49.09%, as the summary does
    assert value_text(_alert("3")) == "125"  # a plain number stays a number


def test_each_message_points_at_its_runbook_with_or_without_a_base_url() -> None:
    path = "/usr/share/inference-watchdog/runbooks/gpu-thermal-margin.md"
    alert = _alert("3")
    alert = Alert(**{**alert.__dict__, "annotations": {**alert.annotations, "runbook_url": f"file://{path}"}})
    local = str(render_alert_message([alert], [], "gpu-node-1", Links(), "GPU thermal margin").blocks)
    assert f"*Runbook:* GPU thermal margin `{path}`" in local  # the default config: the file on the node
    assert "<file://" not in local  # Slack cannot open it: shown as text, not as a dead link
    linked = str(render_alert_message([alert], [], "gpu-node-1", LINKS, "GPU thermal margin").blocks)
    assert "<https://runbooks.example/rb/gpu-thermal-margin.md|GPU thermal margin>" in linked

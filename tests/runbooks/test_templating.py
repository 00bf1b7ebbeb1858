"""Templates: syntax, rendering, and refusal of hostile values."""

from __future__ import annotations

import pytest

from watchdog.runbooks.templating import (
    TemplateContext,
    TemplateMissing,
    TemplateRefused,
    TemplateSyntaxError,
    parse_template,
    render,
)

CONFIG = {
    "engines": [
        {"job": "vllm-a", "url": "http://127.0.0.1:8000/metrics", "unit": "vllm-a.service"},
        {"job": "sglang", "url": "http://127.0.0.1:30000/metrics", "unit": "sglang.service"},
        {"job": "no-unit", "url": "http://127.0.0.1:30001/metrics", "unit": ""},
    ],
    "remediation": {"gateway": {"url": "http://gw.local:8080/admin"}},
}


def ctx(**labels: str) -> TemplateContext:
    return TemplateContext(labels=labels, config=CONFIG, vars={"gateway_url": "http://gw.local:8080/shed"},
                           node="node-7")


def test_literal_and_placeholders_render_into_one_string() -> None:
    t = parse_template("--id={{ labels.gpu }}")
    assert render(t, ctx(gpu="3")) == "--id=3"
    assert render(parse_template("{{labels.uuid}}"), ctx(uuid="GPU-1a2b-3c")) == "GPU-1a2b-3c"
    assert render(parse_template("{{ node }}"), ctx()) == "node-7"
    assert parse_template("nvidia-smi").is_literal


def test_config_path_selects_engine_by_job_label() -> None:
    t = parse_template("{{ config.engines[job].unit }}")
    assert render(t, ctx(job="sglang")) == "sglang.service"
    assert render(parse_template("{{ config.remediation.gateway.url }}"), ctx()) == "http://gw.local:8080/admin"
    with pytest.raises(TemplateMissing):
        render(t, ctx(job="unknown-engine"))
    with pytest.raises(TemplateMissing):
        render(t, ctx(job="no-unit"))
    with pytest.raises(TemplateMissing):
        render(t, ctx())


def test_vars_are_trusted_and_may_hold_urls() -> None:
    assert render(parse_template("{{ vars.gateway_url }}"), ctx()) == "http://gw.local:8080/shed"
    with pytest.raises(TemplateMissing):
        render(parse_template("{{ vars.nope }}"), ctx())


@pytest.mark.parametrize("hostile", [
    "--help; rm -rf /",
    "$(reboot)",
    "`reboot`",
    "-rf",
    "0 1",
    "a;b",
    "a|b",
    "x\ny",
    "../../etc/passwd",
    "a/b",
    "a'b",
    'a"b',
    "a=b",
    "x" * 200,
    "ünïcode",
])
def test_hostile_label_values_are_refused(hostile: str) -> None:
    with pytest.raises(TemplateRefused) as info:
        render(parse_template("{{ labels.gpu }}"), ctx(gpu=hostile))
    assert info.value.ref == "labels.gpu"


def test_missing_label_is_missing_not_empty() -> None:
    with pytest.raises(TemplateMissing):
        render(parse_template("-i {{ labels.gpu }}"), ctx())


def test_url_context_percent_encodes_untrusted_values() -> None:
    t = parse_template("{{ vars.gateway_url }}?instance={{ labels.instance }}")
    assert render(t, ctx(instance="10.0.0.1:8000"), url=True) == \
        "http://gw.local:8080/shed?instance=10.0.0.1%3A8000"


@pytest.mark.parametrize("bad", ["{{ labels }}", "{{ env.HOME }}", "{{ labels.a.b }}", "{{ labels.gpu",
                                 "x }}", "{{ config }}", "{{ labels.gpu | upper }}", "{{ $labels.gpu }}"])
def test_syntax_errors_are_found_at_parse_time(bad: str) -> None:
    with pytest.raises(TemplateSyntaxError):
        parse_template(bad)

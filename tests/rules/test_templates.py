"""Annotation templates: literal cases, load-time errors, and real promtool as the oracle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.promtool.runner import run_test_file
from watchdog.rules.templates import TemplateContext, TemplateParseError, check_template, expand

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEMPLATE_TESTS = FIXTURES / "templates_test.yaml"
PROMTOOL = shutil.which("promtool")

LABELS = {"__name__": "vllm:num_requests_waiting", "instance": "gpu-node-7.example.com:8000", "job": "vllm"}


def render(text: str, value: float = 1234567.0, **extra: str) -> str:
    ctx = TemplateContext(labels={**LABELS, **extra}, value=value, external_labels={"cluster": "eu-1"})
    return expand(text, "QueueBacklog", ctx)


@pytest.mark.parametrize(("template", "value", "expected"), [
    ("{{ $value }}", 1234567.0, "1.234567e+06"),
    ("{{ $value | humanize }}", 1234567.0, "1.235M"),
    ("{{ humanize $value }}", 0.0012, "1.2m"),
    ("{{ humanize1024 $value }}", 1048576.0, "1Mi"),
    ("{{ humanizeDuration $value }}", 90.0, "1m 30s"),
    ("{{ humanizeDuration $value }}", 0.25, "250ms"),
    ("{{ humanizePercentage $value }}", 0.9731, "97.31%"),
    ("{{ humanizeTimestamp $value }}", 1.5, "1970-01-01 00:00:01.5 +0000 UTC"),
    ('{{ printf "%.2f" $value }}', 0.975, "0.97"),
    ('{{ printf "%d" $value }}', 3.0, "%!d(float64=3)"),
    ("{{ $labels.job }} on {{ .Labels.instance | stripPort }}", 1.0, "vllm on gpu-node-7.example.com"),
    ("{{ $externalLabels.cluster }}/{{ $labels.missing }}.", 1.0, "eu-1/."),
    ("{{ if gt $value 0.9 }}critical{{ else }}ok{{ end }}", 0.95, "critical"),
    ('{{ reReplaceAll "(.+?)\\\\..*" "$1" $labels.instance }}', 1.0, "gpu-node-7"),
    ('{{ toUpper "kv" }}-{{ toLower "KV" }}-{{ title "kv cache" }}', 1.0, "KV-kv-Kv Cache"),
    ("{{- $v := $value -}}  [{{ $v }}]  ", 2.0, "[2]  "),
    ("{{ range $k, $v := $labels }}{{ $k }};{{ end }}", 1.0, "__name__;instance;job;"),
])
def test_renders_like_prometheus(template: str, value: float, expected: str) -> None:
    assert render(template, value) == expected


def test_runtime_errors_render_like_prometheus() -> None:
    # Go compares float64 with int constants as incompatible types: a classic rule-author trap.
    out = render("{{ if gt $value 1 }}big{{ end }}", 2.0)
    assert out == ('<error expanding template: error executing template __alert_QueueBacklog: template: '
                   '__alert_QueueBacklog:1:118: executing "__alert_QueueBacklog" at <gt $value 1>: '
                   'error calling gt: incompatible types for comparison>')
    assert render('{{ humanize "x" }}').endswith(
        'error calling humanize: strconv.ParseFloat: parsing "x": invalid syntax>')


@pytest.mark.parametrize(("template", "message"), [
    ("{{ humanise $value }}", 'function "humanise" not defined'),
    ("{{ $lables.job }}", 'undefined variable "$lables"'),
    ("{{ if $value }}x", "unexpected EOF"),
    ("{{ end }}", "unexpected {{end}}"),
    ("{{ $value | 1 }}", "non executable command in pipeline stage 2"),
    ("{{ $value ", "unclosed action"),
    # promtool 2.42: out-of-range and malformed number literals fail at load, quoted as Go's %q.
    ("{{ 1e400 }}", 'illegal number syntax: "1e400"'),
    ("{{ 1__0 }}", 'illegal number syntax: "1__0"'),
])
def test_load_time_template_errors(template: str, message: str) -> None:
    with pytest.raises(TemplateParseError) as info:
        check_template(template, "A")
    assert message in str(info.value)


def test_every_prometheus_function_is_known() -> None:
    for name in ("humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp",
                 "printf", "toUpper", "toLower", "title", "reReplaceAll", "match", "query", "first", "label",
                 "value", "strvalue", "sortByLabel", "args", "safeHtml", "stripPort", "stripDomain",
                 "graphLink", "tableLink", "toTime", "parseDuration", "pathPrefix", "externalURL", "index",
                 "len", "and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "print", "println",
                 "html", "js", "urlquery", "slice"):
        check_template("{{ " + name + " }}", "A")  # parses: the function exists


def test_query_function_reads_through_the_callback() -> None:
    ctx = TemplateContext(labels={}, value=0.0, external_labels={},
                          query=lambda q: [({"__name__": "up", "job": "b"}, 0.0),
                                           ({"__name__": "up", "job": "a"}, 1.0)])
    text = '{{ range query "up" | sortByLabel "job" }}{{ .Labels.job }}={{ .Value }} {{ end }}' \
           '{{ with query "up" }}{{ . | first | value | humanize }}{{ end }}'
    assert expand(text, "A", ctx) == "a=1 b=0 0"


def test_generated_fixture_passes_our_runner() -> None:
    """284 templates whose expected text promtool rendered (generate_templates.py)."""
    result = run_test_file(str(TEMPLATE_TESTS))
    assert result.ok, "\n".join(result.errors[:5])


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_generated_fixture_passes_promtool() -> None:
    proc = subprocess.run([str(PROMTOOL), "test", "rules", str(TEMPLATE_TESTS)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[:3000]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_fixture_is_current(tmp_path: Path) -> None:
    """Regenerating the fixture with promtool gives the committed file (our renderer is not its source)."""
    subprocess.run([sys.executable, str(FIXTURES / "generate_templates.py"), str(tmp_path)], check=True)
    for name in ("templates_test.yaml", "templates_rules.yaml"):
        assert (tmp_path / name).read_text(encoding="utf-8") == (FIXTURES / name).read_text(encoding="utf-8")

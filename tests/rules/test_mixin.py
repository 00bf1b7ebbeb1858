"""``rules render`` as a mixin for a central Prometheus, checked by the real promtool (Debian ``prometheus``).

- Every rendering (node and central target, ``node`` and ``instance`` labelling, rule file and
  ``PrometheusRule``) passes ``promtool check rules``, and every alert in it carries the static
  ``runbook_url`` built from the configured base.
- ``promtool test rules`` runs the central rules over input series converted, in the test, from the
  captured engine pages of several vLLM and SGLang versions (tests/fixtures/engines), as a central
  Prometheus holds them: every 15 s, each series with its engine's ``job``/``instance`` and the
  ``node`` target label, two nodes serving the same page. The canonical signals come out per node with
  the values the fixture generator put in (tests/fixtures/engines/expected.yaml), and an alert driven
  by the real vLLM pages (idle, then under load) fires with its node and its ``runbook_url``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.engine_signals import FIXTURES, ROOT
from watchdog.collectors.engines import parse_payload
from watchdog.promtool.eval_input import evaluate_input

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
BASE = "https://runbooks.example.com/iw"
EXPECTED: dict[str, Any] = yaml.safe_load((FIXTURES / "expected.yaml").read_text(encoding="utf-8"))
VERSIONS = sorted(name for name in EXPECTED if name != "vllm-router.txt")
NODES = ("gpu-node-01", "gpu-node-02")
SCRAPE = "15s"
LEFT_OUT_HEADER = "# Left out (the agent on each node still evaluates them and exports their results and ALERTS):"

pytestmark = pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="promtool (Debian prometheus) is not installed")


def config(tmp_path: Path, url_base: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"rules": {"paths": [str(ROOT / "rules" / "*.yaml")]},
                                    "runbooks": {"url_base": url_base}}))
    return path


def render(tmp_path: Path, *args: str, url_base: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", "rules", "render", "--config",
                           str(config(tmp_path, url_base)), *args], capture_output=True, text=True, timeout=120)


def promtool_check(path: Path) -> None:
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def alerts_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def left_out_comments(text: str) -> list[str]:
    lines = text.splitlines()
    if LEFT_OUT_HEADER not in lines:
        return []
    start = lines.index(LEFT_OUT_HEADER)
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("#   "):
            break
        out.append(line[4:])
    return out


@pytest.mark.parametrize("args", [
    (),
    ("--target", "central"),
    ("--target", "central", "--node-label", "instance", "--scrape-interval", "30s"),
], ids=["node", "central", "central-instance-30s"])
def test_rendered_rule_files_pass_promtool_with_a_static_runbook_url_on_every_alert(tmp_path: Path,
                                                                                    args: tuple[str, ...]) -> None:
    result = render(tmp_path, "--runbook-url-base", BASE + "/", *args)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "rules.yaml"
    out.write_text(result.stdout)
    promtool_check(out)
    alerts = alerts_of(yaml.safe_load(result.stdout))
    assert len(alerts) > 20
    for alert in alerts:
        annotations = alert["annotations"]
        assert annotations["runbook_url"] == f"{BASE}/{annotations['runbook']}.md", alert["alert"]
    left_out = left_out_comments(result.stdout)
    stderr = [line.removeprefix("left out for a central Prometheus: ") for line in result.stderr.splitlines()
              if line.startswith("left out for a central Prometheus: ")]
    assert left_out == stderr
    assert bool(left_out) == ("central" in args)


def test_the_node_target_without_a_base_links_the_installed_markdown(tmp_path: Path) -> None:
    result = render(tmp_path)
    assert result.returncode == 0, result.stderr
    for alert in alerts_of(yaml.safe_load(result.stdout)):
        runbook = alert["annotations"]["runbook"]
        assert alert["annotations"]["runbook_url"] == (ROOT / "runbooks" / f"{runbook}.md").resolve().as_uri()


def test_the_config_base_is_used_and_the_flag_overrides_it(tmp_path: Path) -> None:
    from_config = alerts_of(yaml.safe_load(render(tmp_path, url_base="https://a.example/rb").stdout))
    assert from_config[0]["annotations"]["runbook_url"].startswith("https://a.example/rb/")
    flagged = render(tmp_path, "--runbook-url-base", "https://b.example", url_base="https://a.example/rb")
    assert alerts_of(yaml.safe_load(flagged.stdout))[0]["annotations"]["runbook_url"].startswith("https://b.example/")


def test_central_leaves_out_what_needs_one_second_samples_and_says_why(tmp_path: Path) -> None:
    result = render(tmp_path, "--target", "central", "--runbook-url-base", BASE)
    doc = yaml.safe_load(result.stdout)
    names = {rule.get("alert") or rule.get("record") for group in doc["groups"] for rule in group["rules"]}
    left_out = left_out_comments(result.stdout)
    assert any('"EngineQueueBuildup": a 30s window holds fewer than 4 samples at a 15s scrape interval' in line
               for line in left_out), left_out
    assert any('"engine:kv_exhaustion_eta_seconds": reads engine:kv_demand_growth_ratio' in line for line in left_out)
    assert any('"GpuMissing": falls back to vector() where a series is missing' in line for line in left_out)
    assert {"EngineQueueBuildup", "EngineWedged", "EngineKvExhaustionPredicted"}.isdisjoint(names)
    assert {"GpuFallenOffBus", "EngineDown", "HostCpuContention", "EngineKvCacheNearFull"} <= names
    rules = {rule.get("alert") or rule.get("record"): rule for group in doc["groups"] for rule in group["rules"]}
    # the whole fleet is not one host: per-node aggregation, and the engines' up as the agent exports it
    assert rules["host:cpu_steal_ratio:rate2m"]["expr"].startswith("sum by (node) (")
    down = {r["expr"] for r in alerts_of(doc) if r["alert"] == "EngineDown"}
    assert "watchdog_engine_up == 0" in down and "up == 0" not in down
    assert rules["EnginePreemptionStorm"]["for"] == "30s"
    assert "interval" not in next(g for g in doc["groups"] if g["name"] == "gpu-health")  # 5s < one scrape
    # a 1 s scrape keeps every rule but the two whose vector() fallback cannot name a node
    every = render(tmp_path, "--target", "central", "--runbook-url-base", BASE, "--scrape-interval", "1s")
    assert [line.split('"')[3] for line in left_out_comments(every.stdout)] == [
        "EngineKvExhaustionPredicted", "GpuMissing"]


def test_instance_labelling_leaves_out_joins_of_agent_and_engine_series(tmp_path: Path) -> None:
    result = render(tmp_path, "--target", "central", "--runbook-url-base", BASE, "--node-label", "instance")
    assert result.returncode == 0, result.stderr
    assert any('"HostCpuContention": joins the agent\'s own series with an engine\'s' in line
               for line in left_out_comments(result.stdout))
    rules = {rule.get("alert") or rule.get("record"): rule
             for group in yaml.safe_load(result.stdout)["groups"] for rule in group["rules"]}
    assert rules["host:load1_per_cpu"]["expr"] == (
        "max by (instance) (watchdog_host_load1) / max by (instance) (watchdog_host_cpus)")


def test_prometheusrule_object(tmp_path: Path) -> None:
    result = render(tmp_path, "--target", "central", "--format", "prometheusrule", "--runbook-url-base", BASE,
                    "--name", "inference-watchdog-rules", "--namespace", "monitoring",
                    "--label", "release=kube-prometheus-stack", "--label", "app.kubernetes.io/part-of=x")
    assert result.returncode == 1 and "--label: expected KEY=VALUE with KEY a label name" in result.stderr
    result = render(tmp_path, "--target", "central", "--format", "prometheusrule", "--runbook-url-base", BASE,
                    "--name", "inference-watchdog-rules", "--namespace", "monitoring",
                    "--label", "release=kube-prometheus-stack", "--label", "role=alert-rules")
    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["metadata"] == {"name": "inference-watchdog-rules", "namespace": "monitoring",
                               "labels": {"release": "kube-prometheus-stack", "role": "alert-rules"}}
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(obj["spec"], sort_keys=False))
    promtool_check(spec)
    assert left_out_comments(result.stdout)  # the reasons travel with the object too


@pytest.mark.parametrize(("args", "message"), [
    (("--target", "central"), "--target central needs --runbook-url-base or runbooks.url_base"),
    (("--target", "central", "--runbook-url-base", BASE, "--scrape-interval", "15 s"), "--scrape-interval:"),
    (("--target", "central", "--runbook-url-base", BASE, "--node-label", "node-name"),
     "--node-label: not a label name"),
    (("--node-label", "node"), "apply to --target central only"),
    (("--namespace", "monitoring"), "apply to --format prometheusrule only"),
    (("--format", "prometheusrule", "--name", "Bad_Name"), "--name: not a Kubernetes object name"),
])
def test_bad_flags_are_named(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = render(tmp_path, *args)
    assert result.returncode == 1 and result.stdout == ""
    assert message in result.stderr


# -- promtool test rules over captured engine pages -------------------------------------------------


def series_text(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    rest = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def page_series(page: Path, instance: str, node: str | None) -> dict[str, float]:
    """A captured page as the central Prometheus stores one scrape of it (with a ``node`` target label
    unless ``node`` is None): series text -> value."""
    samples = parse_payload(page.read_text(encoding="utf-8"), {"job": "engine", "instance": instance})
    extra = {"node": node} if node is not None else {}
    return {series_text({**dict(s.labels), **extra}): s.value for s in samples}


def central_rules(tmp_path: Path, node_label: str = "node") -> Path:
    result = render(tmp_path, "--target", "central", "--runbook-url-base", BASE, "--scrape-interval", SCRAPE,
                    "--node-label", node_label)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "central.rules.yaml"
    path.write_text(result.stdout)
    return path


def run_promtool_test(tmp_path: Path, tests: list[dict[str, Any]], node_label: str = "node") -> None:
    rules = central_rules(tmp_path, node_label)
    # Groups in file order, as Prometheus runs them (promtool's own order is random without this).
    order = [group["name"] for group in yaml.safe_load(rules.read_text())["groups"]]
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": SCRAPE,
                                    "group_eval_order": order, "tests": tests}, sort_keys=False, width=1 << 20))
    result = subprocess.run([PROMTOOL, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


@pytest.mark.parametrize("node_label", ["node", "instance"])
def test_canonical_signals_of_every_engine_version_per_node(tmp_path: Path, node_label: str) -> None:
    """One promtool test per captured page (8+ vLLM/SGLang versions), two nodes each; the targets carry a
    ``node`` label, or only their ``instance``."""
    tests = []
    for fixture in VERSIONS:
        series: dict[str, float] = {}
        for node in NODES:
            series.update(page_series(FIXTURES / fixture, f"{node}:8000", node if node_label == "node" else None))
        exp = []
        for entry in EXPECTED[fixture]["series"]:
            for node in NODES:
                labels = {"__name__": entry["series"], **entry["labels"], "job": "engine",
                          "instance": f"{node}:8000", **({"node": node} if node_label == "node" else {})}
                exp.append({"expr": series_text(labels), "eval_time": "2m",
                            "exp_samples": [{"labels": series_text(labels), "value": entry["value"]}]})
        assert exp, fixture
        tests.append({
            "name": fixture,
            "interval": SCRAPE,
            "input_series": [{"series": text, "values": f"{value!r}x10"} for text, value in sorted(series.items())],
            "promql_expr_test": exp,
        })
    assert len(tests) >= 8
    run_promtool_test(tmp_path, tests, node_label)


def test_an_alert_from_real_vllm_pages_fires_with_its_node_and_runbook_url(tmp_path: Path) -> None:
    """The real vLLM's idle page for two minutes, then its under-load page (85 preemptions since idle) on
    node 1; node 2 stays idle. EnginePreemptionStorm is pending from 2m and fires at 2m30s, its 15 s hold
    lengthened to two scrapes, on node 1 only, with the runbook's URL; EngineKvCacheNearFull too."""
    idle = FIXTURES / "real" / "vllm-0.32.0-cpu-idle.txt"
    busy = FIXTURES / "real" / "vllm-0.32.0-cpu-under-load.txt"
    input_series = []
    for node, pages in ((NODES[0], [idle] * 8 + [busy] * 12), (NODES[1], [idle] * 20)):
        scrapes = [page_series(p, f"{node}:8000", node) for p in pages]
        for text in sorted(set().union(*scrapes)):
            values = " ".join(repr(s[text]) if text in s else "_" for s in scrapes)
            input_series.append({"series": text, "values": values})
    test: dict[str, Any] = {"interval": SCRAPE, "input_series": input_series}
    # What our evaluator fires from the same input; promtool must agree, labels and annotations alike.
    input_path = tmp_path / "input.yaml"
    rules = central_rules(tmp_path)
    input_path.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": SCRAPE, **test}))
    firing = [a for a in evaluate_input(str(input_path), "2m45s").alerts if a.state.value == "firing"]
    assert sorted((a.name, a.labels["node"]) for a in firing) == [
        ("EngineKvCacheNearFull", NODES[0]), ("EnginePreemptionStorm", NODES[0])]
    for alert in firing:
        assert alert.annotations["runbook_url"] == f"{BASE}/{alert.annotations['runbook']}.md"
        assert alert.labels["instance"] == f"{NODES[0]}:8000" and alert.labels["severity"]
    checks = [{"eval_time": "2m45s", "alertname": a.name,
               "exp_alerts": [{"exp_labels": {k: v for k, v in a.labels.items() if k != "alertname"},
                               "exp_annotations": dict(a.annotations)}]} for a in firing]
    run_promtool_test(tmp_path, [{**test, "alert_rule_test": [
        *checks,
        {"eval_time": "2m15s", "alertname": "EnginePreemptionStorm", "exp_alerts": []},  # pending: for 30s
        {"eval_time": "1m45s", "alertname": "EngineKvCacheNearFull", "exp_alerts": []},
    ]}])


def test_the_central_config_in_docs_fleet_loads_the_rendered_rules(tmp_path: Path) -> None:
    """docs/fleet.md's Prometheus config, with the central rendering as its rule file, passes
    ``promtool check config`` (which checks the rule file too)."""
    text = (ROOT / "docs" / "fleet.md").read_text()
    (snippet,) = re.findall(r"<!-- check: promtool-config -->\n```yaml\n(.*?)```", text, re.DOTALL)
    rules = central_rules(tmp_path)
    config = tmp_path / "prometheus.yml"
    config.write_text(snippet.replace("/etc/prometheus/rules/inference-watchdog.rules.yaml", str(rules)))
    result = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr

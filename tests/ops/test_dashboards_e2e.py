"""End to end: a real Prometheus scraping ``inference-watchdog demo``, every dashboard query through its API.

One demo run (tests/ops/fixtures/e2e-scenario.yaml: a GPU falls off the bus, an NVLink goes down, a GPU
runs out of thermal margin, and the long-context incident hits the engine) is scraped every second by two
real Prometheus servers (Debian's ``prometheus``), both with ``honor_labels: true`` and a ``node`` target
label, the two deployments docs/operations.md describes. The agent runs with the default exporter settings:
it exports neither the engines' own series nor ``up``/``scrape_*``.

- **rules in Prometheus**: scrapes the demo's engines itself (``job`` = the agent's ``engines[].job``, the
  same ``instance``), loads the agent's whole rule set (``rules/*.yaml`` plus the rules the demo's config
  generates, rendered as ``inference-watchdog rules render`` does) and drops the agent's own copies of
  recording-rule outputs and ``ALERTS*`` at scrape time, so every ``engine:*`` series and every alert
  (``EngineDown`` reads Prometheus' own ``up`` of the engine) is Prometheus' own evaluation;
- **agent's evaluation**: scrapes only the agent, no rule files; recording-rule outputs and ``ALERTS``
  come from the agent.

Then: (a) Prometheus' alerts and the agent's agree on which alerts fire for the scenario; (b) every panel
query of every dashboard returns data on both servers, with the variables as "All" (``.*``) and with
concrete values; (c) every variable query returns values.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.polling import wait_until
from watchdog.demo.runner import EngineProcess, demo_config
from watchdog.demo.scenario import load_scenario
from watchdog.rules.loader import RecordingRule, load_ruleset, ruleset_to_dict

from .conftest import REPO, free_port, http_get, parse_metrics, running_demo

PROMETHEUS = shutil.which("prometheus")
SCENARIO = Path(__file__).resolve().parent / "fixtures" / "e2e-scenario.yaml"
DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
ALERT_DEADLINE_SECONDS = 75.0
AGREEMENT_SLACK_SECONDS = 20.0
# What Grafana puts in for the interval variables (1 s scrapes; the run lasts about a minute).
INTERVALS = {"$__rate_interval": "30s", "$__interval": "15s", "$__range": "5m"}

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) is not installed")


@dataclass
class Prometheus:
    """A running Prometheus server."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query at now; the result vector (scalars become one sample)."""
        body = http_get(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}")
        payload = json.loads(body.text)
        assert payload["status"] == "success", f"{self.name}: {expr}: {payload}"
        data = payload["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def firing(self) -> set[str]:
        """Names of the alerts Prometheus' own rule evaluation has firing now."""
        payload = json.loads(http_get(f"{self.url}/api/v1/alerts").text)
        return {a["labels"]["alertname"] for a in payload["data"]["alerts"] if a["state"] == "firing"}


@dataclass
class Run:
    """The demo, both Prometheus servers, and which alerts each side has fired so far."""

    demo_url: str
    with_rules: Prometheus
    without_rules: Prometheus
    expected: set[str]
    engines: dict[str, str]
    agent_fired: set[str] = field(default_factory=set)
    prometheus_fired: set[str] = field(default_factory=set)
    agent_only: set[str] = field(default_factory=set)
    prometheus_only: set[str] = field(default_factory=set)


def agent_firing(demo_url: str) -> set[str]:
    """Alert names in the agent's ``ALERTS{alertstate="firing"}`` (scraped from the demo's exporter)."""
    names = set()
    for key in parse_metrics(http_get(demo_url + "/metrics").text):
        if key.startswith("ALERTS{") and 'alertstate="firing"' in key:
            match = re.search(r'alertname="([^"]+)"', key)
            assert match
            names.add(match.group(1))
    return names


def render_rules(workdir: Path) -> tuple[Path, set[str]]:
    """The demo agent's whole rule set as one Prometheus rule file, and the names it records."""
    scenario = load_scenario(str(SCENARIO))
    placeholders = [EngineProcess(spec.job, 1, None) for spec in scenario.engines]  # type: ignore[arg-type]
    config = demo_config(scenario, placeholders, workdir, "127.0.0.1:0")
    ruleset = load_ruleset(config)
    recorded = {rule.record for group in ruleset.groups for rule in group.rules if isinstance(rule, RecordingRule)}
    path = workdir / "rules.yaml"
    path.write_text(yaml.safe_dump(ruleset_to_dict(ruleset), sort_keys=False))
    return path, recorded


def engine_targets(demo_url: str) -> dict[str, str]:
    """``job`` -> ``instance`` of each engine the demo's agent scrapes (from ``watchdog_engine_info``)."""
    targets = {}
    for key in parse_metrics(http_get(demo_url + "/metrics").text):
        if key.startswith("watchdog_engine_info{"):
            job, instance = (re.search(rf'{label}="([^"]+)"', key) for label in ("job", "instance"))
            assert job and instance, key
            targets[job.group(1)] = instance.group(1)
    assert targets, "the demo's agent exports no watchdog_engine_info"
    return targets


def start_prometheus(name: str, workdir: Path, demo_port: int, rule_file: Path | None,
                     drop: set[str], engines: dict[str, str]) -> Prometheus:
    """Prometheus scraping the demo's agent (honor_labels) and ``engines`` (job -> instance) every second,
    every target with the ``node`` label."""
    home = workdir / name
    home.mkdir()
    node = {"node": "demo-node"}
    scrape: dict[str, Any] = {
        "job_name": "inference-watchdog",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{demo_port}"], "labels": node}],
    }
    if drop:
        scrape["metric_relabel_configs"] = [
            {"source_labels": ["__name__"], "regex": "|".join(re.escape(n) for n in sorted(drop)), "action": "drop"}]
    direct = [{"job_name": job, "static_configs": [{"targets": [instance], "labels": node}]}
              for job, instance in sorted(engines.items())]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)] if rule_file else [],
        "scrape_configs": [scrape, *direct],
    }
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = home / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=out, stderr=subprocess.STDOUT)
    server = Prometheus(name, f"http://127.0.0.1:{port}", process, log)

    def ready() -> bool:
        assert process.poll() is None, f"{name} exited:\n{log.read_text()[-3000:]}"
        try:
            return http_get(server.url + "/-/ready", timeout=2).status == 200
        except OSError:
            return False

    wait_until(ready, 30, f"{name} to become ready")
    return server


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def watch_alerts(run: Run, demo: subprocess.Popen[bytes], demo_log: Path) -> None:
    """Poll both sides each second until each has fired the expected alerts; then give each side the
    slack of a few scrapes to fire what the other fired (Prometheus sees a series a scrape later, and its
    ``for`` timers start later). Whatever one side fired and the other did not by then disagrees."""

    def poll() -> None:
        assert demo.poll() is None, f"the demo exited:\n{demo_log.read_text()[-3000:]}"
        run.agent_fired |= agent_firing(run.demo_url)
        run.prometheus_fired |= run.with_rules.firing()

    deadline = time.monotonic() + ALERT_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        poll()
        if run.expected <= run.agent_fired and run.expected <= run.prometheus_fired:
            break
        time.sleep(1)
    agent_seen, prometheus_seen = set(run.agent_fired), set(run.prometheus_fired)
    settle = time.monotonic() + AGREEMENT_SLACK_SECONDS
    while time.monotonic() < settle:
        poll()
        if agent_seen <= run.prometheus_fired and prometheus_seen <= run.agent_fired:
            break
        time.sleep(1)
    run.agent_only = agent_seen - run.prometheus_fired
    run.prometheus_only = prometheus_seen - run.agent_fired


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("e2e")
    rule_file, recorded = render_rules(workdir)
    expected = set(load_scenario(str(SCENARIO)).expect_alerts)
    servers: list[Prometheus] = []
    try:
        with running_demo(workdir, SCENARIO, 150) as demo:
            engines = engine_targets(demo.url)
            servers.append(start_prometheus("with-rules", workdir, demo.port, rule_file,
                                            drop=recorded | {"ALERTS", "ALERTS_FOR_STATE"}, engines=engines))
            servers.append(start_prometheus("without-rules", workdir, demo.port, None, drop=set(), engines={}))
            result = Run(demo.url, servers[0], servers[1], expected, engines)
            watch_alerts(result, demo.process, demo.log)
            yield result
    finally:
        for server in servers:
            stop(server.process)


# -- (a) alerts ------------------------------------------------------------------------------------

def test_prometheus_and_agent_agree_on_firing_alerts(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nagent fired: {sorted(run.agent_fired)}\nPrometheus fired: {sorted(run.prometheus_fired)}")
    assert run.expected <= run.agent_fired, f"the agent did not fire {sorted(run.expected - run.agent_fired)}"
    assert run.expected <= run.prometheus_fired, (
        f"Prometheus did not fire {sorted(run.expected - run.prometheus_fired)}")
    # Every rule reads series recorded earlier in its own group (the KV forecast included: it is the last part
    # of the ordered engines group), so both sides see the same inputs at each evaluation; the engines' KV
    # ramp starts after both servers scrape (the scenario's steady first 20 s), so both see all of it.
    assert not run.agent_only and not run.prometheus_only, (
        f"fired only by the agent: {sorted(run.agent_only)}; only by Prometheus: {sorted(run.prometheus_only)}")


def test_engine_series_come_from_prometheus_own_scrape_of_the_engines(run: Run) -> None:
    """The agent exports no engine series of its own nor ``up``/``scrape_*`` for the engines: in the
    agent-only Prometheus the only ``up`` is the agent's target and no ``vllm:*`` exists, while the
    rules-in-Prometheus one reads the engines' series and ``up`` from its own scrape of them."""
    only_agent = run.without_rules
    assert {s["metric"]["job"] for s in only_agent.query("up")} == {"inference-watchdog"}
    assert not only_agent.query('{__name__=~"vllm:.+|sglang:.+|scrape_samples_scraped", job!="inference-watchdog"}')
    assert {s["metric"]["job"] for s in only_agent.query("watchdog_engine_up == 1")} == set(run.engines)
    direct = {s["metric"]["job"]: s["metric"]["instance"] for s in run.with_rules.query("up == 1")
              if s["metric"]["job"] != "inference-watchdog"}
    assert direct == run.engines
    assert run.with_rules.query('count by (job) (vllm:num_requests_running{node="demo-node"})')


def test_prometheus_loaded_every_rule_group(run: Run) -> None:
    payload = json.loads(http_get(run.with_rules.url + "/api/v1/rules").text)
    groups = payload["data"]["groups"]
    assert groups
    unhealthy = [(g["name"], r.get("name"), r.get("lastError")) for g in groups for r in g["rules"]
                 if r.get("health") not in ("ok", "unknown")]
    assert not unhealthy, unhealthy


# -- (b) panel queries -----------------------------------------------------------------------------


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expr) of every target of every panel."""
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], target["expr"]))
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's variable interpolation for our dashboards (every variable is used inside ``=~``)."""
    for name, value in sorted({**INTERVALS, **{f"${k}": v for k, v in values.items()}}.items(),
                              key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


ALL = {"node": ".*", "gpu": ".*", "job": ".*", "model": ".*", "by": "node"}


def grafana_escape(value: str) -> str:
    """A label value as Grafana interpolates a single selected value into ``=~"..."`` for Prometheus:
    regex metacharacters escaped, the backslash itself escaped for the PromQL string literal."""
    return re.sub(r"[$^*+?.()|\\{}\[\]]", lambda m: "\\\\" + m.group(0), value)


def concrete_values(server: Prometheus) -> dict[str, str]:
    """One real value per variable, as a user picking from the drop-downs would."""
    values = {}
    for variable in variables():
        series = server.query(variable_query(variable["query"], ALL))
        label = variable["label_name"]
        options = sorted({s["metric"][label] for s in series if label in s["metric"]})
        assert options, f"variable {variable['name']} has no values"
        values[variable["name"]] = grafana_escape(options[-1])
    return {**values, "by": "node"}


def empty_panels(server: Prometheus, values: dict[str, str]) -> list[str]:
    missing = []
    for dashboard, title, expr in panel_queries():
        query = substitute(expr, values)
        if not server.query(query):
            missing.append(f"{dashboard} / {title}: {query}")
    return missing


@pytest.mark.parametrize("deployment", ["with_rules", "without_rules"])
def test_every_panel_returns_data_for_all(run: Run, deployment: str) -> None:
    server: Prometheus = getattr(run, deployment)
    missing = empty_panels(server, ALL)
    assert not missing, f"{len(missing)} panel queries returned no data on {server.name}:\n" + "\n".join(missing)


@pytest.mark.parametrize("deployment", ["with_rules", "without_rules"])
def test_every_panel_returns_data_for_concrete_values(run: Run, deployment: str) -> None:
    server: Prometheus = getattr(run, deployment)
    values = concrete_values(server)
    missing = empty_panels(server, values)
    assert not missing, (f"{len(missing)} panel queries returned no data on {server.name} with {values}:\n"
                         + "\n".join(missing))


@pytest.mark.parametrize("deployment", ["with_rules", "without_rules"])
def test_the_fleet_view_works_with_instance_labelling(run: Run, deployment: str) -> None:
    """With ``$by`` = ``instance`` (targets without a node label) every fleet panel still has data."""
    server: Prometheus = getattr(run, deployment)
    missing = [m for m in empty_panels(server, {**ALL, "by": "instance"}) if m.startswith("fleet.json")]
    assert not missing, "\n".join(missing)


# -- (c) variables ---------------------------------------------------------------------------------


def variables() -> list[dict[str, str]]:
    """The query variables of the dashboards (all dashboards share them): name, query, label."""
    out: dict[str, dict[str, str]] = {}
    for path in DASHBOARDS:
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] != "query":
                continue
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert match, f"{path.name}: variable {variable['name']}: not label_values(selector, label): {query}"
            out[variable["name"]] = {"name": variable["name"], "query": query, "label_name": match.group(2)}
    return list(out.values())


def variable_query(query: str, values: dict[str, str]) -> str:
    """``label_values(sel, label)`` as an instant query returning one series per value."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert match
    return f"count by ({match.group(2)}) ({substitute(match.group(1), values)})"


@pytest.mark.parametrize("deployment", ["with_rules", "without_rules"])
def test_variables_have_values(run: Run, deployment: str) -> None:
    server: Prometheus = getattr(run, deployment)
    for variable in variables():
        series = server.query(variable_query(variable["query"], ALL))
        assert any(variable["label_name"] in s["metric"] for s in series), variable
    values = concrete_values(server)
    assert values["node"] == "demo-node"
    assert values["job"] == "vllm-llama70b"
    assert values["model"] == "meta-llama/Llama-3\\\\.1-70B-Instruct"

"""End to end: the rule pack rendered for a central Prometheus (``rules render --target central``), loaded
into a real Prometheus (Debian's 2.42) that scrapes the agent's exporter, with a real central
Alertmanager (Debian's ``prometheus-alertmanager``).

``inference-watchdog demo`` runs tests/ops/fixtures/e2e-scenario.yaml (GPU 5 falls off the bus at 4 s,
an NVLink goes down, the long-context incident hits the engine). Prometheus scrapes the agent every
second (``honor_labels: true``, the target labelled ``node``, the agent's own recording outputs and
``ALERTS`` dropped, as docs/fleet.md says) and the engines directly, evaluates the central rule file
rendered for that 1 s scrape, and sends to the Alertmanager. GpuFallenOffBus must reach the
Alertmanager with the node it happened on and its static ``runbook_url``, and every rule Prometheus
loaded must evaluate without error (a node label added to a join that cannot take it would show as a
many-to-many error here).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.alertmanager import BINARY as ALERTMANAGER
from tests.support.alertmanager import RealAlertmanager
from tests.support.polling import wait_until
from tests.support.processes import stop_process
from watchdog.demo.runner import EngineProcess, demo_config
from watchdog.demo.scenario import load_scenario
from watchdog.rules.central import CentralOptions
from watchdog.rules.loader import RecordingRule, load_ruleset
from watchdog.rules.render import RenderOptions, render_rules
from watchdog.runbooks.links import runbook_url

from .conftest import free_port, http_get, running_demo
from .test_dashboards_e2e import engine_targets

PROMETHEUS = shutil.which("prometheus")
SCENARIO = Path(__file__).resolve().parent / "fixtures" / "e2e-scenario.yaml"
BASE = "https://runbooks.example.com/inference-watchdog"
NODE = "gpu-node-07"

pytestmark = pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                                reason="prometheus and prometheus-alertmanager (Debian) are needed")


def central_rule_file(workdir: Path) -> tuple[Path, set[str], list[str]]:
    """The demo agent's rule set rendered for a central Prometheus scraping every second, the names it
    records, and the lines saying what was left out."""
    scenario = load_scenario(str(SCENARIO))
    placeholders = [EngineProcess(spec.job, 1, None) for spec in scenario.engines]  # type: ignore[arg-type]
    ruleset = load_ruleset(demo_config(scenario, placeholders, workdir, "127.0.0.1:0"))
    recorded = {rule.record for group in ruleset.groups for rule in group.rules if isinstance(rule, RecordingRule)}
    rendered = render_rules(ruleset, RenderOptions(
        runbook_url=lambda runbook: runbook_url(runbook, None, BASE),  # type: ignore[arg-type]
        central=CentralOptions(node_label="node", scrape_interval_ms=1000)))
    path = workdir / "central.rules.yaml"
    path.write_text(rendered.text)
    return path, recorded, [note.line() for note in rendered.left_out]


def start_prometheus(workdir: Path, rule_file: Path, agent: str, engines: dict[str, str], drop: set[str],
                     alertmanager: str) -> tuple[subprocess.Popen[bytes], str]:
    node = {"node": NODE}
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {"job_name": "inference-watchdog", "honor_labels": True,
             "static_configs": [{"targets": [agent], "labels": node}],
             "metric_relabel_configs": [{"source_labels": ["__name__"], "action": "drop",
                                         "regex": "|".join(sorted(drop)).replace(".", "\\.")}]},
            *({"job_name": job, "static_configs": [{"targets": [instance], "labels": node}]}
              for job, instance in sorted(engines.items())),
        ],
    }
    home = workdir / "prometheus"
    home.mkdir()
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (home / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, (home / "prometheus.log").read_text()[-3000:]
        try:
            return http_get(url + "/-/ready", timeout=2).status == 200
        except OSError:
            return False

    wait_until(ready, 30, "Prometheus to become ready")
    return process, url


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("central")
    rule_file, recorded, left_out = central_rule_file(workdir)
    check = subprocess.run(["promtool", "check", "rules", str(rule_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    alertmanager = RealAlertmanager(workdir / "alertmanager").start()
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        with running_demo(workdir, SCENARIO, 120) as demo:
            prometheus, url = start_prometheus(workdir, rule_file, f"127.0.0.1:{demo.port}", engine_targets(demo.url),
                                               recorded | {"ALERTS", "ALERTS_FOR_STATE"},
                                               alertmanager.url.removeprefix("http://"))

            def arrived() -> bool:
                return any(a["labels"]["alertname"] == "GpuFallenOffBus" for a in alertmanager.alerts())

            wait_until(arrived, 90, "GpuFallenOffBus at the central Alertmanager")
            time.sleep(3)  # a few more evaluations of every rule
            rules = json.loads(http_get(url + "/api/v1/rules").text)["data"]["groups"]
            yield {"alerts": alertmanager.alerts(), "rules": rules, "left_out": left_out,
                   "agent_alerts": json.loads(http_get(demo.url + "/api/v1/alerts").text)["data"]["alerts"]}
    finally:
        if prometheus is not None:
            stop_process(prometheus)
        alertmanager.stop()


def test_the_alert_reaches_the_central_alertmanager_with_node_and_runbook_url(central: dict[str, Any]) -> None:
    [alert] = [a for a in central["alerts"] if a["labels"]["alertname"] == "GpuFallenOffBus"]
    assert alert["labels"]["node"] == NODE
    assert alert["labels"]["gpu"] == "5" and alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == f"{BASE}/gpu-fallen-off-bus.md"
    assert alert["annotations"]["runbook"] == "gpu-fallen-off-bus"
    # the same alert the agent raised on the node, now from the central evaluation
    assert any(a["labels"]["alertname"] == "GpuFallenOffBus" and a["labels"]["gpu"] == "5"
               for a in central["agent_alerts"])


def test_every_central_rule_evaluates_without_error(central: dict[str, Any]) -> None:
    rules = [r for g in central["rules"] for r in g["rules"]]
    assert len(rules) > 100
    unhealthy = [(r["name"], r.get("lastError")) for r in rules if r.get("health") not in ("ok", "unknown")]
    assert not unhealthy, unhealthy
    # at a 1 s scrape nothing needs the agent's own sampling; only rules that fall back to vector(), which
    # cannot name a node, are left out
    assert "GpuMissing" in [line.split('"')[3] for line in central["left_out"]]
    assert all("falls back to vector()" in line for line in central["left_out"]), central["left_out"]

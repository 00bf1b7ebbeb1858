"""The Prometheus snippets in docs/operations.md are valid for Prometheus itself (promtool), and the
relabel rules do what the text says (checked against the series the agent exports)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.loopback import page_handler, serving
from tests.support.polling import wait_until

from .conftest import REPO, free_port, http_get

OPERATIONS = REPO / "docs" / "operations.md"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")


def snippets(kind: str) -> list[str]:
    """Fenced YAML blocks preceded by ``<!-- check: KIND -->``."""
    pattern = re.compile(rf"<!-- check: {kind} -->\n```yaml\n(.*?)```", re.DOTALL)
    return pattern.findall(OPERATIONS.read_text())


@needs_promtool
def test_scrape_config_snippets_pass_promtool(tmp_path: Path) -> None:
    configs = snippets("promtool-config")
    assert len(configs) == 3
    rules = tmp_path / "inference-watchdog.rules.yaml"
    rules.write_text("groups: []\n")
    for number, text in enumerate(configs):
        text = text.replace("/etc/prometheus/rules/inference-watchdog.rules.yaml", str(rules))
        path = tmp_path / f"prometheus-{number}.yml"
        path.write_text(text)
        result = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, f"snippet {number}:\n{text}\n{result.stdout}{result.stderr}"


@needs_promtool
def test_meta_monitoring_rules_pass_promtool(tmp_path: Path) -> None:
    (text,) = snippets("promtool-rules")
    path = tmp_path / "meta.yaml"
    path.write_text(text)
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_node_relabel_regex_takes_the_host() -> None:
    config = yaml.safe_load(snippets("promtool-config")[0])
    relabel = config["scrape_configs"][0]["relabel_configs"][0]
    regex = re.compile(f"^(?:{relabel['regex']})$")  # Prometheus anchors relabel regexes
    for address, host in [("gpu-node-01:9847", "gpu-node-01"), ("10.0.0.7:9847", "10.0.0.7"), ("h", "h")]:
        match = regex.match(address)
        assert match and match.group(1) == host


def test_deployment_b_drops_exactly_the_rule_outputs() -> None:
    from watchdog.exporter.catalogue import load_catalogue
    from watchdog.infra.paths import asset_dir
    from watchdog.rules.loader import RecordingRule, load_rule_files

    config = yaml.safe_load(snippets("promtool-config")[1])
    drop = config["scrape_configs"][0]["metric_relabel_configs"][0]
    regex = re.compile(f"^(?:{drop['regex']})$")
    rules_dir = asset_dir("rules")
    assert rules_dir is not None
    ruleset = load_rule_files([str(rules_dir / "*.yaml")])
    recorded = {r.record for g in ruleset.groups for r in g.rules if isinstance(r, RecordingRule)}
    assert recorded
    assert all(regex.match(name) for name in recorded | {"ALERTS", "ALERTS_FOR_STATE"}), sorted(
        n for n in recorded if not regex.match(n))
    kept = [name for name in load_catalogue() if name not in ("ALERTS", "ALERTS_FOR_STATE")]
    assert not [name for name in kept if regex.match(name)]
    assert not regex.match("vllm:num_requests_running")


def test_deployment_b_scrapes_the_engines_under_the_agents_job_names() -> None:
    config = yaml.safe_load(snippets("promtool-config")[1])
    agent, engine = config["scrape_configs"]
    assert agent["honor_labels"] is True and "honor_labels" not in engine  # Prometheus' own up of the engine


# What an agent with ``pass_through_engine_series`` exports for one engine that is down.
AGENT_PAGE = b"""watchdog_engine_up{job="vllm-llama70b",instance="127.0.0.1:8000"} 0
vllm:num_requests_running{job="vllm-llama70b",instance="127.0.0.1:8000",model_name="m"} 3
engine:requests_running{job="vllm-llama70b",instance="127.0.0.1:8000",model_name="m"} 3
"""


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus (Debian package) is not installed")
def test_deployment_b_prime_gives_prometheus_the_engines_up(tmp_path: Path) -> None:
    """Snippet B' in a real Prometheus: the agent's watchdog_engine_up becomes the engine's up (what
    EngineDown reads), the engine's own series arrive, the agent's rule outputs are dropped."""
    config = yaml.safe_load(snippets("promtool-config")[2])
    config["rule_files"] = []
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
    port = free_port()
    with serving(page_handler(AGENT_PAGE)) as base:
        config["scrape_configs"][0]["static_configs"][0]["targets"] = [base.removeprefix("http://")]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        process = subprocess.Popen(
            [str(shutil.which("prometheus")), f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def query(expr: str) -> dict[str, str]:
                body = http_get(f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}")
                return {s["metric"].get("job", ""): s["value"][1] for s in json.loads(body.text)["data"]["result"]}

            def scraped() -> bool:
                try:
                    return len(query("up")) == 2
                except (OSError, ValueError):  # not listening yet, or not ready (503, no JSON)
                    return False

            wait_until(scraped, 30, "Prometheus to scrape the agent page")
            assert query("up") == {"inference-watchdog": "1", "vllm-llama70b": "0"}
            assert query("vllm:num_requests_running") == {"vllm-llama70b": "3"}
            assert query("engine:requests_running") == {} and query("watchdog_engine_up") == {}
        finally:
            process.terminate()
            process.wait(timeout=15)

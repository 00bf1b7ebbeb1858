"""The Prometheus snippets in docs/operations.md are valid for Prometheus itself (promtool), and the
relabel rules do what the text says (checked against the series the agent exports)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import REPO

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

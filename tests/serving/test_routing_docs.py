"""docs/routing.md holds to the code: its HAProxy examples pass ``haproxy -c`` and its defaults table
matches the config schema."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.haproxy import HAPROXY, needs_haproxy
from watchdog.config.loader import schema

DOC = (Path(__file__).resolve().parents[2] / "docs" / "routing.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.DOTALL)


@needs_haproxy
@pytest.mark.parametrize("index", range(2))
def test_haproxy_examples_are_valid_configs(tmp_path: Path, index: int) -> None:
    examples = blocks("haproxy")
    assert len(examples) == 2
    ca = tmp_path / "ca.pem"
    ca.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text()
                  if Path("/etc/ssl/certs/ca-certificates.crt").exists() else "")
    body = examples[index].replace("/etc/haproxy/agent-ca.pem", str(ca))
    config = tmp_path / "haproxy.cfg"
    config.write_text("defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n"
                      "    timeout server 1s\n\nfrontend in\n    bind 127.0.0.1:8080\n    default_backend llm\n\n"
                      + body)
    checked = subprocess.run([str(HAPROXY), "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_defaults_table_matches_the_schema() -> None:
    serving = schema()["properties"]["serving"]["properties"]
    pairs = {"short_only_enter_free_ratio": "0.30", "short_only_leave_free_ratio": "0.40",
             "shed_enter_free_ratio": "0.10", "shed_leave_free_ratio": "0.15"}
    for key, shown in pairs.items():
        assert float(shown) == serving[key]["default"], key
    for key in ("short_prompt_max_tokens", "min_seconds_in_state", "short_only_weight_percent",
                "stale_after_intervals"):
        row = re.search(rf"^\| `{key}` \| ([0-9.]+) \|", DOC, re.MULTILINE)
        assert row is not None, key
        assert float(row.group(1)) == serving[key]["default"], key
    agent_check = serving["agent_check"]["properties"]
    assert f"`{agent_check['listen']['default']}`" in DOC
    assert re.search(rf"`agent_check.max_connections` \| {agent_check['max_connections']['default']} \|", DOC)

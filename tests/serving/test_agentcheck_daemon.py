"""The agent-check port in the daemon: its config keys (off by default, loopback), the schema fragments
of one section merged, and the daemon starting it for a real agent."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from tests.support.agents import make_agent
from watchdog.config import ConfigError, load_config_text
from watchdog.config.loader import _merge_section, schema
from watchdog.config.settings import settings_from_config
from watchdog.daemon.serve import build_exporter, start_agent_check, verdict_source


def test_agent_check_is_off_by_default_and_loopback() -> None:
    settings = settings_from_config(load_config_text(""))
    assert settings.serving.agent_check.enabled is False
    assert settings.serving.agent_check.listen.startswith("127.0.0.1:")


@pytest.mark.parametrize(("text", "key"), [
    ("serving:\n  agent_check:\n    listen: nowhere\n", "serving.agent_check.listen"),
    ("serving:\n  agent_check:\n    max_connections: 0\n", "serving.agent_check.max_connections"),
    ("serving:\n  agent_check:\n    bogus: 1\n", "serving.agent_check.bogus"),
])
def test_bad_keys_are_named(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "config.yaml")
    assert key in str(caught.value) and "config.yaml:3" in str(caught.value)


def test_fragments_of_one_section_are_joined() -> None:
    properties: dict[str, object] = {}
    _merge_section(properties, "serving", {"type": "object", "description": "first",
                                           "properties": {"a": {"type": "number"}}})
    _merge_section(properties, "serving", {"type": "object", "description": "second",
                                           "properties": {"agent_check": {"type": "object"}}})
    assert properties["serving"] == {"type": "object", "description": "first",
                                     "properties": {"a": {"type": "number"}, "agent_check": {"type": "object"}}}
    _merge_section(properties, "listen", {"type": "string"})
    _merge_section(properties, "listen", {"type": "integer"})
    assert properties["listen"] == {"type": "integer"}
    assert "agent_check" in schema()["properties"]["serving"]["properties"]


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_daemon_starts_the_port_for_a_real_agent_and_fails_open_until_it_has_verdicts(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, "groups: []\n", clock=lambda: 1_800_000_000.0)
    try:
        assert start_agent_check(agent) is None  # off by default
        port = free_loopback_port()
        config = yaml.safe_load((tmp_path / "config.yaml").read_text())
        config["serving"] = {"agent_check": {"enabled": True, "listen": f"127.0.0.1:{port}"}}
        enabled = settings_from_config(load_config_text(yaml.safe_dump(config)))
        agent.settings = enabled
        server = start_agent_check(agent)
        assert server is not None and server.port == port
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(b"vllm-a\n")
                reply = conn.recv(4096).decode()
            assert reply.startswith("up ready #unknown: the agent has no verdicts yet")  # before its first tick
            # A port already taken: logged, the agent goes on without it.
            assert start_agent_check(agent) is None
        finally:
            server.stop()
        exporter = build_exporter(agent, "127.0.0.1:0")
        assert exporter.verdicts is not None and exporter.verdicts() is verdict_source(agent)
    finally:
        agent.close()

"""SIGHUP reload, section by section: every section either takes effect or is named as needing a restart,
and a reload applies all of it or nothing (the exporter's section included)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.config.settings import RemediationMode
from watchdog.daemon.scheduler import TickScheduler
from watchdog.daemon.serve import build_exporter, reload_agent
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.paths import asset_dir

RULES = """groups:
  - name: {name}
    rules:
      - record: gpu:count
        expr: count(watchdog_gpu_temperature_celsius)
"""
RUNBOOK = {"id": "custom", "title": "Custom", "alerts": ["CustomAlert"], "diagnose": [],
           "remediate": [{"name": "tell", "notify": "hello"}]}


class Node:
    """An agent over a config file in a temporary directory; ``edit`` changes the file, ``reload`` reloads."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "rules-a.yaml").write_text(RULES.format(name="a"))
        (tmp / "rules-b.yaml").write_text(RULES.format(name="b"))
        self.doc: dict[str, Any] = {
            "state_dir": str(tmp / "state"), "rules": {"paths": [str(tmp / "rules-a.yaml")]},
            "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
            "notifiers": {"log": {"enabled": False}},
        }
        self.path = tmp / "config.yaml"
        self.path.write_text(yaml.safe_dump(self.doc))
        self.clock = [1_800_000_000.0]
        self.agent = Agent(load_settings(self.path), config_path=self.path, clock=lambda: self.clock[0],
                           context=CollectorContext(nvml=FakeNvml.from_profile("h100-sxm-8")))

    def edit(self, change: Callable[[dict[str, Any]], None]) -> None:
        change(self.doc)
        self.path.write_text(yaml.safe_dump(self.doc))

    def collectors(self) -> set[str]:
        return {c.name for c in self.agent.collectors}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path)
    yield made
    made.agent.close(timeout_seconds=1)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc.setdefault(key, {})
        doc[last] = value
    return change


def _runbooks_dir(tmp: Path) -> str:
    folder = tmp / "runbooks"
    folder.mkdir(exist_ok=True)
    (folder / "custom.yaml").write_text(yaml.safe_dump(RUNBOOK))
    return str(folder)


SECTIONS: list[tuple[str, Callable[[Node], Callable[[dict[str, Any]], None]], Callable[[Node], bool]]] = [
    ("rules", lambda n: _set("rules.paths", [str(n.tmp / "rules-b.yaml")]),
     lambda n: [g.name for g in n.agent.rule_engine.ruleset.groups] == ["b"]),
    ("collectors", lambda n: _set("collectors.host.enabled", True), lambda n: "host" in n.collectors()),
    ("collectors.nvml", lambda n: _set("collectors.nvml.counters_interval_seconds", 2),
     lambda n: [getattr(c, "counters_interval_seconds", None) for c in n.agent.collectors if c.name == "nvml"] == [2]),
    ("kmsg", lambda n: _set("kmsg", {"enabled": True, "source": str(n.tmp / "kmsg.log")}),
     lambda n: "kmsg" in n.collectors()),
    ("engines", lambda n: _set("engines", [{"job": "vllm", "url": "http://127.0.0.1:9/metrics"}]),
     lambda n: {"engine:vllm", "processes"} <= n.collectors()),
    ("processes", lambda n: lambda doc: (_set("engines", [{"job": "v", "url": "http://127.0.0.1:9/m"}])(doc),
                                         _set("processes.enabled", False)(doc)),
     lambda n: "engine:v" in n.collectors() and "processes" not in n.collectors()),
    ("slo", lambda n: lambda doc: (_set("engines", [{"job": "v", "url": "http://127.0.0.1:9/m"}])(doc),
                                   _set("slo.ttft_seconds", 1.0)(doc)),
     lambda n: "engine-slo" in [g.name for g in n.agent.rule_engine.ruleset.groups]),
    ("forecast", lambda n: lambda doc: (_set("engines", [{"job": "v", "url": "http://127.0.0.1:9/m"}])(doc),
                                        _set("forecast.kv_exhaustion_horizon_seconds", 120)(doc)),
     lambda n: [r.expr for g in n.agent.rule_engine.ruleset.groups if g.name == "engine-forecast-config"
                for r in g.rules] == ["vector(120)"]),
    ("notifiers.log", lambda n: _set("notifiers.log.enabled", True), lambda n: "log" in n.agent.dispatcher.notifiers),
    ("notifiers.alertmanager", lambda n: _set("notifiers.alertmanager.urls", ["http://127.0.0.1:9/"]),
     lambda n: "alertmanager" in n.agent.dispatcher.notifiers),
    ("notifiers.slack", lambda n: _set("notifiers.slack", {"enabled": True, "channel": "C0NEW"}),
     lambda n: getattr(n.agent.dispatcher.notifiers.get("slack"), "channel", "") == "C0NEW"),
    ("notifiers.outbox", lambda n: _set("notifiers.outbox.failing_alert_after_seconds", 42),
     lambda n: n.agent.dispatcher.failing_after_ms == 42_000),
    ("remediation", lambda n: _set("remediation.mode", "approve"),
     lambda n: n.agent.runbooks.policy.mode is RemediationMode.APPROVE
     and n.agent.dispatcher.remediation_mode is RemediationMode.APPROVE),
    ("runbooks", lambda n: _set("runbooks.paths", [_runbooks_dir(n.tmp)]),
     lambda n: [r.id for r in n.agent.runbooks.catalogue] == ["custom"]),
    ("tick_interval_seconds", lambda n: _set("tick_interval_seconds", 2),
     lambda n: n.agent.settings.tick_interval_seconds == 2.0),
    ("max_series_per_source", lambda n: _set("max_series_per_source", 3000),
     lambda n: n.agent.store.quotas.per_source == 3000),
    ("max_label_values_per_metric", lambda n: _set("max_label_values_per_metric", 40),
     lambda n: n.agent.store.quotas.label_values == 40),
    ("engine_scrape_interval_seconds", lambda n: _set("engine_scrape_interval_seconds", 10),
     lambda n: n.agent.settings.engine_scrape_interval_seconds == 10.0),
    ("serving", lambda n: _set("serving.drain_guard.max_drained_share", 0.25),
     lambda n: n.agent.serving.settings.drain_guard.max_drained_share == 0.25),
]


@pytest.mark.parametrize(("section", "change", "applied"), SECTIONS, ids=[s[0] for s in SECTIONS])
def test_a_reload_applies_the_section(node: Node, section: str, change: Any, applied: Any,
                                      caplog: pytest.LogCaptureFixture) -> None:
    node.agent.tick()
    assert not applied(node)
    node.edit(change(node))
    with caplog.at_level(logging.INFO, logger="watchdog.agent"):
        assert node.agent.reload() is True
    assert applied(node), section
    (line,) = [r for r in caplog.records if r.getMessage().startswith("reloaded configuration")]
    assert any(key.startswith(section.split(".")[0]) for key in line.changed)  # type: ignore[attr-defined]
    node.clock[0] += 1
    node.agent.tick()  # and the new set runs


@pytest.mark.parametrize(("key", "value"), [
    ("node", "renamed-node"), ("listen", "127.0.0.1:19847"), ("retention_seconds", 60), ("max_series", 1000),
    ("state_dir", "/nonexistent/elsewhere"),
])
def test_keys_that_need_a_restart_keep_their_value_and_say_so(node: Node, key: str, value: Any,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    before = getattr(node.agent.settings, key)
    node.edit(lambda doc: (_set(key, value)(doc), _set("rules.paths", [str(node.tmp / "rules-b.yaml")])(doc)))
    with caplog.at_level(logging.INFO, logger="watchdog.agent"):
        assert node.agent.reload() is True
    assert getattr(node.agent.settings, key) == before
    assert [g.name for g in node.agent.rule_engine.ruleset.groups] == ["b"]  # the rest applied
    (line,) = [r for r in caplog.records if r.getMessage().startswith("reloaded configuration")]
    assert line.getMessage() == f"reloaded configuration; restart needed to apply: {key}"
    assert line.levelno == logging.WARNING


def test_exporter_and_interval_apply_with_the_rest_through_the_daemon(node: Node) -> None:
    exporter = build_exporter(node.agent, "127.0.0.1:0")
    scheduler = TickScheduler(node.agent, node.agent.settings.tick_interval_seconds)
    assert exporter.selection is not None and exporter.selection.pass_through_engine_series is False
    node.edit(lambda doc: (_set("exporter.max_series_per_metric", 77)(doc), _set("tick_interval_seconds", 3)(doc),
                           _set("exporter.pass_through_engine_series", True)(doc)))
    assert reload_agent(node.agent, exporter, scheduler) is True
    assert exporter.limiter is not None and exporter.limiter.max_per_metric == 77
    assert exporter.selection.pass_through_engine_series is True
    assert scheduler.interval_seconds == 3.0


def test_a_broken_exporter_section_keeps_every_running_setting(node: Node) -> None:
    exporter = build_exporter(node.agent, "127.0.0.1:0")
    node.edit(lambda doc: (
        _set("rules.paths", [str(node.tmp / "rules-b.yaml")])(doc),
        _set("remediation.mode", "auto")(doc),
        _set("notifiers.log.enabled", True)(doc),
        _set("exporter.tls", {"cert_file": str(node.tmp / "missing.crt"), "key_file": str(node.tmp / "k")})(doc),
    ))
    assert reload_agent(node.agent, exporter) is False
    assert node.agent.stats.reload_success is False
    assert [g.name for g in node.agent.rule_engine.ruleset.groups] == ["a"]
    assert node.agent.runbooks.policy.mode is RemediationMode.SUGGEST
    assert "log" not in node.agent.dispatcher.notifiers
    assert node.agent.settings.exporter.tls.cert_file == "" and exporter.security.tls is None


def test_every_section_has_a_reload_test() -> None:
    """A new top-level config section needs a row in SECTIONS or in the restart keys above."""
    from watchdog.agent import RESTART_KEYS
    from watchdog.config.settings import Settings

    covered = {s[0].split(".")[0] for s in SECTIONS} | set(RESTART_KEYS) | {"exporter"}
    assert {f for f in Settings.__dataclass_fields__} == covered


def test_the_shipped_rules_reload_too(node: Node) -> None:
    node.edit(_set("rules.paths", [str(asset_dir("rules") / "*.yaml")]))
    assert node.agent.reload() is True
    assert len(node.agent.rule_engine.ruleset.groups) > 3

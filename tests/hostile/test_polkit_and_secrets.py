"""Item 10: the polkit rule and the runbook schema agree on the verbs, template units can be
authorised, and credentials in an engine URL never reach a log line."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ops.test_systemd import POLKIT_HARNESS, POLKIT_RULE
from watchdog.collectors.engines import EngineCollector, redact_url
from watchdog.config.settings import EngineSettings, section_settings
from watchdog.runbooks.steps import SYSTEMD_VERBS

MANAGE = "org.freedesktop.systemd1.manage-units"


def test_polkit_verbs_are_the_runbook_schema_verbs() -> None:
    found = re.search(r"allowedVerbs = \[(.*?)\]", POLKIT_RULE.read_text())
    assert found
    assert sorted(v.strip().strip('"') for v in found.group(1).split(",")) == sorted(SYSTEMD_VERBS)


@pytest.mark.skipif(shutil.which("node") is None, reason="node (a JavaScript engine) is not installed")
def test_polkit_grants_every_schema_verb_and_template_instances_only(tmp_path: Path) -> None:
    cases = [(MANAGE, "inference-watchdog", "vllm.service", verb) for verb in SYSTEMD_VERBS] + [
        (MANAGE, "inference-watchdog", "sglang@0.service", "restart"),
        (MANAGE, "inference-watchdog", "sglang@gpu-3.service", "try-restart"),
        (MANAGE, "inference-watchdog", "sglang@.service.evil", "restart"),
        (MANAGE, "inference-watchdog", "sglangXservice", "restart"),
        (MANAGE, "inference-watchdog", "sshd.service", "restart"),
        (MANAGE, "inference-watchdog", "vllm.service", "mask"),
        (MANAGE, "someone-else", "sglang@0.service", "restart"),
    ]
    harness = tmp_path / "harness.js"
    harness.write_text(POLKIT_HARNESS)
    result = subprocess.run(["node", str(harness), str(POLKIT_RULE), json.dumps(cases)],
                            capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(result.stdout) == ["yes"] * (len(SYSTEMD_VERBS) + 2) + [None] * 5


def test_engine_url_credentials_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    url = "http://scraper:hunter2-secret@127.0.0.1:1/metrics"
    assert "hunter2" not in redact_url(url) and "127.0.0.1:1" in redact_url(url)
    with caplog.at_level(logging.DEBUG):
        collector = EngineCollector(section_settings(EngineSettings, "engines[]", {"url": url, "job": "vllm"}))
        collector.collect()
        collector.collect()
    text = caplog.text + collector.last_error
    assert "hunter2" not in text and "scraper:" not in text

"""A real Alertmanager shows the demo's alerts, and clears them when they resolve (issue 6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.alertmanager import BINARY, RealAlertmanager
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.processes import stop_process

SCENARIO = Path(__file__).parent / "fixtures" / "engine-flap.yaml"
pytestmark = pytest.mark.skipif(BINARY is None, reason="Debian package prometheus-alertmanager not installed")


@pytest.mark.slow
def test_demo_alert_reaches_alertmanager_and_resolves(tmp_path: Path) -> None:
    am = RealAlertmanager(tmp_path / "am").start()
    demo_log = tmp_path / "demo.log"  # a file, not an unread pipe that fills and blocks the demo
    with demo_log.open("wb") as log:
        demo = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "demo", "--scenario", str(SCENARIO), "--listen",
             f"127.0.0.1:{free_port()}", "--duration", "90", "--alertmanager", am.url],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        def engine_down() -> list[dict[str, Any]]:
            return [a for a in am.alerts() if a["labels"].get("alertname") == "EngineDown"]

        wait_until(lambda: any(a["status"]["state"] == "active" for a in engine_down()),
                   timeout=75, what="EngineDown active in Alertmanager")
        (alert,) = engine_down()
        labels = alert["labels"]
        assert labels["job"] == "vllm-flap" and labels["node"] == "demo-node"
        assert labels["severity"] == "critical"
        assert alert["annotations"]["runbook"] == "engine-down"
        # The engine answers again at 47 s; the resolve carries endsAt = resolution time.
        wait_until(lambda: not any(a["status"]["state"] == "active"
                                   for a in am.alerts(active="true")
                                   if a["labels"].get("alertname") == "EngineDown"),
                   timeout=60, what="EngineDown resolved in Alertmanager")
    except AssertionError as failure:
        raise AssertionError(f"{failure}\ndemo log:\n{demo_log.read_text()[-3000:]}") from failure
    finally:
        stop_process(demo, group=True)  # SIGKILL alone left the demo's engine simulator running
        am.stop()

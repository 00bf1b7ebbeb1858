"""The Alertmanager notifier against a REAL Alertmanager (Debian ``prometheus-alertmanager``) on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.notify.alerts import make_alert, xid_storm
from tests.notify.conftest import Dispatchers, notify_config
from tests.support.alertmanager import BINARY, RealAlertmanager
from tests.support.polling import wait_until

pytestmark = pytest.mark.skipif(
    BINARY is None, reason="alertmanager binary not installed (Debian package prometheus-alertmanager)"
)


@pytest.fixture
def alertmanagers(tmp_path: Path) -> Iterator[list[RealAlertmanager]]:
    ams = [RealAlertmanager(tmp_path / f"am{i}").start() for i in range(2)]
    yield ams
    for am in ams:
        am.stop()


def _firing(am: RealAlertmanager) -> list[dict[str, Any]]:
    return [a for a in am.alerts() if a["status"]["state"] == "active"]


def test_alerts_arrive_at_every_alertmanager_deduplicate_and_resolve(
    alertmanagers: list[RealAlertmanager], dispatchers: Dispatchers
) -> None:
    now = int(time.time() * 1000)
    config = notify_config(
        alertmanager={
            "urls": [am.url for am in alertmanagers],
            "resend_interval_seconds": 1,
            "generator_url": "https://grafana.example/explore?expr={expr}",
        }
    )
    d = dispatchers(config)
    storm = xid_storm(fired_at_ms=now - 5000)
    d.handle(storm, [], now)
    for am in alertmanagers:
        wait_until(lambda am=am: len(_firing(am)) == 8, what="8 alerts active")
    first = _firing(alertmanagers[0])
    sample = next(a for a in first if a["labels"]["gpu"] == "3")
    assert sample["labels"]["node"] == "gpu-node-7" and sample["labels"]["xid"] == "79"
    assert sample["generatorURL"].startswith("https://grafana.example/explore?expr=watchdog_gpu_xid")
    assert sample["annotations"]["runbook"] == "gpu-xid"
    ends_at = sample["endsAt"]
    # still firing for a few ticks, re-sent every second: same 8 alerts, endsAt pushed ahead
    for tick in range(1, 4):
        d.handle(storm, [], now + tick * 1000)
    wait_until(
        lambda: next(a for a in _firing(alertmanagers[0]) if a["labels"]["gpu"] == "3")["endsAt"] != ends_at,
        what="re-send with a later endsAt",
    )
    assert len(alertmanagers[0].alerts()) == 8 and len(alertmanagers[1].alerts()) == 8

    resolved_at = int(time.time() * 1000)
    resolved = xid_storm("resolved", fired_at_ms=now - 5000, resolved_at_ms=resolved_at)
    d.handle(resolved, [], resolved_at + 10)
    for am in alertmanagers:
        wait_until(lambda am=am: _firing(am) == [], what="alerts resolved")
    wait_until(lambda: sum(d.outbox.pending_counts().values()) == 0, what="outbox drained")


def test_alertmanager_down_for_a_while_gets_everything_once_it_is_up(tmp_path: Path, dispatchers: Dispatchers) -> None:
    am = RealAlertmanager(tmp_path / "late")  # not started yet: connection refused
    config = notify_config(alertmanager={"urls": [am.url], "resend_interval_seconds": 3600})
    d = dispatchers(config)
    now = int(time.time() * 1000)
    alert = make_alert("EngineDown", fired_at_ms=now - 10_000, job="vllm", instance="127.0.0.1:8000")
    other = make_alert("GpuHot", fired_at_ms=now - 10_000, gpu="2")
    d.handle([alert, other], [], now - 9000)
    gone = make_alert("GpuHot", "resolved", fired_at_ms=now - 10_000, resolved_at_ms=now - 5000, gpu="2")
    d.handle([alert, gone], [], now - 4000)
    wait_until(lambda: d.workers["alertmanager"].stats.attempt_failures >= 3, what="failures while down")
    assert d.outbox.pending_counts()["alertmanager"] == 3
    samples = {
        dict(s.labels)["__name__"]: s.value
        for s in d.self_samples()
        if dict(s.labels).get("notifier") == "alertmanager" and "outcome" not in dict(s.labels)
    }
    assert samples["watchdog_notifier_up"] == 0 and samples["watchdog_outbox_pending"] == 3
    am.start()
    try:
        wait_until(lambda: sum(d.outbox.pending_counts().values()) == 0, what="outbox drained")
        names = sorted(a["labels"]["alertname"] for a in _firing(am))
        assert names == ["EngineDown"]  # GpuHot arrived resolved (its firing and resolve sent as one)
    finally:
        am.stop()

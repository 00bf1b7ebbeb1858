"""Crash-test driver: a child process running a NotificationDispatcher (and its outbox) on a state dir.

    python tests/notify/driver.py --state-dir D --config C.json --phase storm|after|clear [--stop-file F]

It feeds the phase's scripted alerts to ``handle()`` every 50 ms (after ``reconcile_on_start``), prints
``READY`` once started, logs JSON lines to stderr, and on ``--stop-file`` appearing closes the dispatcher
and exits 0. The tests kill it with SIGKILL at chosen moments and restart it on the same state dir.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.notify.alerts import make_alert, xid_storm
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.infra.logs import setup_logging
from watchdog.infra.state import StateDB
from watchdog.model import Alert
from watchdog.notify.dispatcher import dispatcher_for

BASE_MS = 1_790_000_000_000  # fixed fired_at: the same alert is the same episode across restarts


def phase_alerts(phase: str) -> list[Alert]:
    """The rule engine's view in each phase of the scripted incident."""
    engine_down = make_alert("EngineDown", fired_at_ms=BASE_MS, job="vllm", instance="127.0.0.1:8000")
    if phase == "storm":
        return [*xid_storm(fired_at_ms=BASE_MS), engine_down]
    if phase == "after":
        return [
            *xid_storm("resolved", fired_at_ms=BASE_MS, resolved_at_ms=BASE_MS + 600_000),
            engine_down,
            make_alert("GpuHot", fired_at_ms=BASE_MS + 300_000, gpu="5"),
        ]
    if phase == "clear":
        return [
            make_alert(
                "EngineDown",
                "resolved",
                fired_at_ms=BASE_MS,
                resolved_at_ms=BASE_MS + 900_000,
                job="vllm",
                instance="127.0.0.1:8000",
            )
        ]
    raise SystemExit(f"unknown phase {phase}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--phase", required=True)
    parser.add_argument("--stop-file", default="")
    args = parser.parse_args()
    setup_logging("debug", json_lines=True, stream=sys.stderr)
    config = json.loads(Path(args.config).read_text())
    db = StateDB.in_dir(args.state_dir)
    with open(Path(args.state_dir) / "alerts.log", "a") as alert_log:
        dispatcher = dispatcher_for(settings_from_config(load_config_text(json.dumps(config))), db, "gpu-node-7",
                                    stream=alert_log)
        alerts = phase_alerts(args.phase)
        dispatcher.reconcile_on_start(alerts)
        print("READY", flush=True)
        stop = Path(args.stop_file) if args.stop_file else None
        while stop is None or not stop.exists():
            dispatcher.handle(alerts, [], int(time.time() * 1000))
            time.sleep(0.05)
        dispatcher.close(10.0)
    db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

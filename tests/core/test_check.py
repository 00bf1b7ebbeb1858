"""`inference-watchdog check`: one-shot collect + evaluate; Nagios exit codes 0 ok / 1 warning / 2 critical /
3 unknown; never "ok" while it watches nothing."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.support.settings import settings_of
from tests.support.sysfs import make_sysfs
from watchdog.check import run_check
from watchdog.cli.check_cmd import nagios_text, table_text
from watchdog.collectors.base import CollectorContext
from watchdog.config.settings import Settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.paths import asset_dir

RULES = str(asset_dir("rules") / "*.yaml")  # type: ignore[operator]


def _config(tmp_path: Path, **extra: Any) -> Settings:
    doc = {"state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
           "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False}, **extra}
    return settings_of(doc)


def _busy_fake() -> FakeNvml:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    for gpu in range(8):
        nvml.set_load(gpu, 90.0)
    return nvml


def test_healthy_gpus_are_ok(tmp_path: Path) -> None:
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "ok", report.to_json()
    assert report.exit_code == 0
    assert {c.name for c in report.collectors} >= {"nvml"}


def test_a_hot_gpu_is_a_warning(tmp_path: Path) -> None:
    nvml = _busy_fake()
    nvml.set(3, temperature_celsius=86)
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=nvml), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "warning", report.to_json()
    assert report.exit_code == 1
    hot = [a for a in report.alerts if a.name == "GpuThermalMarginLow"]
    assert hot and {a.labels["gpu"] for a in hot} == {"3"}
    assert {a.severity for a in report.alerts} == {"warning"}


def test_a_lost_gpu_is_critical(tmp_path: Path) -> None:
    nvml = _busy_fake()
    nvml.set(5, lost=True)
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=nvml), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "critical"
    assert report.exit_code == 2
    assert any(a.name == "GpuFallenOffBus" and a.labels["gpu"] == "5" for a in report.alerts)


def test_cli_json_and_exit_code(tmp_path: Path) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
        "collectors": {"nvml": {"enabled": False}},  # the CLI has no fake GPUs: this machine's host only
        "kmsg": {"enabled": False},
    }))
    proc = subprocess.run([sys.executable, "-m", "watchdog", "check", "--config", str(config_path), "--json",
                           "--interval", "0.1"], capture_output=True, text=True, timeout=60, check=False)
    report = json.loads(proc.stdout)
    assert set(report) == {"status", "alerts", "collectors", "problems"}
    assert proc.returncode == {"ok": 0, "warning": 1, "critical": 2}[report["status"]]
    assert [c["name"] for c in report["collectors"] if c["success"]] == ["host"]



def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", "check", "--interval", "0", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_driver_installed_but_not_loaded_is_critical(tmp_path: Path) -> None:
    sysfs, modules, _ = make_sysfs(tmp_path, gpus=8, loaded=False, installed=True)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]}, "kmsg": {"enabled": False},
        "collectors": {"nvml": {"sysfs_root": str(sysfs), "modules_root": str(modules)}},
    }))
    proc = _cli("--config", str(config_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "CRITICAL gpu_driver: 8 NVIDIA GPU(s) on the PCI bus, but the nvidia kernel module is not loaded" \
        in proc.stdout
    assert "what to do: read `dmesg | grep -i nvidia`" in proc.stdout
    assert proc.stdout.rstrip().endswith("status: critical")


def test_no_rules_is_never_ok(tmp_path: Path) -> None:
    config = _config(tmp_path, rules={"paths": [str(tmp_path / "none-here-*.yaml")]})
    report = run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "critical"
    assert [p.check for p in report.problems] == ["rules"]


def test_a_config_error_is_unknown(tmp_path: Path) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text("tick_interval_seconds: -1\n")
    proc = _cli("--config", str(config_path))
    assert proc.returncode == 3
    assert proc.stderr.startswith(f"error: {config_path}:1: tick_interval_seconds")
    assert proc.stdout.startswith("UNKNOWN: ")


def test_a_check_writes_no_state(tmp_path: Path) -> None:
    config = settings_of({"state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
                          "processes": {"enabled": True}})
    run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0, sleep=lambda _: None)
    assert not (tmp_path / "state").exists()


def test_a_bad_config_reads_as_config_check_reads_it(tmp_path: Path) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text("tick_intervl: 3\nrules:\n  pahts: []\n")
    checked = _cli("--config", str(config_path))
    linted = subprocess.run([sys.executable, "-m", "watchdog", "config", "check", str(config_path)],
                            capture_output=True, text=True, timeout=60, check=False)
    ran = subprocess.run([sys.executable, "-m", "watchdog", "run", "--config", str(config_path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 3 and linted.returncode == 2 and ran.returncode == 2
    assert "did you mean tick_interval_seconds?" in linted.stderr and f"{config_path}:3: rules.pahts" in linted.stderr
    assert checked.stderr == linted.stderr == ran.stderr


class _Answers:
    """Loopback HTTP endpoints that fail the ways engines do: HTTP 503, a hang, a page of non-engine metrics."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/hang":
                    time.sleep(3)
                    return
                if self.path == "/503":
                    self.send_response(503, "Service Unavailable")
                    self.end_headers()
                    return
                body = b"# TYPE node_load1 gauge\nnode_load1 0.5\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def test_engines_that_fail_are_fail_with_their_reason(tmp_path: Path) -> None:
    answers = _Answers()
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    dead_port = refused.getsockname()[1]
    refused.close()
    engines = [{"job": "refused", "url": f"http://127.0.0.1:{dead_port}/metrics"},
               {"job": "hung", "url": answers.url("/hang"), "scrape_timeout_seconds": 0.5},
               {"job": "busy", "url": answers.url("/503")},
               {"job": "node", "url": answers.url("/metrics")}]
    config = _config(tmp_path, engines=engines, collectors={"host": {"enabled": False}, "nvml": {"enabled": False}},
                     processes={"enabled": False})
    try:
        report = run_check(config, CollectorContext(), interval_seconds=0, sleep=lambda _: None)
    finally:
        answers.server.shutdown()
    rows = {row["name"]: row for row in report.to_json()["collectors"]}
    assert rows["engine:refused"]["error"] == f"connection refused: nothing listens on 127.0.0.1:{dead_port}"
    assert rows["engine:hung"]["error"] == "timed out after 0.5s"
    assert rows["engine:busy"]["error"] == "HTTP 503 Service Unavailable"
    assert rows["engine:node"]["error"].startswith("answered, but no engine metrics")
    assert all(not rows[f"engine:{job}"]["success"] for job in ("refused", "hung", "busy", "node"))
    assert all(row["error"] == "" for row in rows.values() if row["success"])  # never success with an error
    assert 0.4 < rows["engine:hung"]["duration_seconds"] < 2.0
    assert rows["engine:refused"]["duration_seconds"] < 0.4  # its own time, not the hung scrape's
    text = table_text(report, "c.yaml")
    assert "collector FAIL engine:busy" in text and "HTTP 503 Service Unavailable" in text
    assert report.status == "critical"


def test_nagios_output_is_one_status_line_with_perfdata_then_details(tmp_path: Path) -> None:
    nvml = _busy_fake()
    nvml.set(3, temperature_celsius=86)
    report = run_check(_config(tmp_path), CollectorContext(nvml=nvml), interval_seconds=0, sleep=lambda _: None)
    lines = nagios_text(report).splitlines()
    status, _, perf = lines[0].partition(" | ")
    assert status.startswith("INFERENCE-WATCHDOG WARNING - ") and "GpuThermalMarginLow" in status
    assert "|" not in "".join(lines[1:])  # perfdata only on the first line
    fields = dict(item.split("=", 1) for item in perf.split())
    assert fields["alerts_active"].split(";")[0] == str(len(report.alerts))
    assert fields["collector_nvml_seconds"].endswith("s;;;0")
    assert any(line.startswith("WARNING: GpuThermalMarginLow") for line in lines[1:])

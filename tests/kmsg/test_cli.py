"""``inference-watchdog kmsg parse``: the JSON shape of issue 3, text mode, errors."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from watchdog.cli import COMMAND_MODULES, kmsg_cmd

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"
JSON_KEYS = ["kind", "xid", "pci_bus_id", "pid", "process", "message", "severity", "action", "line"]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    kmsg_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["kmsg", "parse", str(FIXTURES / "dmesg-hgx-xid79-sxid.log"), "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert isinstance(events, list) and len(events) == 6
    for event in events:
        assert list(event) == JSON_KEYS
        assert event["kind"] in {"xid", "sxid", "fallen_off_bus", "oom_kill"}
        assert event["severity"] in {"info", "warning", "critical", "fatal"}
        assert isinstance(event["line"], int) and event["line"] >= 1
    assert events[0] == {
        "kind": "xid", "xid": 79, "pci_bus_id": "0000:91:00", "pid": None, "process": None,
        "message": "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "severity": "fatal", "action": "reboot_system", "line": 3,
    }
    assert [e["line"] for e in events] == sorted(e["line"] for e in events)


def test_fallen_off_bus_has_xid_79(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["kmsg", "parse", str(FIXTURES / "dmesg-fallen-off-bus-multiline.log"), "--json"]) == 0
    [event] = json.loads(capsys.readouterr().out)
    assert (event["kind"], event["xid"], event["pci_bus_id"]) == ("fallen_off_bus", 79, "0000:b3:00")


def test_text_mode_one_line_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["kmsg", "parse", str(FIXTURES / "dmesg-oom-global.log")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("line 1: oom_kill pid 25315 (python3) [critical, action restart_app]")


def test_empty_result_is_an_empty_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[ 1.0] eth0: link up\n")
    assert run(["kmsg", "parse", str(quiet), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=5, name=x, y\n"))
    assert run(["kmsg", "parse", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["xid"] == 13


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["kmsg", "parse", str(tmp_path / "nope.log")]) == 2
    assert "cannot read" in capsys.readouterr().err


def _all_commands_present() -> bool:
    return all(importlib.util.find_spec(f"watchdog.cli.{name}_cmd") for name in COMMAND_MODULES)


@pytest.mark.skipif(not _all_commands_present(), reason="other subcommand modules not written yet")
def test_through_the_real_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    from watchdog.cli import main

    assert main(["kmsg", "parse", str(FIXTURES / "kmsg-raw-records.log"), "--json"]) == 0
    assert [e["kind"] for e in json.loads(capsys.readouterr().out)] == ["xid", "fallen_off_bus", "xid", "oom_kill"]

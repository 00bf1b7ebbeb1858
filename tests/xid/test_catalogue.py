"""The XID catalogue: complete, valid, and saying what an SRE needs for the Xids that matter."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from watchdog.cli import xid_cmd
from watchdog.xid.catalogue import (
    ACTIONS,
    SEVERITIES,
    CatalogueError,
    default_catalogue,
    load_catalogue,
    parse_catalogue,
)

CATALOGUE = default_catalogue()


def test_every_documented_code_is_present() -> None:
    assert set(CATALOGUE.xids) == set(range(1, 173))


@pytest.mark.parametrize("code", sorted(CATALOGUE.xids))
def test_entry_is_valid(code: int) -> None:
    entry = CATALOGUE.xids[code]
    assert entry.code == code
    assert entry.mnemonic and entry.mnemonic == entry.mnemonic.strip()
    assert len(entry.meaning) >= 15
    assert entry.severity in SEVERITIES
    assert entry.action in ACTIONS
    assert entry.investigate is None or entry.investigate in ACTIONS
    assert "/" in entry.nvidia


DATACENTER = [8, 13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120, 121,
              *range(122, 141), 143, *range(144, 151), 151, 152, 153, 154]


@pytest.mark.parametrize("code", DATACENTER)
def test_datacenter_xids_are_documented(code: int) -> None:
    assert CATALOGUE.xid(code) is not None


def test_79_is_fatal_and_needs_a_reboot_or_hardware() -> None:
    entry = CATALOGUE.xid(79)
    assert entry is not None
    assert entry.severity == "fatal"
    assert entry.action in {"reboot_system", "hardware_inspection"}
    assert entry.mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"


def test_13_is_not_fatal() -> None:
    entry = CATALOGUE.xid(13)
    assert entry is not None and entry.severity != "fatal" and entry.action == "restart_app"


EXPECTED = {  # our reading of NVIDIA's resolution buckets for the Xids an inference fleet sees most
    31: ("warning", "restart_app"),
    43: ("warning", "none"),
    48: ("critical", "reset_gpu"),
    63: ("warning", "none"),
    64: ("critical", "reset_gpu"),
    74: ("critical", "reset_gpu"),
    94: ("warning", "restart_app"),
    95: ("critical", "reset_gpu"),
    109: ("critical", "reset_gpu"),
    119: ("critical", "reset_gpu"),
    149: ("critical", "reset_gpu"),
}


@pytest.mark.parametrize(("code", "expected"), sorted(EXPECTED.items()))
def test_severity_and_action_of_common_xids(code: int, expected: tuple[str, str]) -> None:
    entry = CATALOGUE.xid(code)
    assert entry is not None and (entry.severity, entry.action) == expected


def test_unused_codes_are_marked() -> None:
    assert CATALOGUE.xids[1].unused and CATALOGUE.xids[1].action == "contact_support"
    assert not CATALOGUE.xids[79].unused


def test_unknown_code() -> None:
    assert CATALOGUE.xid(999) is None


def test_sxids() -> None:
    entry = CATALOGUE.sxid(20034)
    assert entry is not None and entry.severity == "critical"
    assert CATALOGUE.sxid(1) is None


BAD = [
    ({"xids": {13: {"mnemonic": "X", "meaning": "m", "severity": "bad", "action": "none"}}}, "severity"),
    ({"xids": {13: {"mnemonic": "X", "meaning": "m", "severity": "info", "action": "reboot"}}}, "action"),
    ({"xids": {13: {"mnemonic": "X", "meaning": "m", "severity": "info", "action": "none",
                    "investigate": "pray"}}}, "investigate"),
    ({"xids": {13: {"meaning": "m", "severity": "info", "action": "none"}}}, "mnemonic"),
    ({"xids": {"thirteen": {"mnemonic": "X", "meaning": "m", "severity": "info", "action": "none"}}}, "code"),
    ({"xids": []}, "mapping"),
    ({"xids": {}, "sxids": {5: {"meaning": "m", "severity": "loud", "action": "none"}}}, "severity"),
]


@pytest.mark.parametrize(("document", "complaint"), BAD)
def test_invalid_catalogue_is_rejected(document: object, complaint: str) -> None:
    with pytest.raises(CatalogueError, match=complaint):
        parse_catalogue(document)


def test_load_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("xids:\n  7:\n    mnemonic: X\n    meaning: a test entry\n"
                    "    severity: info\n    action: none\n")
    assert load_catalogue(path).xid(7) is not None
    path.write_text("xids: [unclosed\n")
    with pytest.raises(CatalogueError):
        load_catalogue(path)


# ---- the CLI -----------------------------------------------------------------------------------------

def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    xid_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_explain_79_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["xid", "explain", "79"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Xid 79: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")
    assert "severity:    fatal" in out and "action:      reboot_system" in out
    assert "fallen off the bus" in out


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["xid", "explain", "13", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["code"] == 13 and body["severity"] != "fatal"
    assert set(body) == {"code", "mnemonic", "meaning", "severity", "action", "investigate",
                         "nvidia_resolution", "unused"}


def test_explain_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["xid", "explain", "999"]) == 1
    captured = capsys.readouterr()
    assert "unknown" in captured.err
    assert run(["xid", "explain", "999", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"code": 999, "error": "unknown Xid"}


def test_explain_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["xid", "explain", "lots"]) == 2
    assert run(["xid", "explain", "Xid79"]) == 0

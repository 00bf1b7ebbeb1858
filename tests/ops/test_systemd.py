"""The shipped systemd unit, polkit rule and install procedure.

- ``systemd-analyze verify`` prints nothing for the unit (ExecStart rewritten to an interpreter that
  exists here; everything else as shipped), and the ``systemd-analyze security --offline=yes`` exposure
  stays at or below the level it has now;
- every relaxed hardening option carries a comment saying why;
- the polkit rule, run by a real JavaScript engine (node) with polkit's API stubbed, allows the service
  user exactly the allowlisted units and verbs;
- ``scripts/install-check`` performs docs/install.md's steps in a temporary root and passes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

UNIT = REPO / "systemd" / "inference-watchdog.service"
POLKIT_RULE = REPO / "systemd" / "50-inference-watchdog.rules"
MAX_EXPOSURE = 2.5  # the unit scores 2.1 ("OK"); a change that weakens it must raise this on purpose
# Options set to a weaker value than systemd's hardening guides recommend; each needs a "Relaxed:" note.
RELAXED = ("ProtectKernelLogs=no", "MemoryDenyWriteExecute=no", "PrivateDevices=no", "ProtectProc=default",
           "ProcSubset=all", "PrivateUsers=no")

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed")


def unit_lines() -> list[str]:
    return UNIT.read_text().splitlines()


def settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit_lines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


@needs_systemd_analyze
def test_systemd_analyze_verify_is_silent(tmp_path: Path) -> None:
    text = UNIT.read_text()
    exec_start = f"ExecStart={sys.executable} -m watchdog run --config /etc/inference-watchdog/config.yaml"
    rewritten = re.sub(r"^ExecStart=.*$", exec_start, text, flags=re.MULTILINE)
    assert rewritten.count("\n") == text.count("\n")
    copy = tmp_path / "inference-watchdog.service"
    copy.write_text(rewritten)
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stdout + result.stderr


@needs_systemd_analyze
def test_security_exposure(capsys: pytest.CaptureFixture[str]) -> None:
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(UNIT)],
                            capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for inference-watchdog\.service: (\d+\.\d+) (\w+)", result.stdout)
    assert match, result.stdout[-2000:] + result.stderr
    with capsys.disabled():
        print(f"\nsystemd-analyze security --offline=yes: exposure {match.group(1)} {match.group(2)}")
    assert float(match.group(1)) <= MAX_EXPOSURE


def test_unit_contract() -> None:
    s = settings()
    assert s["Type"] == ["notify"]
    assert s["NotifyAccess"] == ["main"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["Restart"] == ["on-failure"]
    assert int(s["WatchdogSec"][0]) >= 10  # far above the 1 s tick: only a wedged loop trips it
    assert s["StartLimitBurst"] and s["StartLimitIntervalSec"]
    assert s["StateDirectory"] == ["inference-watchdog"] and s["ConfigurationDirectory"] == ["inference-watchdog"]
    assert s["ExecStart"][0].startswith("/opt/inference-watchdog/bin/inference-watchdog run --config ")
    assert s["EnvironmentFile"] == ["-/etc/inference-watchdog/environment"]
    assert "MALLOC_ARENA_MAX=2" in s["Environment"]  # glibc arenas: docs/performance.md, memory and churn
    assert s["User"] == ["inference-watchdog"]
    assert s["CapabilityBoundingSet"] == [""]
    assert "DevicePolicy" in s and any("nvidia" in d for d in s["DeviceAllow"])


def test_every_relaxed_option_says_why() -> None:
    lines = unit_lines()
    for option in RELAXED:
        assert option in lines, f"{option} not in the unit (update RELAXED)"
        index = lines.index(option)
        comment: list[str] = []
        for previous in reversed(lines[:index]):
            if not previous.startswith("#"):
                if "=" in previous and not comment:
                    continue  # options grouped under one comment
                break
            comment.append(previous)
        assert any("Relaxed" in c for c in comment), f"{option} has no 'Relaxed: why' comment above it"


POLKIT_HARNESS = r"""
const fs = require("fs");
const rules = [];
const polkit = {Result: {YES: "yes", NO: "no", AUTH_ADMIN: "auth_admin"}, addRule: (f) => rules.push(f)};
new Function("polkit", fs.readFileSync(process.argv[2], "utf8"))(polkit);
const cases = JSON.parse(process.argv[3]);
const out = cases.map(([id, user, unit, verb]) => {
  const action = {id: id, lookup: (key) => ({unit: unit, verb: verb})[key]};
  for (const rule of rules) {
    const result = rule(action, {user: user});
    if (result !== undefined) return result;
  }
  return null;
});
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node (a JavaScript engine) is not installed")
def test_polkit_rule_allows_only_allowlisted_units(tmp_path: Path) -> None:
    manage = "org.freedesktop.systemd1.manage-units"
    cases = [
        (manage, "inference-watchdog", "vllm.service", "restart"),
        (manage, "inference-watchdog", "sglang.service", "start"),
        (manage, "inference-watchdog", "vllm.service", "try-restart"),
        (manage, "inference-watchdog", "sshd.service", "restart"),
        (manage, "inference-watchdog", "vllm.service", "mask"),
        (manage, "someone-else", "vllm.service", "restart"),
        ("org.freedesktop.systemd1.manage-unit-files", "inference-watchdog", "vllm.service", "enable"),
        ("org.freedesktop.login1.reboot", "inference-watchdog", "", ""),
    ]
    harness = tmp_path / "harness.js"
    harness.write_text(POLKIT_HARNESS)
    result = subprocess.run(["node", str(harness), str(POLKIT_RULE), json.dumps(cases)],
                            capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(result.stdout) == ["yes", "yes", "yes", None, None, None, None, None]


def test_polkit_units_match_the_example_config() -> None:
    import yaml

    allowed = re.search(r"allowedUnits = \[(.*?)\]", POLKIT_RULE.read_text())
    assert allowed
    units = [u.strip().strip('"') for u in allowed.group(1).split(",")]
    example = yaml.safe_load((REPO / "systemd" / "config.example.yaml").read_text())
    assert set(example["remediation"]["allow"]["units"]) <= set(units)


def test_example_config_is_valid() -> None:
    from watchdog.config import load_config

    config = load_config(REPO / "systemd" / "config.example.yaml")
    assert config["state_dir"] == "/var/lib/inference-watchdog"
    assert config["rules"]["paths"][0].startswith("/opt/inference-watchdog/share/inference-watchdog/rules/")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("useradd") is None and shutil.which("systemd-analyze") is None,
                    reason="neither useradd nor systemd-analyze: nothing of the install to check here")
def test_install_check_script(capsys: pytest.CaptureFixture[str]) -> None:
    # Its own temporary root under /tmp: pytest's tmp_path sits in a 0700 directory the service user
    # could not enter, and a socket path there may exceed AF_UNIX's 108 bytes.
    result = subprocess.run([str(REPO / "scripts" / "install-check")],
                            capture_output=True, text=True, timeout=300, env={"PYTHON": sys.executable,
                                                                              "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "install-check: OK" in output
    if shutil.which("systemd-analyze"):
        assert "systemd-analyze verify: clean" in output
    assert "READY=1" in output and "stop: STOPPING=1, exit 0" in output
    kept = re.search(r"installing into (\S+)", output)
    assert kept and not Path(kept.group(1)).exists()  # removed unless --keep
    with capsys.disabled():
        print("\n" + "\n".join(line for line in output.splitlines() if line.startswith(("==", "systemd-analyze"))))

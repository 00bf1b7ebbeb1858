"""The Debian package: `dpkg-buildpackage -us -uc -b` on a copy of the checkout builds a .deb that puts the
unit, the config and the rule pack in their FHS places and whose agent runs from its private tree.

Needs dpkg-buildpackage and debhelper (`apt-get install debhelper`); skipped without them. The package is
not installed on this machine (it is shared): it is unpacked with `dpkg-deb -x` into a temporary root and
its agent is run from there with the launcher's path pointed into that root.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import watchdog
from tests.support.checkout import copy_checkout

from .conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("dpkg-buildpackage") is None or shutil.which("dh") is None,
                       reason="dpkg-buildpackage and debhelper are not installed (apt-get install debhelper)"),
    pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout to copy its files"),
]
LIB = "usr/lib/inference-watchdog"
SHARE = "usr/share/inference-watchdog"
UNIT = "usr/lib/systemd/system/inference-watchdog.service"


@dataclass(frozen=True)
class Deb:
    """The built package, unpacked: ``root`` holds its files, ``control`` its control area."""

    path: Path
    root: Path
    control: Path


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Deb:
    work = tmp_path_factory.mktemp("deb")
    src = copy_checkout(REPO, work / "inference-watchdog")
    result = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (path,) = work.glob("inference-watchdog_*.deb")
    root, control = work / "root", work / "control"
    subprocess.run(["dpkg-deb", "-x", str(path), str(root)], check=True)
    subprocess.run(["dpkg-deb", "-e", str(path), str(control)], check=True)
    return Deb(path, root, control)


def field(deb: Deb, name: str) -> str:
    match = re.search(rf"^{name}: (.*)$", (deb.control / "control").read_text(), re.MULTILINE)
    assert match, f"no {name} in the control file"
    return match.group(1)


def test_version_and_dependencies(deb: Deb) -> None:
    assert field(deb, "Version") == watchdog.__version__
    depends = field(deb, "Depends")
    build_python = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
    major, minor = build_python.split(".")
    # Its compiled dependencies are built for the build host's Python: that minor version and no other.
    assert f"python3 (>= {build_python}), python3 (<< {major}.{int(minor) + 1})" in depends, depends
    assert "adduser" in depends


def test_fhs_places(deb: Deb) -> None:
    assert sorted(p.name for p in (deb.root / SHARE / "rules").glob("*.yaml")) == \
        sorted(p.name for p in (REPO / "rules").glob("*.yaml"))
    assert sorted(p.name for p in (deb.root / SHARE / "runbooks").glob("*.yaml")) == \
        sorted(p.name for p in (REPO / "runbooks").glob("*.yaml"))
    assert (deb.root / UNIT).is_file()
    assert (deb.root / "usr/bin/inference-watchdog").stat().st_mode & stat.S_IXOTH
    assert (deb.root / LIB / "watchdog" / "cli" / "__init__.py").is_file()
    # The installed RECORD names share/inference-watchdog/ beside the package: a (relative) link to /usr/share.
    assert (deb.root / LIB / "share" / "inference-watchdog").resolve() == (deb.root / SHARE).resolve()
    assert not (deb.root / "opt").exists()
    conffiles = (deb.control / "conffiles").read_text().split()
    assert conffiles == ["/etc/inference-watchdog/config.yaml", "/etc/inference-watchdog/environment"]
    assert stat.S_IMODE((deb.root / "etc/inference-watchdog/environment").stat().st_mode) == 0o600


def test_unit_differs_from_the_shipped_one_only_in_its_paths(deb: Deb) -> None:
    shipped = (REPO / "systemd" / "inference-watchdog.service").read_text().splitlines()
    packaged = (deb.root / UNIT).read_text().splitlines()
    assert len(shipped) == len(packaged)
    changed = [(a, b) for a, b in zip(shipped, packaged, strict=True) if a != b]
    assert changed and all("/opt/inference-watchdog" in a and "/opt/" not in b for a, b in changed), changed
    assert "ExecStart=/usr/bin/inference-watchdog run --config /etc/inference-watchdog/config.yaml" in packaged


def test_config_reads_the_packaged_rule_pack(deb: Deb) -> None:
    config = (deb.root / "etc/inference-watchdog/config.yaml").read_text()
    assert "/opt/" not in config
    assert f"/{SHARE}/rules/*.yaml" in config and f"/{SHARE}/runbooks" in config


def run_maintainer_script(deb: Deb, script: str, args: list[str], tmp_path: Path) -> list[list[str]]:
    """Run a maintainer script with adduser, deluser and systemctl replaced by recorders; their calls."""
    fakes = tmp_path / "bin"
    fakes.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    for tool in ("adduser", "deluser", "systemctl", "deb-systemd-helper", "deb-systemd-invoke"):
        (fakes / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        (fakes / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", str(deb.control / script), *args], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.split() for line in calls.read_text().splitlines()] if calls.exists() else []


def test_postinst_creates_the_service_user(deb: Deb, tmp_path: Path) -> None:
    calls = run_maintainer_script(deb, "postinst", ["configure", ""], tmp_path)
    (adduser,) = [c for c in calls if c[0] == "adduser"]
    assert {"--system", "--group", "--no-create-home"} <= set(adduser) and adduser[-1] == "inference-watchdog"
    assert adduser[adduser.index("--home") + 1] == "/var/lib/inference-watchdog"
    assert not [c for c in calls if c[:2] == ["systemctl", "enable"]], "the unit must not be enabled on install"
    unit = (deb.root / UNIT).read_text()
    assert "User=inference-watchdog" in unit and "Group=inference-watchdog" in unit
    # On a systemd host: removal disables and stops the unit, an upgrade restarts a running agent.
    assert "systemctl disable --now inference-watchdog.service" in (deb.control / "prerm").read_text()
    assert "systemctl try-restart inference-watchdog.service" in (deb.control / "postinst").read_text()


def test_packaged_agent_runs_from_its_private_tree(deb: Deb, tmp_path: Path) -> None:
    launcher = (deb.root / "usr/bin/inference-watchdog").read_text()
    assert launcher.startswith("#!/usr/bin/python3 -I\n") and f'"/{LIB}"' in launcher
    local = tmp_path / "inference-watchdog"
    local.write_text(launcher.replace(f'"/{LIB}"', f'"{deb.root / LIB}"'))
    config = tmp_path / "config.yaml"
    text = (deb.root / "etc/inference-watchdog/config.yaml").read_text()
    text = text.replace(f"/{SHARE}", str(deb.root / SHARE)).replace("/etc/inference-watchdog", str(tmp_path / "etc"))
    config.write_text(re.sub(r"^state_dir: .*$", f"state_dir: {tmp_path / 'state'}", text, flags=re.MULTILINE))
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    version = subprocess.run([python, "-I", str(local), "--version"], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=60)
    assert version.stdout.strip() == f"inference-watchdog {watchdog.__version__}", version.stderr
    check = subprocess.run([python, "-I", str(local), "check", "--config", str(config)], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=120)
    assert check.returncode in (0, 1, 2) and "Traceback" not in check.stderr, check.stdout + check.stderr
    assert "no rules are loaded" not in check.stdout
    assert re.search(r"^status: (ok|warning|critical)", check.stdout, re.MULTILINE), check.stdout

"""The Debian package (debian/, docs/install.md "Debian package"): built with dpkg-buildpackage from a
copy of the checkout, it holds the venv under /opt, the unit, the config conffiles and the rule pack in
FHS places, and its command runs. Opt-in (IW_TEST_DEB=1): pip installs every dependency, about two
minutes on a shared machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("IW_TEST_DEB") != "1", reason="opt-in: IW_TEST_DEB=1 builds the .deb"),
    pytest.mark.skipif(not (shutil.which("dpkg-buildpackage") and shutil.which("dh")),
                       reason="dpkg-dev and debhelper are not installed"),
]


def test_the_package_builds_and_puts_everything_in_its_place(tmp_path: Path) -> None:
    source = tmp_path / "inference-watchdog"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        target = REPO / name
        if target.is_symlink():
            (source / name).symlink_to(os.readlink(target))
        elif target.is_file():
            shutil.copy2(target, source / name)
    build = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=source, capture_output=True, text=True,
                           timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    deb = next(tmp_path.glob("inference-watchdog_*.deb"))
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Depends: python3 (>= 3." in info and "adduser" in info
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in ("./lib/systemd/system/inference-watchdog.service", "./etc/inference-watchdog/config.yaml",
                 "./usr/bin/inference-watchdog -> /opt/inference-watchdog/bin/inference-watchdog",
                 "./usr/share/inference-watchdog -> /opt/inference-watchdog/share/inference-watchdog",
                 "./usr/share/polkit-1/rules.d/50-inference-watchdog.rules",
                 "./opt/inference-watchdog/share/inference-watchdog/rules/gpu.yaml"):
        assert path in listing, path
    root = tmp_path / "root"
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    python = root / "opt" / "inference-watchdog" / "bin" / "python3"
    script = (root / "opt" / "inference-watchdog" / "bin" / "inference-watchdog").read_text()
    assert "/opt/inference-watchdog/bin/python" in script and str(source) not in script  # relocated
    checked = subprocess.run([str(python), "-m", "watchdog", "config", "check",
                              str(root / "etc" / "inference-watchdog" / "config.yaml")],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr

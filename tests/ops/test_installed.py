"""The package as an operator installs it: a built wheel, installed non-editable into a directory far from
the checkout, finds its shipped rule pack and runbooks on its own, and `check` writes no state.

The wheel is built once for the module (a few seconds); the checkout is never on the installed
command's path, so a test passing here cannot be reading ``rules/`` from the source tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.config.loader import DEFAULT_CONFIG_PATH

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory holding the wheel's install (``pip install --target``), outside the checkout."""
    root = tmp_path_factory.mktemp("installed")
    dist = root / "dist"
    # Through an sdist, as a release is built: nothing is built inside the checkout, which other test
    # workers read at the same time.
    pytest.importorskip("build")
    subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("inference_watchdog-*.whl"))
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=120)
    yield target


def _iw(target: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, "-m", "watchdog", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_installed_package_is_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import watchdog; print(watchdog.__file__)"], cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(installed)}, capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(str(installed))


@pytest.mark.skipif(DEFAULT_CONFIG_PATH.exists(), reason="this host has a config: `check` would read it")
def test_check_with_no_config_loads_the_shipped_rule_pack(installed: Path, tmp_path: Path) -> None:
    result = _iw(installed, tmp_path, "check", "--json", "--interval", "0")
    assert result.returncode in (0, 1, 2), result.stderr
    report = json.loads(result.stdout)
    assert [p for p in report["problems"] if p["check"] == "rules"] == [], report["problems"]


def test_the_installed_runbooks_and_rules_are_found(installed: Path, tmp_path: Path) -> None:
    listed = _iw(installed, tmp_path, "runbooks", "list")
    assert listed.returncode == 0, listed.stderr
    assert "engine-down " in listed.stdout and "alerts: EngineDown" in listed.stdout
    rendered = _iw(installed, tmp_path, "rules", "render")
    assert rendered.returncode == 0, rendered.stderr
    assert "alert: GpuFallenOffBus" in rendered.stdout
    assert str(installed / "share" / "inference-watchdog" / "rules") in rendered.stdout


def test_check_creates_no_state(installed: Path, tmp_path: Path) -> None:
    state = tmp_path / "var" / "lib" / "inference-watchdog"
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {state}\nkmsg: {{enabled: true}}\n")
    result = _iw(installed, tmp_path, "check", "--config", str(config), "--interval", "0")
    assert result.returncode in (0, 1, 2), result.stderr
    assert not (tmp_path / "var").exists(), sorted(str(p) for p in (tmp_path / "var").rglob("*"))

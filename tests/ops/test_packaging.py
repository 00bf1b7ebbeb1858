"""Installable like a tool: the wheel and the sdist pass `twine check`, the sdist carries the rule pack,
runbooks and unit, and `pipx install` of the built wheel gives a working `inference-watchdog` that finds its
shipped rules and runbooks. Built once for the module (about 25 s with the pipx install)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sdist and the wheel built from it, as `python -m build` makes them for a release."""
    if not _have("build"):
        pytest.skip("the `build` package is not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    yield out


def test_twine_check_passes(dist: Path) -> None:
    if not _have("twine"):
        pytest.skip("twine is not installed (pip install -e '.[test]')")
    files = sorted(str(p) for p in dist.iterdir())
    assert any(f.endswith(".whl") for f in files) and any(f.endswith(".tar.gz") for f in files)
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_sdist_carries_what_the_wheel_installs(dist: Path) -> None:
    sdist = next(dist.glob("*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    for needed in ("rules/gpu.yaml", "runbooks/gpu-xid.yaml", "runbooks/gpu-xid.md",
                   "systemd/inference-watchdog.service", "scenarios/long-context-bomb.yaml"):
        assert any(name.endswith(needed) for name in names), needed


def test_pipx_install_gives_a_working_command(dist: Path, tmp_path: Path) -> None:
    if not _have("pipx"):
        pytest.skip("pipx is not installed (pip install -e '.[test]')")
    wheel = next(dist.glob("*.whl"))
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man")}
    done = subprocess.run([sys.executable, "-m", "pipx", "install", str(wheel)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    command = tmp_path / "bin" / "inference-watchdog"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(command), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={k: v for k, v in env.items() if k != "PYTHONPATH"})

    assert run("--version").stdout.startswith("inference-watchdog ")
    rendered = run("rules", "render")
    assert rendered.returncode == 0 and str(tmp_path / "pipx" / "venvs") in rendered.stdout  # its own rule pack
    assert "alert: GpuFallenOffBus" in rendered.stdout
    assert "engine-down" in run("runbooks", "list").stdout
    status = run("gpu", "status", "--fake", "h100-sxm-8")
    assert status.returncode == 0 and len(status.stdout.splitlines()) == 9

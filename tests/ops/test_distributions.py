"""The distributions: `python -m build` makes an sdist and a wheel that `twine check` passes and that hold
what the agent needs at run time.

One module-scoped build (the sdist, then the wheel built *from the sdist*, as `python -m build` does, so
a file the sdist forgets breaks the wheel) serves every test:

- `twine check --strict` passes both, with the Markdown renderer installed so the README is really rendered;
- the wheel holds every module of the package, the console script, and the rule pack, runbooks,
  dashboards, scenarios, unit files and operator docs as data under share/inference-watchdog/;
- the sdist holds everything the wheel ships, at its source path, and every file the README links;
- the wheel installed into a fresh virtual environment outside the checkout runs `--version` and `check`
  on its own shipped rule pack (dependencies come from this test environment through a path entry, so the
  test needs no package index; `pipx install` of the same wheel is the operator's route, docs/install.md).
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import tomllib
from packaging.requirements import Requirement

import watchdog
from tests.support.checkout import copy_checkout

from .conftest import REPO

pytestmark = pytest.mark.slow  # builds the sdist and the wheel (about 20 s)
SHARE = "share/inference-watchdog"
# Source directories whose files the agent reads at run time from <prefix>/share/inference-watchdog/.
RUNTIME_ASSETS = {"rules": "*.yaml", "runbooks": "*.yaml", "dashboards": "*.json", "systemd": "*"}


@dataclass(frozen=True)
class Dists:
    """The built sdist and wheel, and the names of their members (sdist names without the top folder)."""

    sdist: Path
    wheel: Path
    sdist_names: frozenset[str]
    wheel_names: frozenset[str]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    out = tmp_path_factory.mktemp("dist")
    src = copy_checkout(REPO, tmp_path_factory.mktemp("src") / "inference-watchdog")
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    with tarfile.open(sdist) as tar:
        sdist_names = frozenset(str(PurePosixPath(*PurePosixPath(m.name).parts[1:]))
                                for m in tar.getmembers() if m.isfile())
    with zipfile.ZipFile(wheel) as zf:
        wheel_names = frozenset(zf.namelist())
    return Dists(sdist, wheel, sdist_names, wheel_names)


def data_dir(d: Dists) -> str:
    return f"inference_watchdog-{watchdog.__version__}.data/data/{SHARE}"


def test_names_carry_the_version(dists: Dists) -> None:
    assert dists.sdist.name == f"inference_watchdog-{watchdog.__version__}.tar.gz"
    assert dists.wheel.name == f"inference_watchdog-{watchdog.__version__}-py3-none-any.whl"


def test_twine_check_renders_the_readme(dists: Dists) -> None:
    import readme_renderer.markdown

    html = readme_renderer.markdown.render((REPO / "README.md").read_text())
    assert html is not None, "no Markdown renderer: install readme-renderer[md] (the test extra has it)"
    assert "](" not in html and "**" not in html, "Markdown left unrendered in the long description"
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.count("PASSED") == 2, result.stdout + result.stderr


def test_wheel_metadata(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as zf:
        info = f"inference_watchdog-{watchdog.__version__}.dist-info"
        meta = email.parser.Parser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "inference-watchdog" and meta["Version"] == watchdog.__version__
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# inference-watchdog")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {str(Requirement(d)) for d in project["dependencies"]}  # normalised: specifiers in one order
    assert declared <= {str(Requirement(d)) for d in meta.get_all("Requires-Dist") or []}
    assert re.search(r"^inference-watchdog = watchdog\.cli:main$", entry_points, re.MULTILINE), entry_points


def test_wheel_holds_every_module_and_runtime_asset(dists: Dists) -> None:
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "watchdog").rglob("*.py")}
    assert modules - dists.wheel_names == set()
    for folder, pattern in RUNTIME_ASSETS.items():
        shipped = {p.name for p in (REPO / folder).glob(pattern) if p.is_file()}
        assert shipped, f"{folder}/{pattern} matches nothing in the checkout"
        in_wheel = {PurePosixPath(n).name for n in dists.wheel_names
                    if n.startswith(f"{data_dir(dists)}/{folder}/") and n.count("/") == data_dir(dists).count("/") + 2}
        assert shipped - in_wheel == set(), f"{folder}: missing from the wheel"
    assert f"{data_dir(dists)}/systemd/inference-watchdog.service" in dists.wheel_names
    assert not any(n.startswith(("tests/", ".venv/", "benchmarks/")) for n in dists.wheel_names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in dists.wheel_names)


def test_sdist_holds_what_the_wheel_ships(dists: Dists) -> None:
    prefix = data_dir(dists) + "/"
    from_data = {n[len(prefix):] for n in dists.wheel_names if n.startswith(prefix)}
    package = {n for n in dists.wheel_names if n.startswith("watchdog/")}
    assert from_data, "the wheel ships no data files"
    assert (from_data | package) - dists.sdist_names == set()
    assert {"pyproject.toml", "README.md", "MANIFEST.in", "PKG-INFO"} <= dists.sdist_names


def test_readme_links_resolve_in_the_sdist(dists: Dists) -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = {link for link in links if "://" not in link}
    assert local, "the README links no local files any more: update this test"
    assert local - dists.sdist_names == set()


def test_wheel_installed_in_a_fresh_venv_runs(dists: Dists, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                              str(dists.wheel)],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    # Dependencies from this test environment, appended after the venv's own site-packages (a plain path:
    # the .pth files there, among them the checkout's editable install, are not processed).
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "zz_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    command = env_dir / "bin" / "inference-watchdog"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    origin = subprocess.run([str(python), "-c", "import watchdog; print(watchdog.__file__)"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, check=True).stdout
    assert origin.startswith(str(site)), origin

    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, cwd=tmp_path,
                             env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"inference-watchdog {watchdog.__version__}"

    rules = env_dir / SHARE / "rules"
    assert sorted(p.name for p in rules.glob("*.yaml")) == sorted(p.name for p in (REPO / "rules").glob("*.yaml"))
    config = tmp_path / "config.yaml"
    config.write_text(f"rules:\n  paths:\n    - {rules}/*.yaml\n"
                      f"runbooks:\n  paths:\n    - {env_dir / SHARE / 'runbooks'}\n"
                      f"state_dir: {tmp_path / 'state'}\n")
    check = subprocess.run([str(command), "check", "--config", str(config)], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=120)
    assert check.returncode in (0, 1, 2), check.stdout + check.stderr
    assert "Traceback" not in check.stderr, check.stderr
    assert "no rules are loaded" not in check.stdout, check.stdout
    assert re.search(r"^status: (ok|warning|critical)", check.stdout, re.MULTILINE), check.stdout

"""Where the agent finds its shipped assets (rules, runbooks, scenarios, dashboards).

Contract: :func:`asset_dirs` lists, in order, the source checkout (``<repo>/<kind>`` beside its
``pyproject.toml``, for development and `pip install -e`), the directory the installed distribution's
own file list (its ``RECORD``) puts them in (``share/inference-watchdog/<kind>`` under whatever prefix
pip, pipx or ``--user`` chose), ``share/inference-watchdog/<kind>`` beside the ``watchdog`` package
(``pip install --target DIR`` puts them in ``DIR/share``, and its RECORD does not say so), the running
interpreter's prefix (``<sys.prefix>/share/inference-watchdog/<kind>``) and the system location
``/usr/share/inference-watchdog/<kind>``; only existing directories are returned, each once. Nothing
here depends on the working directory, so the assets are found from any directory.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from pathlib import Path

ASSET_KINDS = ("rules", "runbooks", "scenarios", "dashboards", "systemd")
DISTRIBUTION = "inference-watchdog"
SHARE_PARTS = ("share", "inference-watchdog")


@functools.lru_cache(maxsize=1)
def installed_share_dir() -> Path | None:
    """``.../share/inference-watchdog`` where the installed distribution's RECORD put its data files,
    or None (not installed, installed without data files, or no RECORD)."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    for entry in files:
        parts = entry.parts
        for i in range(len(parts) - 2):
            if parts[i:i + 2] == SHARE_PARTS:
                located = Path(str(entry.locate())).resolve()
                return located.parents[len(parts) - i - 3]
    return None


def asset_dirs(kind: str) -> list[Path]:
    """Existing directories holding assets of ``kind`` (one of :data:`ASSET_KINDS`), best first."""
    if kind not in ASSET_KINDS:
        raise ValueError(f"unknown asset kind {kind!r}")
    installed = installed_share_dir()
    checkout = Path(__file__).resolve().parents[2]
    candidates = [
        *([checkout / kind] if (checkout / "pyproject.toml").is_file() else []),
        *([installed / kind] if installed else []),
        checkout.joinpath(*SHARE_PARTS, kind),  # pip install --target DIR: DIR/share beside DIR/watchdog
        Path(sys.prefix) / "share" / "inference-watchdog" / kind,
        Path("/usr/share/inference-watchdog") / kind,
    ]
    seen: list[Path] = []
    for candidate in candidates:
        if candidate.is_dir() and candidate not in seen:
            seen.append(candidate)
    return seen


def asset_dir(kind: str) -> Path | None:
    """The first existing directory of ``kind``, or None."""
    dirs = asset_dirs(kind)
    return dirs[0] if dirs else None

"""Where the agent finds its shipped assets (rules, runbooks, scenarios, dashboards).

Contract: :func:`asset_dirs` lists, in order, the source checkout (``<repo>/<kind>``, for development
and `pip install -e`), the virtual environment's data files (``<prefix>/share/inference-watchdog/<kind>``,
installed by `pip install .`), and the system location ``/usr/share/inference-watchdog/<kind>``; only
existing directories are returned.
"""

from __future__ import annotations

import sys
from pathlib import Path

ASSET_KINDS = ("rules", "runbooks", "scenarios", "dashboards", "systemd")


def asset_dirs(kind: str) -> list[Path]:
    """Existing directories holding assets of ``kind`` (one of :data:`ASSET_KINDS`), best first."""
    if kind not in ASSET_KINDS:
        raise ValueError(f"unknown asset kind {kind!r}")
    candidates = [
        Path(__file__).resolve().parents[2] / kind,
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

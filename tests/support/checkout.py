"""A copy of the checkout's files (tracked and untracked, not ignored) for tests that build from it.

Building in a copy keeps build outputs (egg-info, build/, debian/ staging) out of the working tree, where
tests on other workers read and build at the same time.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path


def copy_checkout(repo: Path, dest: Path) -> Path:
    """Copy ``git ls-files --cached --others --exclude-standard`` of ``repo`` into ``dest``; return ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.split(b"\0")
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, (entry.decode() for entry in listed)):
            if (repo / name).exists():  # a tracked file deleted in the working tree is left out
                tar.add(repo / name, arcname=name, recursive=False)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="tar")
    archive.unlink()
    return dest

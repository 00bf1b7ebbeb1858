"""The docs shipped as package data are listed one by one: every page an operator needs, and only those."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
FOR_ENGINEERS = {"docs/architecture.md"}  # the project's own map, not an operator's page


def test_every_operator_page_is_shipped_and_every_shipped_page_exists() -> None:
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = set(data_files["share/inference-watchdog/docs"])
    pages = {str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")}
    assert shipped == pages - FOR_ENGINEERS

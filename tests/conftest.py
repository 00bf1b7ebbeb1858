"""How ``pytest -n N`` (pytest-xdist, what scripts/test runs) shares the suite among its workers.

Tests are handed out one by one (the suite mostly waits on processes and servers, so fine-grained
balancing keeps every worker busy), except that a file defining a module-, class- or package-scoped
fixture goes to one worker whole: its shared setup (a demo run, real Prometheus servers, a simulated
pipeline) then runs once, not once per worker that happens to get one of its tests. Files are sent
largest first, then single tests in collection order, where tests marked ``slow`` (tens of seconds,
mostly real time) come first: started last, one of them would run on alone after the rest had finished.

This replaces xdist's ``--dist loadgroup``, whose ``xdist_group`` marks pytest 9.2 no longer honours
(xdist renames ``item._nodeid``, which pytest 9.2 stopped reading).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@cache
def _has_shared_fixture(path: Path) -> bool:
    """Whether the test file at ``path`` defines a fixture that outlives one test."""
    try:
        return SHARED_SCOPE.search(path.read_text(encoding="utf-8")) is not None
    except OSError:
        return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker: tests marked ``slow`` first (a stable sort: the rest keep their order). Every
    worker sorts the same way, so the collections the controller compares stay identical."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For ``--dist load`` (the default of ``-n``): one test per work unit, a whole file where tests
    share a fixture (see the module docstring); other ``--dist`` modes are left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class SharedFixtureFileScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _has_shared_fixture(root / path) else nodeid

    return SharedFixtureFileScheduling(config, log)

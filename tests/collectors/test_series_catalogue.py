"""The collectors' own series tables agree with the exporter's catalogue (one description per series).

``NVML_SERIES`` and ``HOST_SERIES`` are what the collectors promise; ``watchdog/exporter/catalogue.yaml`` is
what the exporter documents and checks against a live scrape. Neither may drift from the other.
"""

from __future__ import annotations

import pytest

from watchdog.collectors.host import HOST_SERIES
from watchdog.collectors.nvml.catalogue import NVML_SERIES, SeriesInfo
from watchdog.exporter.catalogue import load_catalogue

PER_GPU = ("gpu", "uuid")
TABLES = [(name, info, PER_GPU) for name, info in NVML_SERIES.items()] + [
    (name, info, ()) for name, info in HOST_SERIES.items()]


@pytest.mark.parametrize(("name", "info", "common"), TABLES, ids=[t[0] for t in TABLES])
def test_collector_table_matches_the_exporter_catalogue(name: str, info: SeriesInfo, common: tuple[str, ...]) -> None:
    spec = load_catalogue().get(name)
    assert spec is not None, f"{name} is not in watchdog/exporter/catalogue.yaml"
    assert (spec.type, spec.help) == (info.type, info.help)
    assert set(spec.labels) == set(common) | set(info.labels)

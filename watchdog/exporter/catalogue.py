"""The catalogue of every series the agent itself exports (``catalogue.yaml``): type, unit, labels, help.

Contract: the exporter types and documents agent series from this file; a test fails when the agent emits
a ``watchdog_*`` (or other agent-owned) series missing here, or the catalogue lists one never emitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class SeriesSpec:
    """One catalogue entry. ``type`` is a Prometheus type; ``labels`` beyond the common per-GPU ones."""

    name: str
    type: str
    unit: str
    labels: tuple[str, ...]
    help: str


@lru_cache(maxsize=1)
def load_catalogue() -> dict[str, SeriesSpec]:
    """Every catalogue entry by series name (counters by their full ``_total`` name)."""
    text = (resources.files("watchdog.exporter") / "catalogue.yaml").read_text(encoding="utf-8")
    entries = yaml.safe_load(text) or []
    out: dict[str, SeriesSpec] = {}
    for entry in entries:
        spec = SeriesSpec(
            name=entry["name"],
            type=entry["type"],
            unit=entry.get("unit", ""),
            labels=tuple(entry.get("labels", [])),
            help=entry["help"],
        )
        if spec.name in out:
            raise ValueError(f"catalogue.yaml: duplicate entry {spec.name}")
        out[spec.name] = spec
    return out

"""The NVML collector as the agent stored it before its counters became a part of their own (for the tests
that compare against that)."""

from __future__ import annotations

from watchdog.collectors.base import Collector
from watchdog.collectors.nvml import COUNTERS_PART, NvmlCollector
from watchdog.model import Sample


class StoredEveryTick(Collector):
    """The NVML collector with its counters (and static series), as last read, in its own collection at
    every call: what the agent stored at every tick before they were stored only when read."""

    def __init__(self, inner: NvmlCollector) -> None:
        self.inner = inner
        self.name = inner.name
        self.timeout_seconds = inner.timeout_seconds
        self.counters: list[Sample] = []

    def collect(self) -> list[Sample]:
        out = self.inner.collect()
        self.counters = out.parts.get(COUNTERS_PART, self.counters)
        return out.samples + self.counters

"""Which stored series ``/metrics`` exports.

Contract (:meth:`ExportSelection.keep`, called per stored series with the source that stored it):

- Never a series named like the ones Prometheus synthesises for each of its scrape targets (``up``,
  ``scrape_duration_seconds``, ``scrape_samples_scraped`` ...). The agent stores them for the engines it
  scrapes, so rules read them as they would in Prometheus; exported, they would collide with Prometheus'
  own ``up`` of the same engine (``honor_labels: true`` keeps the engine's ``job``/``instance``). The
  engine collector stores ``watchdog_engine_up`` and ``watchdog_engine_scrape_*`` copies for export.
- A collected series that is not the agent's own (not ``watchdog_*``: today the engines' ``vllm:*``,
  ``sglang:*`` as scraped) only with ``exporter.pass_through_engine_series``; Prometheus normally
  scrapes the engines itself.
- Everything else: the agent's own series, recording-rule outputs (``engine:*``, ``gpu:*`` ...) and
  ``ALERTS``/``ALERTS_FOR_STATE``.
"""

from __future__ import annotations

from watchdog.model import Labels, metric_name
from watchdog.store import COLLECTOR_SOURCE_PREFIX

PROMETHEUS_SCRAPE_SERIES = frozenset({
    "up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
    "scrape_series_added", "scrape_timeout_seconds", "scrape_sample_limit", "scrape_body_size_bytes",
})
AGENT_PREFIX = "watchdog_"


class ExportSelection:
    """The export policy above; ``pass_through_engine_series`` may change between scrapes (reload)."""

    def __init__(self, pass_through_engine_series: bool = False) -> None:
        self.pass_through_engine_series = pass_through_engine_series

    def keep(self, labels: Labels, source: str) -> bool:
        """True when the series with ``labels``, stored by ``source``, is exported."""
        name = metric_name(labels)
        if name in PROMETHEUS_SCRAPE_SERIES:
            return False
        if source.startswith(COLLECTOR_SOURCE_PREFIX) and not name.startswith(AGENT_PREFIX):
            return self.pass_through_engine_series
        return True

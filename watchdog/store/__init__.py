"""Bounded in-memory time series: the one place rules, the exporter and `query` read from.

Contract:
- Each series holds (timestamp_ms, value) points in time order for at most ``retention_ms`` (trimmed by
  :meth:`Store.gc`) and at most ``max_points`` points: the newest in plain arrays, older ones in sealed
  chunks compressed without loss, so every query result stays exact.
- :meth:`Store.ingest` replaces everything one *source* (a collector instance, the rule engine) reports:
  a series the source reported last time but not now gets Prometheus' staleness marker, so an instant
  selector stops returning it at once instead of 5 minutes later.
- The number of series is capped (``max_series``); new series beyond the cap are dropped and counted
  in :attr:`Store.dropped_series_total`, never silently grown.
- No source can starve another (:class:`SeriesQuotas`): each source may hold at most
  ``per_source`` series, and sources outside the fault path (engines, the process collector, anything
  not in ``reserved_prefixes``) share ``max_series - reserved`` between them, so the kernel log, NVML,
  the host, rule outputs and self-metrics always find room. A collection that would take a source past
  its quota first evicts that source's series it no longer reports; if it still does not fit, nothing
  of it is stored, the source's previous series go stale, and :class:`SeriesQuotaExceeded` says why.
- Churn is bounded per metric (``SeriesQuotas.label_values``): a source outside the fault path may give
  one label of one metric at most that many distinct values among its series. New series that would
  exceed it are dropped, the rest of the collection is stored, and :class:`LabelValuesExceeded` (raised
  once the collection is stored) names the source, metric, label and limit. Checking costs nothing while
  a source's series stay the same: only new series are looked at.

Files: :mod:`~watchdog.store.codec` (sealed chunks), :mod:`~watchdog.store.series` (one series' points),
:mod:`~watchdog.store.quotas` (limits, their exceptions, label-value counts), :mod:`~watchdog.store.index`
(the :class:`Store`, selection by matchers).
"""

from watchdog.store.index import Matcher, Store, matches
from watchdog.store.quotas import (
    COLLECTOR_SOURCE_PREFIX,
    LabelValuesExceeded,
    SeriesQuotaExceeded,
    SeriesQuotas,
)
from watchdog.store.series import Series

__all__ = [
    "COLLECTOR_SOURCE_PREFIX",
    "LabelValuesExceeded",
    "Matcher",
    "Series",
    "SeriesQuotaExceeded",
    "SeriesQuotas",
    "Store",
    "matches",
]

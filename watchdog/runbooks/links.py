"""The ``runbook_url`` annotation (kube-prometheus convention) on every alert that names a runbook. Pure.

Contract: :func:`with_runbook_urls` returns the alerts with ``runbook_url`` set to
``<runbooks.url_base>/<runbook id>.md`` when a base is configured, else the ``file://`` URL of the
runbook's installed Markdown; an alert that already has ``runbook_url`` (set by its rule), names no
runbook, or whose runbook has no Markdown and no base is configured, is returned unchanged.
:func:`runbook_info_samples` exports the same mapping as ``watchdog_runbook_info`` for dashboards.
:class:`RunbookLinks` does both for one catalogue with each URL resolved once (the agent builds one per
catalogue: a reload's new catalogue gets a new one), so a tick does not resolve paths on the filesystem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from watchdog.model import Alert, Sample, metric
from watchdog.runbooks.catalogue import Catalogue


def runbook_url(runbook_id: str, catalogue: Catalogue, url_base: str) -> str:
    """The URL of runbook ``runbook_id`` ("" when there is none to point at)."""
    if url_base:
        return f"{url_base.rstrip('/')}/{runbook_id}.md"
    runbook = catalogue.get(runbook_id)
    if runbook is None or not runbook.markdown_path:
        return ""
    return Path(runbook.markdown_path).resolve().as_uri()


def _linked(alerts: Iterable[Alert], url_of: Callable[[str], str]) -> list[Alert]:
    out = []
    for alert in alerts:
        runbook_id = alert.annotations.get("runbook", "")
        url = url_of(runbook_id) if runbook_id and "runbook_url" not in alert.annotations else ""
        out.append(replace(alert, annotations={**alert.annotations, "runbook_url": url}) if url else alert)
    return out


def with_runbook_urls(alerts: Iterable[Alert], catalogue: Catalogue, url_base: str) -> list[Alert]:
    """``alerts`` with ``runbook_url`` added where possible (see the module docstring)."""
    return _linked(alerts, lambda runbook_id: runbook_url(runbook_id, catalogue, url_base))


def runbook_info_samples(catalogue: Catalogue, url_base: str) -> list[Sample]:
    """``watchdog_runbook_info{alertname, runbook, runbook_url} 1`` for every alert a runbook serves."""
    return [Sample(metric("watchdog_runbook_info", alertname=alertname, runbook=runbook_id,
                          runbook_url=runbook_url(runbook_id, catalogue, url_base)), 1.0)
            for alertname, runbook_id in sorted(catalogue.by_alert.items())]


class RunbookLinks:
    """:func:`with_runbook_urls` and :func:`runbook_info_samples` for one catalogue and URL base, each
    runbook's URL resolved once (the catalogue is not changed after it is built)."""

    def __init__(self, catalogue: Catalogue, url_base: str) -> None:
        self.catalogue = catalogue
        self.url_base = url_base
        self._urls: dict[str, str] = {}
        self.info_samples = runbook_info_samples(catalogue, url_base)

    def url(self, runbook_id: str) -> str:
        """:func:`runbook_url` of ``runbook_id``, remembered."""
        url = self._urls.get(runbook_id)
        if url is None:
            url = self._urls[runbook_id] = runbook_url(runbook_id, self.catalogue, self.url_base)
        return url

    def link(self, alerts: Iterable[Alert]) -> list[Alert]:
        """``alerts`` with ``runbook_url`` added where possible (see the module docstring)."""
        return _linked(alerts, self.url)

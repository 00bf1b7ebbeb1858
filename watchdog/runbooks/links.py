"""The ``runbook_url`` annotation (kube-prometheus convention) on every alert that names a runbook. Pure.

Contract: :func:`with_runbook_urls` returns the alerts with ``runbook_url`` set to
``<runbooks.url_base>/<runbook id>.md`` when a base is configured, else the ``file://`` URL of the
runbook's installed Markdown; an alert that already has ``runbook_url`` (set by its rule), names no
runbook, or whose runbook has no Markdown and no base is configured, is returned unchanged.
:func:`runbook_info_samples` exports the same mapping as ``watchdog_runbook_info`` for dashboards.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def with_runbook_urls(alerts: Iterable[Alert], catalogue: Catalogue, url_base: str) -> list[Alert]:
    """``alerts`` with ``runbook_url`` added where possible (see the module docstring)."""
    out = []
    for alert in alerts:
        runbook_id = alert.annotations.get("runbook", "")
        url = runbook_url(runbook_id, catalogue, url_base) if runbook_id and (
            "runbook_url" not in alert.annotations) else ""
        out.append(replace(alert, annotations={**alert.annotations, "runbook_url": url}) if url else alert)
    return out


def runbook_info_samples(catalogue: Catalogue, url_base: str) -> list[Sample]:
    """``watchdog_runbook_info{alertname, runbook, runbook_url} 1`` for every alert a runbook serves."""
    return [Sample(metric("watchdog_runbook_info", alertname=alertname, runbook=runbook_id,
                          runbook_url=runbook_url(runbook_id, catalogue, url_base)), 1.0)
            for alertname, runbook_id in sorted(catalogue.by_alert.items())]

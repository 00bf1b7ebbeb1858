"""The Alertmanager notifier: API v2 ``POST /api/v2/alerts`` to every configured Alertmanager.

Like Prometheus: a firing alert is sent with ``endsAt`` ahead of now (4 × max(resend interval, tick))
and re-sent every ``resend_interval_seconds`` while it fires, so an Alertmanager that lost it (restart)
gets it back and one that stops hearing from us resolves it by itself. A resolved alert is sent with
``endsAt`` = resolution time. Labels are the alert's labels plus ``node``. Every URL (the members of an
Alertmanager cluster) gets every alert; a row is done only when all URLs accepted it. Duplicates are
harmless: Alertmanager de-duplicates by label set, so no verification is needed.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from watchdog.config.settings import AlertmanagerSettings
from watchdog.infra.logs import redact
from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.delivery.base import Delivered, DeliveryError, PlanContext
from watchdog.notify.delivery.outbox import OutboxItem, OutboxRow

log = logging.getLogger("watchdog.notify.alertmanager")


def rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def generator_url(template: str, alert: Alert, node: str) -> str:
    """``template`` with ``{node}``, ``{alertname}``, ``{fingerprint}``, ``{expr}`` (URL-quoted) filled in."""
    return template.format(
        node=node,
        alertname=urllib.parse.quote(alert.name),
        fingerprint=alert.fingerprint,
        expr=urllib.parse.quote(alert.generator),
    )


def am_alert(payload: dict[str, Any], now_ms: int, ends_ahead_ms: int) -> dict[str, Any]:
    """The API v2 postable alert of one outbox payload; a firing one gets ``endsAt`` = now + ahead."""
    ends_at = int(payload["ends_at_ms"]) or now_ms + ends_ahead_ms
    out = {
        "labels": payload["labels"],
        "annotations": payload["annotations"],
        "startsAt": rfc3339(int(payload["starts_at_ms"])),
        "endsAt": rfc3339(ends_at),
    }
    if payload.get("generatorURL"):
        out["generatorURL"] = payload["generatorURL"]
    return out


class AlertmanagerNotifier:
    """Posts alerts to every URL; re-sends the firing set periodically (``firing_source``)."""

    name = "alertmanager"
    batch_size = 200

    def __init__(
        self,
        settings: AlertmanagerSettings,
        node: str,
        *,
        tick_seconds: float = 1.0,
        default_generator_url: str = "",
        firing_source: Callable[[], list[Alert]] = list,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.urls = [u.rstrip("/") for u in settings.urls]
        self.node = node
        self.timeout = settings.timeout_seconds
        self.resend_ms = int(settings.resend_interval_seconds * 1000)
        self.ends_ahead_ms = 4 * max(self.resend_ms, int(tick_seconds * 1000))
        self.generator_template = settings.generator_url or default_generator_url
        self.firing_source = firing_source
        self.clock = clock
        self._last_resend_ms = 0

    def _payload(self, alert: Alert, kind: AlertState) -> dict[str, Any]:
        labels = {k: v for k, v in alert.labels.items() if v}
        labels.setdefault("alertname", alert.name)
        labels.setdefault("node", self.node)
        payload: dict[str, Any] = {
            "labels": labels,
            "annotations": {k: v for k, v in alert.annotations.items() if v},
            "starts_at_ms": alert.fired_at_ms,
            "ends_at_ms": 0 if kind is AlertState.FIRING else max(alert.resolved_at_ms, alert.fired_at_ms),
            "fingerprint": alert.fingerprint,
        }
        if self.generator_template:
            payload["generatorURL"] = generator_url(self.generator_template, alert, self.node)
        return payload

    def plan(
        self, groups: list[GroupNotification], events: list[EventNotification], ctx: PlanContext
    ) -> list[OutboxItem]:
        """One row per alert transition (Alertmanager groups by itself); runbook events are not sent."""
        return [
            OutboxItem(
                f"{group.kind.value}:{m.fingerprint}:{m.fired_at_ms}", group.kind.value, self._payload(m, group.kind)
            )
            for group in groups
            for m in group.members
        ]

    def verify(self, row: OutboxRow) -> Delivered | None:
        """Alertmanager de-duplicates: resending is harmless."""
        return None

    def _post(self, url: str, alerts: list[dict[str, Any]]) -> None:
        body = json.dumps(alerts).encode()
        request = urllib.request.Request(
            f"{url}/api/v2/alerts", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace")
            text = redact(f"alertmanager {_host(url)}: HTTP {exc.code} {detail}")
            raise DeliveryError(
                text,
                permanent=exc.code == 400,
                retry_after_seconds=float(exc.headers.get("Retry-After") or 0) if exc.code == 429 else 0.0,
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise DeliveryError(
                redact(f"alertmanager {_host(url)}: {type(reason).__name__}: {reason}")
            ) from None

    def deliver(self, rows: list[OutboxRow]) -> list[Delivered]:
        """Send the batch to each URL that has not accepted it yet (latest row per alert wins)."""
        if not self.urls:
            return [Delivered(row.id, "no urls") for row in rows]
        now_ms = int(self.clock() * 1000)
        latest: dict[str, OutboxRow] = {}
        for row in rows:
            latest[str(row.payload.get("fingerprint"))] = row
        accepted = {
            row.id: set(json.loads(row.result)) if row.result.startswith("[") else set() for row in rows
        }
        errors: list[DeliveryError] = []
        for url in self.urls:
            pending = [r for r in latest.values() if url not in accepted[r.id]]
            if not pending:
                continue
            try:
                self._post(url, [am_alert(r.payload, now_ms, self.ends_ahead_ms) for r in pending])
            except DeliveryError as exc:
                errors.append(exc)
                continue
            for row in rows:
                accepted[row.id].add(url)
        if errors:
            partial = {row_id: json.dumps(sorted(urls)) for row_id, urls in accepted.items()}
            raise DeliveryError(
                "; ".join(str(e) for e in errors),
                permanent=all(e.permanent for e in errors) and not any(accepted.values()),
                retry_after_seconds=max(e.retry_after_seconds for e in errors),
                results=partial,
            )
        return [Delivered(row.id, json.dumps(sorted(accepted[row.id]))) for row in rows]

    def periodic(self, now_ms: int) -> int | None:
        """Every resend interval, re-send every firing alert with a fresh ``endsAt`` (best effort);
        returns when the next re-send is due (None without URLs)."""
        if not self.urls:
            return None
        if now_ms - self._last_resend_ms < self.resend_ms:
            return self._last_resend_ms + self.resend_ms
        self._last_resend_ms = now_ms
        firing = self.firing_source()
        if not firing:
            return now_ms + self.resend_ms
        alerts = [am_alert(self._payload(a, AlertState.FIRING), now_ms, self.ends_ahead_ms) for a in firing]
        for url in self.urls:
            try:
                self._post(url, alerts)
            except DeliveryError as exc:
                log.debug("alertmanager re-send failed", extra={"error": str(exc)})
        return now_ms + self.resend_ms

    def close(self) -> None:
        """Nothing to release."""


def _host(url: str) -> str:
    """The host:port of a URL, never its credentials or path."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.hostname or '?'}:{parsed.port or ''}".rstrip(":")

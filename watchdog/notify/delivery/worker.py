"""A delivery thread per notifier: drains its outbox rows in order, with exponential backoff.

At-least-once: a row leaves the open set only when the notifier confirmed delivery (or rejected the
payload for good). Shown-once: a row whose earlier attempt may have gone through (status ``sending``)
is first *verified* by the notifier; only a row not found at the destination is sent again. Failures
are isolated here, once, and become self-metrics (:class:`NotifierStats`) and rate-limited log lines.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass

from watchdog.infra.logs import redact
from watchdog.infra.workers import DaemonPool
from watchdog.notify.delivery.base import DeliveryError, Notifier
from watchdog.notify.delivery.outbox import Outbox, OutboxRow

log = logging.getLogger("watchdog.notify")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter in [delay/2, delay] and a ceiling (seconds)."""

    initial_seconds: float = 1.0
    max_seconds: float = 300.0

    def delay(self, failures: int, retry_after_seconds: float = 0.0, rand: float = 1.0) -> float:
        """Seconds to wait after ``failures`` consecutive failures; never less than ``Retry-After``."""
        base = min(self.max_seconds, self.initial_seconds * (2 ** max(0, failures - 1)))
        return max(base * (0.5 + 0.5 * rand), retry_after_seconds)


class NotifierStats:
    """Counters and health of one notifier, shared between its thread and the self-metrics reader."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: dict[str, int] = {"delivered": 0, "failed": 0}
        self.successes = 0
        self.attempt_failures = 0
        self.consecutive_failures = 0
        self.failing_since_ms = 0
        self.last_error = ""

    def record_outcome(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` notifications that reached a final outcome (``delivered`` or ``failed``)."""
        with self._lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n

    def record_success(self) -> None:
        """An attempt succeeded: the notifier is up."""
        with self._lock:
            self.successes += 1
            self.consecutive_failures = 0
            self.failing_since_ms = 0

    def record_failure(self, now_ms: int, error: str) -> int:
        """An attempt failed; returns the consecutive failure count."""
        with self._lock:
            self.attempt_failures += 1
            self.consecutive_failures += 1
            if not self.failing_since_ms:
                self.failing_since_ms = now_ms
            self.last_error = error
            return self.consecutive_failures

    def snapshot(self) -> tuple[dict[str, int], int, int]:
        """(outcome counts, consecutive failures, failing since ms)."""
        with self._lock:
            return dict(self.outcomes), self.consecutive_failures, self.failing_since_ms


class DeliveryWorker:
    """Runs one notifier's delivery loop in a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        notifier: Notifier,
        outbox: Outbox,
        backoff: Backoff,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = 1.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.notifier = notifier
        self.outbox = outbox
        self.backoff = backoff
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.rand = rand
        self.stats = NotifierStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain_deadline: float | None = None  # monotonic; set by stop(): drain until then
        self._retry_at = 0.0  # monotonic time before which no attempt is made
        self._idle = False  # the last look at the outbox found nothing open for this notifier
        self._recheck_at = 0.0  # monotonic time of the next look while idle and not woken (safety net)
        # a delivery may hang in a channel's I/O: the loop runs where such calls run (a daemon thread)
        self._daemon = DaemonPool(1, f"notify-{notifier.name}", idle_seconds=0.0)
        self._loop: Future[None] | None = None

    def start(self) -> None:
        """Start the thread."""
        self._loop = self._daemon.submit(self._run)

    def wake(self) -> None:
        """New rows are there: look now (unless backing off). Call it after the rows are committed."""
        self._wake.set()

    def reconfigure(self, notifier: Notifier, backoff: Backoff, poll_seconds: float) -> None:
        """Reload: deliver through ``notifier`` with new settings from the next pass on (woken now, so
        that a new poll interval or the new notifier's periodic work takes effect at once)."""
        self.notifier, self.backoff, self.poll_seconds = notifier, backoff, poll_seconds
        self._wake.set()

    def request_stop(self, timeout_seconds: float) -> None:
        """Deliver what can be delivered within ``timeout_seconds``, then end the thread."""
        self._drain_deadline = time.monotonic() + max(0.0, timeout_seconds)
        self._stop.set()
        self._wake.set()

    def join(self, timeout_seconds: float) -> bool:
        """Wait for the thread to end; True if it did (or never started)."""
        if self._loop is None:
            return True
        return bool(wait([self._loop], timeout=max(0.0, timeout_seconds)).done)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _run(self) -> None:
        """The thread's boundary: an unexpected error is logged and backed off, never fatal."""
        while True:
            try:
                if self._loop_once():
                    return
            except Exception as exc:
                if self._stop.is_set() and isinstance(exc, sqlite3.ProgrammingError):
                    return  # the database was closed under a thread that overran close()
                failures = self.stats.record_failure(self._now_ms(), "internal error")
                log.exception("notifier delivery loop error", extra={"notifier": self.notifier.name})
                self._retry_at = time.monotonic() + self.backoff.delay(failures, 0.0, self.rand())

    def _loop_once(self) -> bool:
        """One pass: periodic work, then one attempt or a wait; True when the thread should end.

        The outbox is queried only when something may be due: after :meth:`wake` (the dispatcher queued
        rows, or a stop or reload), after an attempt (more rows may follow), when a backoff ended, and
        while idle at most every ``poll_seconds`` (a safety net: rows are only queued by this process's
        dispatcher, which wakes every thread after committing them). An idle thread otherwise sleeps
        until it is woken or its notifier's next periodic work is due.
        """
        if self._stop.is_set():
            deadline = self._drain_deadline or 0.0
            if time.monotonic() >= deadline or self._retry_at > deadline:
                return True
        next_periodic_ms = self._periodic()
        now = time.monotonic()
        if self._retry_at > now:
            self._wake.clear()  # rows are looked for when the backoff ends anyway: a wake() must not spin
            self._idle = False
            self._wait(self._retry_at - now, next_periodic_ms)
            return False
        if self._idle and now < self._recheck_at and not self._wake.is_set() and not self._stop.is_set():
            self._wait(self._recheck_at - now, next_periodic_ms)  # a wake() from here on ends it
            return False
        self._wake.clear()  # before the query: a wake() after it is kept for the next pass
        self._idle = False
        rows = self.outbox.due(self.notifier.name, self.notifier.batch_size)
        if not rows:
            if self._stop.is_set():
                return True
            self._idle, self._recheck_at = True, time.monotonic() + self.poll_seconds
            self._wait(self.poll_seconds, next_periodic_ms)
            return False
        self.attempt(rows)
        return False

    def _periodic(self) -> int | None:
        """The notifier's periodic work; returns when it is next due (clock ms), None when never."""
        try:
            return self.notifier.periodic(self._now_ms())
        except DeliveryError as exc:
            log.debug("periodic work failed", extra={"notifier": self.notifier.name, "error": str(exc)})
            return None

    def _wait(self, seconds: float, next_periodic_ms: int | None) -> None:
        """Sleep up to ``seconds`` (never past the periodic work, the drain deadline or ``poll_seconds``:
        the injected clock may run apart from the monotonic one) or until woken."""
        if next_periodic_ms is not None:
            seconds = min(seconds, (next_periodic_ms - self._now_ms()) / 1000)
        if self._stop.is_set():
            seconds = min(seconds, (self._drain_deadline or 0.0) - time.monotonic())
        self._wake.wait(timeout=max(0.0, min(seconds, self.poll_seconds)))

    def attempt(self, rows: list[OutboxRow]) -> bool:
        """One delivery attempt for ``rows`` (verify uncertain ones first); True on success."""
        name = self.notifier.name
        now_ms = self._now_ms()
        try:
            to_send: list[OutboxRow] = []
            for row in rows:
                found = self.notifier.verify(row) if row.uncertain else None
                if found is not None:
                    self._complete(found.row_id, found.result, found.on_commit, now_ms)
                    log.info(
                        "notification found already delivered",
                        extra={"notifier": name, "idem_key": row.idem_key},
                    )
                else:
                    to_send.append(row)
            if to_send:
                self.outbox.mark_sending([r.id for r in to_send], now_ms)
                for done in self.notifier.deliver(to_send):
                    self._complete(done.row_id, done.result, done.on_commit, self._now_ms())
        except DeliveryError as exc:
            self._failed(rows, exc)
            return False
        self.stats.record_success()
        self._retry_at = 0.0
        return True

    def _complete(self, row_id: int, result: str, on_commit: object, now_ms: int) -> None:
        with self.outbox.db.transaction() as cur:
            self.outbox.mark_done(row_id, now_ms, result, cur)
            if callable(on_commit):
                on_commit(cur)
        self.stats.record_outcome("delivered")

    def _failed(self, rows: list[OutboxRow], exc: DeliveryError) -> None:
        name = self.notifier.name
        now_ms = self._now_ms()
        error = redact(str(exc))
        open_rows = {r.id: r for r in self.outbox.due(name, max(len(rows), 1) + 50)}
        if exc.permanent:
            for row in rows:
                if row.id in open_rows:
                    self.outbox.mark_failed(row.id, now_ms, error)
                    self.stats.record_outcome("failed")
            log.error(
                "notification rejected, not retried",
                extra={"notifier": name, "idem_keys": [r.idem_key for r in rows], "error": error},
            )
            return
        for row in rows:
            if row.id in open_rows:
                self.outbox.mark_retry(row.id, now_ms, error, exc.uncertain, exc.results.get(row.id))
        failures = self.stats.record_failure(now_ms, error)
        delay = self.backoff.delay(failures, exc.retry_after_seconds, self.rand())
        self._retry_at = time.monotonic() + delay
        if failures == 1 or failures % 10 == 0:
            log.warning(
                "notification delivery failed, will retry",
                extra={
                    "notifier": name,
                    "failures": failures,
                    "retry_in_seconds": round(delay, 1),
                    "uncertain": exc.uncertain,
                    "error": error,
                },
            )

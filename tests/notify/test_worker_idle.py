"""An idle delivery thread sleeps: it looks at its (real SQLite) outbox when woken, when a retry is due
and at most every ``poll_seconds``; it still delivers every row, re-sends to Alertmanager on time and
drains on stop."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from tests.loopback import serving
from tests.notify.alerts import xid_storm
from tests.support.polling import wait_until
from tests.support.settings import settings_of
from watchdog.config.loader import load_config_text
from watchdog.config.settings import AlertmanagerSettings
from watchdog.infra.state import StateDB
from watchdog.notify.channels.alertmanager import AlertmanagerNotifier
from watchdog.notify.channels.log import LogNotifier
from watchdog.notify.delivery.base import Delivered, DeliveryError
from watchdog.notify.delivery.outbox import Outbox, OutboxItem, OutboxRow
from watchdog.notify.delivery.worker import Backoff, DeliveryWorker
from watchdog.notify.dispatcher import dispatcher_for

SAFETY_NET = 30.0  # poll_seconds of these workers: longer than any test, so only wakes and due times count


class CountingOutbox(Outbox):
    """The real outbox, counting the worker's queries for due rows."""

    def __init__(self, db: StateDB) -> None:
        super().__init__(db)
        self.queries = 0

    def due(self, notifier: str, limit: int = 1) -> list[OutboxRow]:
        self.queries += 1
        return super().due(notifier, limit)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    state = StateDB.in_dir(tmp_path / "state")
    yield state
    state.close()


def _queue(outbox: Outbox, key: str, notifier: str = "log") -> None:
    with outbox.db.transaction() as cur:
        Outbox.enqueue(cur, notifier, OutboxItem(key, "line", {"event": "test", "text": key}), int(time.time() * 1000))


def _open(outbox: Outbox, notifier: str = "log") -> int:
    return outbox.pending_counts().get(notifier, 0)


class Flaky(LogNotifier):
    """The log notifier, failing its first ``failures`` attempts; counts periodic calls."""

    def __init__(self, failures: int) -> None:
        super().__init__(io.StringIO(), "json")
        self.failures = failures
        self.periodic_calls = 0

    def deliver(self, rows: list[OutboxRow]) -> list[Delivered]:
        if self.failures:
            self.failures -= 1
            raise DeliveryError("destination down")
        return super().deliver(rows)

    def periodic(self, now_ms: int) -> int | None:
        self.periodic_calls += 1
        return None


@contextmanager
def running(notifier: LogNotifier | AlertmanagerNotifier, outbox: Outbox,
            backoff: float = 1.0) -> Iterator[DeliveryWorker]:
    """A started worker (safety net ``SAFETY_NET``, no jitter), stopped and joined on exit."""
    worker = DeliveryWorker(notifier, outbox, Backoff(backoff, backoff), poll_seconds=SAFETY_NET,
                            rand=lambda: 1.0)
    worker.start()
    try:
        yield worker
    finally:
        worker.request_stop(1.0)
        assert worker.join(2.0)


def test_an_idle_agents_notifiers_do_not_query_their_outbox(tmp_path: Path) -> None:
    """Default outbox settings: after its first look an idle thread makes no query until woken."""
    config = load_config_text(yaml.safe_dump({"node": "n1", "notifiers": {"log": {"enabled": True}}}))
    db = StateDB.in_dir(tmp_path / "state")
    dispatcher = dispatcher_for(settings_of(config), db, "n1", stream=io.StringIO(), start_threads=False)
    counting = CountingOutbox(db)
    worker = dispatcher.workers["log"]
    worker.outbox = counting
    try:
        worker.start()
        wait_until(lambda: counting.queries >= 1, what="the first look at the outbox")
        time.sleep(1.5)
        assert counting.queries == 1
        now = int(time.time() * 1000)
        dispatcher.handle(xid_storm(fired_at_ms=now - 1000), [], now)  # queues and wakes
        wait_until(lambda: _open(counting) == 0 and counting.queries >= 3, timeout=2, what="delivered at once")
    finally:
        dispatcher.close(1.0)
        db.close()


def test_a_row_queued_later_is_delivered_at_once_when_woken(db: StateDB) -> None:
    outbox = CountingOutbox(db)
    stream = io.StringIO()
    with running(LogNotifier(stream, "json"), outbox) as worker:
        wait_until(lambda: outbox.queries == 1, what="the first look")
        _queue(outbox, "late")
        worker.wake()
        wait_until(lambda: _open(outbox) == 0, timeout=1, what="the row delivered without a poll")
        assert '"late"' in stream.getvalue()


def test_a_row_in_backoff_is_retried_when_its_time_comes_without_a_wake(db: StateDB) -> None:
    outbox = CountingOutbox(db)
    notifier = Flaky(failures=1)
    _queue(outbox, "retry-me")
    started = time.monotonic()
    with running(notifier, outbox, backoff=0.3) as worker:
        wait_until(lambda: _open(outbox) == 0, timeout=3, what="the retry after the backoff")
        assert 0.3 <= time.monotonic() - started < 2.0
        assert worker.stats.snapshot()[0]["delivered"] == 1 and worker.stats.attempt_failures == 1


def test_wakes_during_a_backoff_do_not_make_the_thread_spin(db: StateDB) -> None:
    outbox = CountingOutbox(db)
    notifier = Flaky(failures=1)
    _queue(outbox, "first")
    with running(notifier, outbox, backoff=1.0) as worker:
        wait_until(lambda: worker.stats.attempt_failures == 1, what="the failed attempt")
        calls = notifier.periodic_calls
        for i in range(20):  # the dispatcher queueing rows every tick of an outage
            _queue(outbox, f"more-{i}")
            worker.wake()
            time.sleep(0.02)
        assert notifier.periodic_calls - calls <= 20 + 3  # a pass of the loop per wake, not a spin
        wait_until(lambda: _open(outbox) == 0, timeout=3, what="all rows after the backoff")


def test_stop_drains_rows_queued_while_idle(db: StateDB) -> None:
    outbox = CountingOutbox(db)
    with running(LogNotifier(io.StringIO(), "json"), outbox) as worker:
        wait_until(lambda: outbox.queries == 1, what="the first look")
        for i in range(3):
            _queue(outbox, f"last-{i}")  # no wake: the stop is what makes it look
        started = time.monotonic()
        worker.request_stop(2.0)
        assert worker.join(3.0)
        assert time.monotonic() - started < 2.0 and _open(outbox) == 0


def test_reload_applies_a_new_poll_interval_at_once(db: StateDB) -> None:
    outbox = CountingOutbox(db)
    notifier = LogNotifier(io.StringIO(), "json")
    with running(notifier, outbox) as worker:
        wait_until(lambda: outbox.queries == 1, what="the first look")
        worker.reconfigure(notifier, worker.backoff, 0.1)
        wait_until(lambda: outbox.queries >= 4, timeout=2, what="looks every 0.1 s")


def _alerts_sink(posts: list[float]) -> type[BaseHTTPRequestHandler]:
    """An Alertmanager stand-in that records when each POST arrived."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            posts.append(time.monotonic())
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Sink


def test_alertmanager_resends_on_time_while_the_outbox_stays_idle(db: StateDB) -> None:
    """The idle thread wakes for the re-send (every 0.3 s here), not for the 30 s safety net."""
    posts: list[float] = []
    outbox = CountingOutbox(db)
    firing = xid_storm(gpus=1, fired_at_ms=int(time.time() * 1000))
    with serving(_alerts_sink(posts)) as url:
        settings = AlertmanagerSettings(enabled=True, urls=(url,), resend_interval_seconds=0.3, timeout_seconds=2,
                                        generator_url="", silences_refresh_seconds=60)
        notifier = AlertmanagerNotifier(settings, "n1", firing_source=lambda: list(firing))
        with running(notifier, outbox):
            wait_until(lambda: len(posts) >= 4, timeout=5, what="four re-sends")
            gaps = [b - a for a, b in pairwise(posts)]
            assert all(0.25 <= gap < 1.5 for gap in gaps[:3]), gaps  # not the 30 s safety net
            assert outbox.queries == 1

"""The shared deadline thread behind every HTTP exchange's cut-off (watchdog.infra.httpdeadline)."""

from __future__ import annotations

import http.client
import threading
import time

from watchdog.infra.httpdeadline import Cutoff, _Deadlines


def test_callbacks_run_in_deadline_order_and_cancelled_ones_never() -> None:
    deadlines = _Deadlines()
    ran: list[str] = []
    done = threading.Event()
    deadlines.schedule(0.3, lambda: (ran.append("late"), done.set()))
    deadlines.schedule(0.05, lambda: ran.append("early"))  # sooner than the one the thread waits for
    deadlines.cancel(deadlines.schedule(0.1, lambda: ran.append("cancelled")))
    assert done.wait(5)
    time.sleep(0.05)
    assert ran == ["early", "late"]


def test_a_failing_callback_does_not_end_the_shared_thread() -> None:
    deadlines = _Deadlines()
    done = threading.Event()
    deadlines.schedule(0.01, lambda: 1 / 0)  # type: ignore[func-returns-value]
    deadlines.schedule(0.05, done.set)
    assert done.wait(5)


def test_cutoffs_share_one_thread_and_expire_only_when_their_deadline_passes() -> None:
    before = set(threading.enumerate())
    started: set[threading.Thread] = set()
    for _ in range(50):
        with Cutoff(http.client.HTTPConnection("127.0.0.1", 9), 30.0) as cutoff:
            started.update(set(threading.enumerate()) - before)
        assert not cutoff.expired
    assert len(started) <= 1  # not a thread per exchange
    with Cutoff(http.client.HTTPConnection("127.0.0.1", 9), 0.05) as cutoff:
        time.sleep(0.3)
        assert cutoff.expired

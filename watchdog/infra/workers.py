"""The one way to run a call that may never return (a driver wedged on a sick GPU, a server that
accepts and never answers): on a :class:`DaemonPool`.

Contract:

- ``submit(fn, *args)`` returns a ``concurrent.futures.Future`` with ``fn``'s result or exception; at most
  ``max_workers`` calls run at once, the rest wait in submission order.
- Threads are daemons that nobody joins: a hung call cannot keep the process from exiting
  (``ThreadPoolExecutor`` joins its workers at exit, so one hung call would block SIGTERM forever).
- A thread starts with work and ends after ``idle_seconds`` without any (or at :meth:`shutdown`), so a
  steady caller reuses its threads and a forgotten pool leaves none behind.
- Isolation is by pool: a caller that must not wait behind a hung call gives that subject its own pool
  of one (one per collector, one per GPU) and submits again only once the previous future is done, so a
  hang holds one thread and nothing else, and threads never pile up behind it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonPool:
    """Daemon threads for calls that may hang; see the module docstring."""

    def __init__(self, max_workers: int, name: str, idle_seconds: float = 60.0) -> None:
        """Threads are named ``name``; each ends after ``idle_seconds`` without a call."""
        self.max_workers = max(1, max_workers)
        self.name = name
        self.idle_seconds = idle_seconds
        self._work = threading.Condition()
        self._queue: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on one of the pool's threads; a pool shut down returns a cancelled future."""
        future: Future[T] = Future()
        with self._work:
            if self._closed:
                future.cancel()
                return future
            self._queue.append((future, fn, args))
            if len(self._queue) > self._idle and self._threads < self.max_workers:
                self._threads += 1
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
            else:
                self._work.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._work:
                if not self._queue and not self._closed:
                    self._idle += 1
                    self._work.wait_for(lambda: self._queue or self._closed, self.idle_seconds)
                    self._idle -= 1
                if not self._queue:
                    self._threads -= 1
                    self._work.notify_all()  # a shutdown(wait=True) counts the threads left
                    return
                future, fn, args = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever holds the future
                future.set_exception(exc)

    def shutdown(self, wait: bool = False, cancel_futures: bool = True, timeout_s: float = 30.0) -> None:
        """Refuse new calls, cancel queued ones (``cancel_futures``; else they still run), end idle threads,
        and with ``wait`` wait up to ``timeout_s`` for the running calls (never for ever)."""
        with self._work:
            self._closed = True
            queued = list(self._queue) if cancel_futures else []
            if cancel_futures:
                self._queue.clear()
            self._work.notify_all()
        for future, _fn, _args in queued:
            future.cancel()
        if wait:
            with self._work:
                self._work.wait_for(lambda: self._threads == 0, timeout_s)

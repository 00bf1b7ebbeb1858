"""A bounded pool of daemon worker threads: at most ``max_workers`` calls at once, the rest wait in
submission order; threads are daemons, so a call that never returns cannot keep the process from
exiting (``concurrent.futures.ThreadPoolExecutor`` joins its workers at exit, so one hung call blocks
SIGTERM forever)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonPool:
    """``submit(fn, *args) -> Future``; see the module docstring."""

    def __init__(self, max_workers: int, name: str) -> None:
        self.max_workers = max(1, max_workers)
        self.name = name
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._running = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` when a worker is free; a closed pool returns a cancelled future."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                future.cancel()
                return future
            self._queue.append((future, fn, args))
            if self._running < self.max_workers:
                self._running += 1
                threading.Thread(target=self._work, name=f"{self.name}-worker", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running -= 1
                    return
                future, fn, args = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever holds the future
                future.set_exception(exc)

    def shutdown(self, wait: bool = False, cancel_futures: bool = True, timeout_s: float = 30.0) -> None:
        """Refuse new calls, cancel queued ones (``cancel_futures``), and with ``wait`` wait up to
        ``timeout_s`` for the running ones (never forever)."""
        with self._lock:
            self._closed = True
            queued = list(self._queue) if cancel_futures else []
            if cancel_futures:
                self._queue.clear()
        for future, _fn, _args in queued:
            future.cancel()
        if wait:
            deadline = threading.Event()
            for _ in range(int(timeout_s * 20)):
                with self._lock:
                    if self._running == 0:
                        return
                deadline.wait(0.05)

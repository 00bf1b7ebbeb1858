"""One HTTP exchange under one deadline: connect, TLS, status line, headers and body together.

Socket timeouts bound each read, not the exchange: a peer that drips a byte every half second keeps
every read short and the exchange endless. :class:`Cutoff` shuts the connection's socket when the
deadline passes, which wakes whatever read is blocked (it sees end of file), and remembers that it did
so callers can report a timeout rather than a truncated answer. Used by engine scrapes and runbook
``http`` steps; :func:`schedule` and :func:`cancel` lend the same one deadline thread to servers (the
exporter's request deadline).
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit


class UnsupportedURL(ValueError):
    """A URL that is not ``http://`` or ``https://`` with a host."""


def connection(url: str, timeout_seconds: float) -> tuple[http.client.HTTPConnection, str]:
    """An unopened connection for ``url`` (socket timeouts of ``timeout_seconds``) and the request path.

    No proxies, no redirects: the caller talks to exactly the host it was configured with.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsupportedURL(f"unsupported URL scheme or host: {parts.scheme}://{parts.hostname or ''}")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_seconds,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_seconds)
    return conn, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class _Deadlines:
    """One daemon thread that runs each scheduled callback once its deadline passes, unless cancelled
    first: every :class:`Cutoff` of the process shares it (a thread per exchange, as ``threading.Timer``
    starts, costs a thread start and leaves reference cycles behind at every scrape)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, list[Callable[[], None] | None]]] = []
        self._wake = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, seconds: float, callback: Callable[[], None]) -> list[Callable[[], None] | None]:
        """Run ``callback`` (on the shared thread) ``seconds`` from now; returns the handle to cancel."""
        handle: list[Callable[[], None] | None] = [callback]
        with self._wake:
            heapq.heappush(self._due, (time.monotonic() + seconds, next(self._seq), handle))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            elif self._due[0][2] is handle:
                self._wake.notify()
        return handle

    def cancel(self, handle: list[Callable[[], None] | None]) -> None:
        """Forget ``handle``'s callback (a no-op once it ran); its entry goes when its deadline comes."""
        with self._wake:
            handle[0] = None

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    now = time.monotonic()
                    while self._due and self._due[0][2][0] is None:
                        heapq.heappop(self._due)  # cancelled: dropped as soon as it is first in line
                    if self._due and self._due[0][0] <= now:
                        handle = heapq.heappop(self._due)[2]
                        callback, handle[0] = handle[0], None
                        break
                    self._wake.wait(self._due[0][0] - now if self._due else None)
            if callback is not None:
                with contextlib.suppress(Exception):  # a callback's failure must not end the shared thread
                    callback()


_DEADLINES = _Deadlines()

DeadlineHandle = list[Callable[[], None] | None]
"""What :func:`schedule` returns, for :func:`cancel`."""


def schedule(seconds: float, callback: Callable[[], None]) -> DeadlineHandle:
    """Run ``callback`` ``seconds`` from now on the process's one shared deadline thread, unless
    :func:`cancel` comes first. The callback must be short and must not block (it runs on the thread
    every other deadline shares); its exceptions are swallowed."""
    return _DEADLINES.schedule(seconds, callback)


def cancel(handle: DeadlineHandle) -> None:
    """Forget a :func:`schedule`'d callback (a no-op once it ran)."""
    _DEADLINES.cancel(handle)


class Cutoff:
    """``with Cutoff(conn, seconds) as cutoff:`` shuts ``conn``'s socket at the deadline; see module doc."""

    def __init__(self, conn: http.client.HTTPConnection, timeout_seconds: float) -> None:
        self.conn = conn
        self.timeout_seconds = timeout_seconds
        self._expired = threading.Event()
        self._handle: DeadlineHandle | None = None

    @property
    def expired(self) -> bool:
        """True once the deadline passed (whatever the read in progress then reported)."""
        return self._expired.is_set()

    def _shut(self) -> None:
        self._expired.set()
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing left to wake
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Cutoff:
        self._handle = schedule(self.timeout_seconds, self._shut)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            cancel(self._handle)
            self._handle = None
        self.conn.close()

"""One HTTP exchange under one deadline: connect, TLS, status line, headers and body together.

Socket timeouts bound each read, not the exchange: a peer that drips a byte every half second keeps
every read short and the exchange endless. :class:`Cutoff` shuts the connection's socket when the
deadline passes, which wakes whatever read is blocked (it sees end of file), and remembers that it did
so callers can report a timeout rather than a truncated answer. Used by engine scrapes and runbook
``http`` steps.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
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


class Cutoff:
    """``with Cutoff(conn, seconds) as cutoff:`` shuts ``conn``'s socket at the deadline; see module doc."""

    def __init__(self, conn: http.client.HTTPConnection, timeout_seconds: float) -> None:
        self.conn = conn
        self._expired = threading.Event()
        self._timer = threading.Timer(timeout_seconds, self._shut)
        self._timer.daemon = True

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
        self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._timer.cancel()
        self.conn.close()

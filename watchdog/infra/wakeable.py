"""A socketserver that sleeps in ``select`` until a connection arrives or it is told to stop.

Contract: mix :class:`WakeableServer` in before a ``socketserver`` server class. :meth:`serve_until_stopped`
accepts connections until :meth:`stop_serving` is called from any other thread, which wakes it at once
through a socket pair; unlike ``serve_forever`` it never polls, so an idle server costs no CPU.
:meth:`server_close` also closes the socket pair. The pair is made before the base class binds, because a
failed bind calls ``server_close``.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading
from typing import Any


class WakeableServer(socketserver.BaseServer):
    """The accept loop shared by the exporter and the HAProxy agent-check port."""

    def __init__(self, address: Any, handler: Any) -> None:
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        super().__init__(address, handler)

    def serve_until_stopped(self) -> None:
        """Accept connections until :meth:`stop_serving`."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)  # type: ignore[arg-type]  # a server has fileno()
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self and not self._stopping.is_set():
                        self._handle_request_noblock()  # type: ignore[attr-defined]  # serve_forever's step

    def stop_serving(self) -> None:
        """Make :meth:`serve_until_stopped` return promptly (from any other thread)."""
        self._stopping.set()
        with contextlib.suppress(OSError):  # already closed
            self._wake_w.send(b"x")

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()


def serve_in_thread(server: WakeableServer, name: str) -> threading.Thread:
    """Run ``server``'s accept loop in a daemon thread named ``name``; returns the started thread."""
    thread = threading.Thread(target=server.serve_until_stopped, name=name, daemon=True)
    thread.start()
    return thread


def stop_and_close(server: WakeableServer, thread: threading.Thread | None) -> None:
    """Stop ``server``'s accept loop at once, wait for ``thread`` to end, and close the socket; requests in
    progress finish in their own threads."""
    server.stop_serving()
    if thread is not None:
        thread.join()
    server.server_close()

"""HAProxy's agent-check protocol: HAProxy connects, sends the engine's job (``agent-send "JOB\\n"``), and
reads one line that sets the server's state and weight; then the connection closes.

Reply grammar (HAProxy 2.6 ``agent-check``): words separated by spaces, ``up``/``down`` the operating state,
``ready``/``drain`` the administrative state, ``NN%`` the weight relative to the configured one, then
``#`` and a free description (what the stats page and the logs show). Words not sent leave HAProxy's
state as it is, and only the agent can undo what the agent set, so every reply here names the whole
state it wants (:func:`agent_reply`), whatever was said before:

==============  ============================  =============================================================
verdict         reply                         why
==============  ============================  =============================================================
``admit``       ``up ready W%``               W = the verdict's weight (100, or less for a degraded engine)
``short-only``  ``up ready W%``               W = the verdict's weight (``serving.short_only_weight_percent``,
                                              50 by default): HAProxy cannot route by prompt length, so a
                                              thin KV margin gets a smaller share of new requests instead
``shed``        ``up drain``                  no new requests (HAProxy's queue or other servers take
                                              them); in-flight ones finish; ``ready`` undoes it
``drain``       ``up drain``                  the same: out of rotation, in-flight requests finish
``down``        ``down``                      not answering: HAProxy marks it down until ``up``
``unknown``     ``#unknown ...`` (no words)   this engine's data is stale: nothing changes, HAProxy keeps
                                              the state it has (stale data is never a reason to act, in
                                              either direction: a wedged engine whose scrapes time out is
                                              not readmitted between two ``down`` answers)
(untrusted)     ``up ready``                  the agent itself is unhealthy (or not started): fail open,
                                              every drain and down the agent set is lifted and HAProxy's
                                              own health checks decide; the weight stays as it was
==============  ============================  =============================================================

An engine the agent does not know, or a connection that sends no job, gets the fail-open reply too (a
typo in HAProxy's config must not take a server out); it is logged once per job.

Contract of :class:`AgentCheckServer`: its own threads, never the agent's tick; at most
``max_connections`` connections at once (more are closed at accept, which HAProxy ignores: a failed
agent connection changes nothing); each connection must send its line within
:data:`READ_TIMEOUT_SECONDS` (else it is answered as if it sent none), and the reply is written with the
same timeout, so a slow or silent client holds one thread for at most a few seconds.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from watchdog.infra.wakeable import WakeableServer, serve_in_thread, stop_and_close
from watchdog.serving.model import EngineVerdict, Verdict, VerdictSource

log = logging.getLogger(__name__)

READ_TIMEOUT_SECONDS = 1.0
"""How long a connection may take to send its line (HAProxy sends it at once; its own agent timeout,
``agent-inter``, defaults to 2 s)."""
MAX_LINE_BYTES = 256
"""The longest job line read; anything after it is ignored."""
MAX_DESCRIPTION = 120
"""Characters of the ``#`` description at most (HAProxy keeps a short status text)."""


def _description(verdict: EngineVerdict | None, fallback: str) -> str:
    if verdict is None or not verdict.reasons:
        text = fallback
    else:
        text = f"{verdict.verdict.value}: " + "; ".join(f"{r.code} {r.detail}" for r in verdict.reasons)
    printable = "".join(c if 32 <= ord(c) < 127 else " " for c in text)
    return printable[:MAX_DESCRIPTION]


def agent_reply(verdict: EngineVerdict | None, trusted: bool) -> str:
    """The agent-check line (without its newline) for ``verdict`` (None: unknown job or none sent).
    ``trusted`` False (the agent is unhealthy) fails open whatever the verdict says; an ``unknown``
    verdict of a trusted agent changes nothing (a reply without state words)."""
    if verdict is None:
        return "up ready #unknown: no such engine on this agent (failing open)"
    if not trusted:
        return "up ready #unknown: the agent is unhealthy (failing open)"
    weight = max(1, min(100, verdict.weight_percent))  # 0 % would be HAProxy's DRAIN: these verdicts serve
    if verdict.verdict in (Verdict.ADMIT, Verdict.SHORT_ONLY):
        return f"up ready {weight}% #{_description(verdict, verdict.verdict.value)}"
    if verdict.verdict in (Verdict.SHED, Verdict.DRAIN):
        return f"up drain #{_description(verdict, verdict.verdict.value)}"
    if verdict.verdict is Verdict.DOWN:
        return f"down #{_description(verdict, 'down')}"
    return f"#{_description(verdict, 'unknown: no fresh data')} (no change)"


def parse_job(raw: bytes) -> str:
    """The job HAProxy named: the first line, stripped (``\\r\\n`` or ``\\n``); empty when none."""
    return raw.split(b"\n", 1)[0].strip().decode("utf-8", "replace")


class _Server(WakeableServer, socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    owner: AgentCheckServer

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.owner.slots.acquire(blocking=False):
            self.owner.rejected += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.owner.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.owner.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("agent-check connection error", exc_info=True)


class AgentCheckServer:
    """Answers HAProxy agent checks from ``source()`` (the agent's verdict source; None while it has none,
    which fails open). ``start()`` / ``stop()``; ``port`` after start."""

    def __init__(self, source: Callable[[], VerdictSource | None], host: str = "127.0.0.1", port: int = 0,
                 max_connections: int = 64) -> None:
        self.source = source
        self.host = host
        self.port = port
        self.slots = threading.BoundedSemaphore(max_connections)
        self.rejected = 0
        self._warned: set[str] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def reply_for(self, job: str) -> str:
        """The line for ``job`` now (also what a connection gets)."""
        source = self.source()
        if source is None or not source.verdicts():  # not started, or no tick has computed verdicts yet
            return "up ready #unknown: the agent has no verdicts yet (failing open)"
        verdict = source.verdict(job) if job else None
        if verdict is None and job not in self._warned:
            self._warned.add(job)
            log.warning("agent-check for an engine this agent does not know: answering up (fail open); "
                        "check agent-send in the HAProxy config", extra={"job": job})
        return agent_reply(verdict, source.trusted())

    def _answer(self, connection: socket.socket) -> None:
        connection.settimeout(READ_TIMEOUT_SECONDS)
        raw = b""
        with contextlib.suppress(TimeoutError, OSError):
            while b"\n" not in raw and len(raw) < MAX_LINE_BYTES:
                chunk = connection.recv(MAX_LINE_BYTES - len(raw))
                if not chunk:
                    break
                raw += chunk
        line = self.reply_for(parse_job(raw))
        with contextlib.suppress(OSError):
            connection.sendall(line.encode("ascii", "replace") + b"\n")

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises OSError when the address is taken."""
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._answer(self.request)

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_class = type("_AgentServer", (_Server,), {"address_family": family})
        self._server = server_class((self.host, self.port), Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = serve_in_thread(self._server, "agent-check")

    def stop(self) -> None:
        """Stop accepting and close the socket; answers in progress finish in their own threads."""
        if self._server is not None:
            stop_and_close(self._server, self._thread)
            self._server, self._thread = None, None

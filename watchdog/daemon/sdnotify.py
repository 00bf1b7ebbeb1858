"""systemd's sd_notify protocol in a few lines: one datagram to ``$NOTIFY_SOCKET``.

Contract: every function is a no-op returning False outside systemd (no ``NOTIFY_SOCKET``); a send
error is logged once and reported as False, never raised (the agent must not die because systemd went
away). Abstract socket names (``@...``) are supported.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger("watchdog.sdnotify")  # the name its log lines have always had


def _address(env: Mapping[str, str]) -> str | None:
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return None
    if address.startswith("@"):
        return "\0" + address[1:]
    return address


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``KEY=VALUE`` lines) to systemd; False when not under systemd or on error."""
    address = _address(os.environ if env is None else env)
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
        return True
    except OSError as exc:
        log.warning("sd_notify failed", extra={"error": str(exc)})
        return False


def ready(status: str = "", env: Mapping[str, str] | None = None) -> bool:
    """``READY=1`` (and ``STATUS=``): the service finished starting (rules loaded, first tick done)."""
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""), env)


def reloading(env: Mapping[str, str] | None = None) -> bool:
    """``RELOADING=1`` with ``MONOTONIC_USEC`` (required by Type=notify-reload, harmless for notify)."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}", env)


def stopping(env: Mapping[str, str] | None = None) -> bool:
    """``STOPPING=1``: shutdown has begun."""
    return notify("STOPPING=1", env)


def watchdog_ping(env: Mapping[str, str] | None = None) -> bool:
    """``WATCHDOG=1``: the evaluation loop completed a tick."""
    return notify("WATCHDOG=1", env)


def status(text: str, env: Mapping[str, str] | None = None) -> bool:
    """``STATUS=...``: a one-line status shown by ``systemctl status``."""
    return notify(f"STATUS={text}", env)


def watchdog_interval_seconds(env: Mapping[str, str] | None = None) -> float | None:
    """The watchdog interval systemd expects pings within, or None when the watchdog is off for us."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1_000_000

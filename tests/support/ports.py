"""Loopback ports for tests that start real servers as subprocesses.

A port taken with ``bind(port 0)`` and released again is free only "a moment ago": until the subprocess
binds it, the kernel may hand the same port to anyone else who binds port 0 or connects out, and under
``pytest -n`` other workers do both all the time. So :func:`free_port` hands out ports *below* the
kernel's ephemeral range (which nothing picks on its own), from a block of its own per xdist worker
(which no other worker of the run picks), checking each with a real ``bind`` (which skips what another
program on the machine holds). In-process servers need none of this: they bind port 0 and keep it.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

BLOCK_SIZE = 1000
"""Ports per xdist worker."""

FIRST_BLOCK_PORT = 20000
"""Where worker ``gw0``'s block starts; blocks follow one another up to the ephemeral range."""


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out on its own (32768 when /proc does not say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_index() -> int:
    """0 for ``gw0`` (or no xdist), 1 for ``gw1``, ..."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def _candidates() -> Iterator[int]:
    """This worker's block, from a random start (two test sessions on one machine rarely meet), cycling."""
    room = _ephemeral_low() - FIRST_BLOCK_PORT
    if room < BLOCK_SIZE:  # an unusual ephemeral range: no block fits, free_port falls back to port 0
        return iter(())
    first = FIRST_BLOCK_PORT + (_worker_index() % (room // BLOCK_SIZE)) * BLOCK_SIZE
    start = random.randrange(BLOCK_SIZE)
    return itertools.cycle([first + (start + i) % BLOCK_SIZE for i in range(BLOCK_SIZE)])


_ports = _candidates()


def _bindable(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound right now (no SO_REUSEADDR: a port in TIME_WAIT is skipped)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now and handed to no one else in this test run (for subprocesses that
    need their port up front, or a URL where nothing must answer)."""
    for port in itertools.islice(_ports, BLOCK_SIZE):
        if _bindable(port):
            return port
    with socket.socket() as sock:  # the whole block is taken (or no block fits): the old way, port 0
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

"""sd_notify against a real AF_UNIX datagram socket, as systemd listens."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.daemon import sdnotify


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    yield sock, {"NOTIFY_SOCKET": str(path)}
    sock.close()


def test_ready_and_status(notify_socket: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify_socket
    assert sdnotify.ready("3 rules loaded", env=env)
    assert sock.recv(4096) == b"READY=1\nSTATUS=3 rules loaded"


def test_reloading_carries_monotonic_usec(notify_socket: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify_socket
    assert sdnotify.reloading(env=env)
    lines = sock.recv(4096).decode().splitlines()
    assert lines[0] == "RELOADING=1"
    key, value = lines[1].split("=")
    assert key == "MONOTONIC_USEC" and int(value) > 0


def test_watchdog_and_stopping(notify_socket: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify_socket
    assert sdnotify.watchdog_ping(env=env)
    assert sdnotify.stopping(env=env)
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert sock.recv(4096) == b"STOPPING=1"


def test_abstract_socket() -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"inference-watchdog-test-{os.getpid()}"
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        assert sdnotify.notify("STATUS=x", env={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"STATUS=x"
    finally:
        sock.close()


def test_noop_outside_systemd() -> None:
    assert sdnotify.ready(env={}) is False
    assert sdnotify.watchdog_ping(env={}) is False


def test_send_error_is_reported_not_raised(tmp_path: Path) -> None:
    assert sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}) is False


def test_watchdog_interval_only_for_our_pid() -> None:
    assert sdnotify.watchdog_interval_seconds({"WATCHDOG_USEC": "30000000"}) == 30.0
    mine = {"WATCHDOG_USEC": "5000000", "WATCHDOG_PID": str(os.getpid())}
    assert sdnotify.watchdog_interval_seconds(mine) == 5.0
    assert sdnotify.watchdog_interval_seconds({"WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "1"}) is None
    assert sdnotify.watchdog_interval_seconds({}) is None

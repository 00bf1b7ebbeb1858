"""The HAProxy agent-check replies (grammar and mapping) and the server over real loopback TCP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.verdicts import SettableVerdicts
from watchdog.serving.agentcheck import READ_TIMEOUT_SECONDS, AgentCheckServer, agent_reply, parse_job
from watchdog.serving.model import EngineVerdict, Reason, Verdict


def verdict(kind: Verdict, weight: int = 100, reasons: tuple[Reason, ...] = ()) -> EngineVerdict:
    return EngineVerdict("vllm-a", "127.0.0.1:8000", kind, weight, reasons, 1.0, 2.0)


@pytest.mark.parametrize(("kind", "weight", "expected"), [
    (Verdict.ADMIT, 100, "up ready 100%"),
    (Verdict.ADMIT, 70, "up ready 70%"),       # degraded but alive: a smaller share
    (Verdict.ADMIT, 0, "up ready 1%"),         # 0 % would be DRAIN in HAProxy: admit never drains
    (Verdict.SHORT_ONLY, 50, "up ready 50%"),  # serving.short_only_weight_percent
    (Verdict.SHED, 0, "up drain"),
    (Verdict.DRAIN, 0, "up drain"),
    (Verdict.DOWN, 0, "down"),
    (Verdict.UNKNOWN, 100, ""),  # no state word: HAProxy keeps what it has
])
def test_reply_names_the_whole_state_for_each_verdict(kind: Verdict, weight: int, expected: str) -> None:
    reply = agent_reply(verdict(kind, weight, (Reason("kv_free_low", "free KV 3 %"),)), True)
    words, _, description = reply.partition("#")
    assert words.strip() == expected
    assert "kv_free_low free KV 3 %" in description


@pytest.mark.parametrize("kind", list(Verdict))
def test_an_untrusted_agent_or_an_unknown_engine_fails_open(kind: Verdict) -> None:
    assert agent_reply(verdict(kind), False).split("#")[0].strip() == "up ready"
    assert agent_reply(None, True).split("#")[0].strip() == "up ready"


def test_description_is_one_printable_bounded_line() -> None:
    reply = agent_reply(verdict(Verdict.DRAIN, 0, (Reason("xid_fatal", "Xid 79\r\nup ready 100%\x00" + "x" * 500),)),
                        True)
    assert "\n" not in reply and "\r" not in reply and "\x00" not in reply
    assert reply.startswith("up drain #drain: xid_fatal Xid 79")
    assert len(reply) < 150


def test_parse_job() -> None:
    assert parse_job(b"vllm-a\n") == "vllm-a"
    assert parse_job(b"vllm-a\r\nrest") == "vllm-a"
    assert parse_job(b"") == ""


@pytest.fixture
def served() -> Iterator[tuple[AgentCheckServer, SettableVerdicts]]:
    source = SettableVerdicts(["vllm-a", "vllm-b"])
    server = AgentCheckServer(lambda: source, "127.0.0.1", 0, max_connections=4)
    server.start()
    yield server, source
    server.stop()


def ask(port: int, line: bytes | None, timeout: float = 5.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        if line is not None:
            conn.sendall(line)
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
        return data.decode()


def test_server_answers_one_line_then_closes(served: tuple[AgentCheckServer, SettableVerdicts]) -> None:
    server, source = served
    assert ask(server.port, b"vllm-a\n").startswith("up ready 100% #admit")
    source.set("vllm-a", Verdict.DRAIN)
    reply = ask(server.port, b"vllm-a\n")
    assert reply.endswith("\n") and reply.count("\n") == 1
    assert reply.startswith("up drain #drain: engine_wedged")
    assert ask(server.port, b"vllm-b\n").startswith("up ready 100%")
    source.set_trusted(False)
    assert ask(server.port, b"vllm-a\n").startswith("up ready #unknown")


def test_unknown_job_and_no_job_fail_open(served: tuple[AgentCheckServer, SettableVerdicts]) -> None:
    server, _ = served
    assert ask(server.port, b"nope\n").startswith("up ready #unknown")
    started = time.monotonic()
    assert ask(server.port, None).startswith("up ready #unknown")  # silent client: answered after the timeout
    assert time.monotonic() - started < READ_TIMEOUT_SECONDS + 2


def test_no_source_yet_fails_open() -> None:
    server = AgentCheckServer(lambda: None, "127.0.0.1", 0)
    server.start()
    try:
        assert ask(server.port, b"vllm-a\n").startswith("up ready #unknown")
    finally:
        server.stop()


def test_silent_clients_cannot_starve_the_port(served: tuple[AgentCheckServer, SettableVerdicts]) -> None:
    server, _ = served
    # More silent connections than the server answers at once: the extra ones are closed at accept, and
    # once the silent ones time out a real check is answered again, within a bounded time.
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
    try:
        time.sleep(0.2)
        assert server.rejected >= 4
        deadline = time.monotonic() + READ_TIMEOUT_SECONDS + 3
        reply = ""
        while time.monotonic() < deadline and not reply:
            try:
                reply = ask(server.port, b"vllm-a\n", timeout=2)
            except OSError:
                time.sleep(0.1)
        assert reply.startswith("up ready 100%")
    finally:
        for conn in silent:
            conn.close()


def test_many_concurrent_checks_are_all_answered(served: tuple[AgentCheckServer, SettableVerdicts]) -> None:
    server, source = served
    source.set("vllm-b", Verdict.SHED)
    replies: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        for _ in range(5):
            for attempt in range(50):
                try:
                    reply = ask(server.port, b"vllm-b\n")
                except OSError:
                    reply = ""
                if reply:  # a connection past the cap is closed unanswered: HAProxy retries next interval
                    break
                time.sleep(0.01 * (attempt + 1))
            with lock:
                replies.append(reply)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(replies) == 40
    assert all(reply.startswith("up drain #shed") for reply in replies)


def test_stop_frees_the_port() -> None:
    server = AgentCheckServer(lambda: None, "127.0.0.1", 0)
    server.start()
    port = server.port
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)

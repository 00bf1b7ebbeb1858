"""A real HTTP server on loopback implementing the slice of Slack's Web API the notifier uses.

Methods: ``chat.postMessage``, ``chat.update``, ``conversations.history``, ``conversations.replies`` (with
message ``metadata`` and ``include_all_metadata``) and incoming webhooks (``POST /services/...``).
Bearer-token auth as Slack does it (``invalid_auth`` otherwise). Faults are scriptable: the next N
matching requests answer with an HTTP status (429 + ``Retry-After``, 500, 503), an ``ok: false`` error,
or are *slow* (processed and stored, then the answer is held back so the client times out or is killed
mid-send), and ``outage`` answers 503 to everything until cleared. Everything received is recorded.

Point slack-sdk at it with ``WebClient(base_url=server.base_url)``; run it standalone with
``python tests/notify/slack_api.py`` (prints the base URL) for manual experiments.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_TOKEN = "xoxb-1111-2222-FAKEtokenSECRETvalue"
WEBHOOK_PATH = "/services/T0000/B0000/FAKEwebhookSECRETpath"
CHANNELS = {"C0ALERTS": "alerts", "C0OTHER": "other"}


@dataclass
class Fault:
    """One scripted answer. ``kind``: ``status`` (HTTP ``status``), ``error`` (200 ok=false ``error``),
    ``slow`` (store, then wait ``seconds`` before answering). ``methods``: which calls it applies to
    (empty: all; ``webhook`` for the webhook path). ``count``: how many requests it consumes."""

    kind: str
    status: int = 503
    error: str = ""
    retry_after: float | None = None
    seconds: float = 0.0
    methods: tuple[str, ...] = ()
    count: int = 1


@dataclass
class Message:
    """A message as the fake workspace stores it."""

    channel: str
    ts: str
    text: str
    blocks: list[Any]
    metadata: dict[str, Any] | None
    thread_ts: str = ""
    updates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def idem_key(self) -> str:
        """The ``idem_key`` of the message metadata, "" if none."""
        return str(((self.metadata or {}).get("event_payload") or {}).get("idem_key", ""))

    def as_api(self, with_metadata: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text, "blocks": self.blocks}
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if with_metadata and self.metadata:
            out["metadata"] = self.metadata
        return out


class FakeSlack:
    """The server and its recorded state; use as a context manager or ``start()`` / ``stop()``."""

    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.messages: list[Message] = []
        self.webhook_posts: list[dict[str, Any]] = []
        self.requests: list[tuple[str, int]] = []  # (method, HTTP status answered)
        self.faults: deque[Fault] = deque()
        self.outage = False
        self.slow_started = threading.Event()
        self._release_slow = threading.Event()
        self._ts = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- control -----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """Web API base URL for ``WebClient(base_url=...)``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/"

    @property
    def webhook_url(self) -> str:
        """The incoming-webhook URL (a secret, as in real life)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}{WEBHOOK_PATH}"

    def start(self) -> FakeSlack:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release_slow.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *faults: Fault) -> None:
        """Queue faults; each applies to the next ``count`` requests its ``methods`` match."""
        with self.lock:
            self.faults.extend(faults)

    def release_slow(self) -> None:
        """Let held (slow) answers go now."""
        self._release_slow.set()

    # -- views -------------------------------------------------------------------------------------
    def top_level(self) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if not m.thread_ts]

    def replies(self, ts: str) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m.thread_ts == ts]

    def by_key(self) -> dict[str, int]:
        """How many stored messages carry each idempotency key."""
        counts: dict[str, int] = {}
        with self.lock:
            for m in self.messages:
                counts[m.idem_key] = counts.get(m.idem_key, 0) + 1
        return counts

    # -- the API -----------------------------------------------------------------------------------
    def _take_fault(self, method: str) -> Fault | None:
        with self.lock:
            if self.outage:
                return Fault("status", status=503)
            for fault in self.faults:
                if not fault.methods or method in fault.methods:
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _channel(self, value: str) -> str | None:
        if value in CHANNELS:
            return value
        for cid, name in CHANNELS.items():
            if value.lstrip("#") == name:
                return cid
        return None

    def call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one Web API method on the stored workspace (no faults, no auth)."""
        if method == "chat.postMessage":
            channel = self._channel(str(args.get("channel", "")))
            if channel is None:
                return {"ok": False, "error": "channel_not_found"}
            if not args.get("text") and not args.get("blocks"):
                return {"ok": False, "error": "no_text"}
            blocks = _json_arg(args.get("blocks")) or []
            if not isinstance(blocks, list):
                return {"ok": False, "error": "invalid_blocks"}
            with self.lock:
                thread_ts = str(args.get("thread_ts") or "")
                if thread_ts and not any(m.ts == thread_ts and m.channel == channel for m in self.messages):
                    return {"ok": False, "error": "thread_not_found"}
                msg = Message(
                    channel,
                    self._new_ts(),
                    str(args.get("text", "")),
                    blocks,
                    _json_arg(args.get("metadata")),
                    thread_ts,
                )
                self.messages.append(msg)
            return {"ok": True, "channel": channel, "ts": msg.ts, "message": msg.as_api(True)}
        if method == "chat.update":
            channel = self._channel(str(args.get("channel", "")))
            with self.lock:
                for m in self.messages:
                    if m.channel == channel and m.ts == str(args.get("ts")):
                        m.text = str(args.get("text", m.text))
                        m.blocks = _json_arg(args.get("blocks")) or m.blocks
                        m.updates.append({"text": m.text, "blocks": m.blocks})
                        return {"ok": True, "channel": channel, "ts": m.ts}
            return {"ok": False, "error": "message_not_found"}
        if method in ("conversations.history", "conversations.replies"):
            channel = self._channel(str(args.get("channel", "")))
            if channel is None or str(args.get("channel")).startswith("#"):
                return {"ok": False, "error": "channel_not_found"}
            oldest = float(args.get("oldest") or 0)
            with_meta = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
            with self.lock:
                if method == "conversations.history":
                    found = [m for m in self.messages if m.channel == channel and not m.thread_ts]
                    found = sorted(found, key=lambda m: float(m.ts), reverse=True)  # newest first
                else:
                    parent = str(args.get("ts", ""))
                    found = [
                        m for m in self.messages if m.channel == channel and (m.ts == parent or m.thread_ts == parent)
                    ]
                found = [m for m in found if float(m.ts) > oldest]
                start = int(args.get("cursor") or 0)
                limit = int(args.get("limit") or 100)
                page = found[start : start + limit]
                more = start + limit < len(found)
                return {
                    "ok": True,
                    "messages": [m.as_api(with_meta) for m in page],
                    "has_more": more,
                    "response_metadata": {"next_cursor": str(start + limit) if more else ""},
                }
        return {"ok": False, "error": "unknown_method"}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (timeout, killed)
                    self.wfile.write(body)

            def _args(self) -> dict[str, Any]:
                parsed = urllib.parse.urlsplit(self.path)
                args: dict[str, Any] = dict(urllib.parse.parse_qsl(parsed.query))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                ctype = self.headers.get("Content-Type", "")
                if raw and "json" in ctype:
                    args.update(json.loads(raw))
                elif raw:
                    args.update(urllib.parse.parse_qsl(raw.decode()))
                return args

            def _handle(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                args = self._args()
                webhook = path.startswith("/services/")
                method = "webhook" if webhook else path.rsplit("/", 1)[-1]
                fault = fake._take_fault(method)
                if fault is not None and fault.kind == "status":
                    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                    err = {429: "ratelimited"}.get(fault.status, "service_unavailable")
                    body = err.encode() if webhook else json.dumps({"ok": False, "error": err}).encode()
                    fake.requests.append((method, fault.status))
                    self._send(fault.status, body, "application/json", headers)
                    return
                if fault is not None and fault.kind == "error":
                    fake.requests.append((method, 200))
                    self._send(200, json.dumps({"ok": False, "error": fault.error}).encode(), "application/json")
                    return
                if webhook:
                    if path != WEBHOOK_PATH:
                        result_status, body = 404, b"no_service"
                    elif not args.get("text") and not args.get("blocks"):
                        result_status, body = 400, b"invalid_payload"
                    else:
                        with fake.lock:
                            fake.webhook_posts.append(args)
                        result_status, body = 200, b"ok"
                    ctype = "text/html"
                else:
                    auth = self.headers.get("Authorization", "")
                    if auth != f"Bearer {fake.token}":
                        result = {"ok": False, "error": "invalid_auth"}
                    else:
                        result = fake.call(method, args)
                    result_status, body, ctype = 200, json.dumps(result).encode(), "application/json"
                if fault is not None and fault.kind == "slow":
                    fake.slow_started.set()
                    fake._release_slow.wait(timeout=fault.seconds)
                fake.requests.append((method, result_status))
                self._send(result_status, body, ctype)

            do_POST = _handle
            do_GET = _handle

        return Handler


def _json_arg(value: Any) -> Any:
    """Form-encoded calls carry JSON strings; JSON calls carry objects."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


if __name__ == "__main__":
    with FakeSlack() as server:
        print(server.base_url, server.webhook_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

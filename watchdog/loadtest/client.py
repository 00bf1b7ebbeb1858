"""A streaming client for OpenAI-compatible inference endpoints (vLLM, SGLang, TGI, ...).

One call to :meth:`OpenAIClient.send` posts one request to ``/v1/completions`` or
``/v1/chat/completions`` with ``"stream": true``, reads the server-sent events as they arrive, and
returns a :class:`RequestResult`: time to first token, the gaps between streamed chunks (inter-token
latencies), time per output token, end-to-end time and output tokens. It never raises for what the
server or network does: a refused connection, an HTTP error, a malformed event or a timeout become a
result with ``error`` set, so a load test keeps counting.

Definitions (the ones vLLM's ``bench serve`` uses, so figures compare with it):

- TTFT: from just before the request is sent until the first event that carries output text.
- ITL: the gaps between consecutive events that carry output text, after the first.
- TPOT: ``(e2e - ttft) / (output_tokens - 1)``; undefined (None) for fewer than two output tokens.
- output_tokens: the server's ``usage.completion_tokens`` when it reports usage (we ask with
  ``stream_options.include_usage``), else the number of text-bearing events.

A completions prompt may be a string or a sequence of token ids (vLLM and SGLang take both): ids give
exact prompt lengths and exactly shared prefixes, whatever the tokenizer.

Timeouts are bounded twice: ``read_timeout`` limits every socket wait (connect and each read) and
``total_timeout`` the whole request, so a server that trickles bytes forever is cut off too. A request cut
off by either is closed (the server sees the client go away, as with an impatient user) and its result
has ``timed_out`` set.
Only ``http://`` is spoken (stdlib :mod:`http.client`); the load test refuses non-loopback targets
unless told otherwise (see :mod:`watchdog.loadtest.target`).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import urlsplit


class Api(str, Enum):
    """The two OpenAI endpoints the client speaks."""

    COMPLETIONS = "completions"
    CHAT = "chat"

    @property
    def path(self) -> str:
        """The URL path under ``/v1``."""
        return "/v1/completions" if self is Api.COMPLETIONS else "/v1/chat/completions"


@dataclass(frozen=True)
class CompletionRequest:
    """One request: a prompt (text, or token ids for the completions API), how many tokens to generate,
    and the model name to ask for."""

    prompt: str | tuple[int, ...]
    max_tokens: int
    model: str = "default"
    api: Api = Api.COMPLETIONS
    prompt_tokens: int | None = None  # the planned prompt length, carried into the result
    ignore_eos: bool = True  # vLLM/SGLang extension: generate exactly max_tokens (fixed output length)

    def body(self) -> dict[str, object]:
        """The JSON body sent to the server."""
        payload: dict[str, object] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self.ignore_eos:
            payload["ignore_eos"] = True
        if self.api is Api.CHAT:
            if not isinstance(self.prompt, str):
                raise ValueError("the chat API takes a text prompt, not token ids")
            payload["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            payload["prompt"] = self.prompt if isinstance(self.prompt, str) else list(self.prompt)
        return payload


@dataclass(frozen=True)
class RequestResult:
    """What one streamed request measured. Times are seconds; ``sent_at`` is on the client's clock."""

    sent_at: float
    e2e: float
    ttft: float | None
    itl: tuple[float, ...] = field(default_factory=tuple)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str | None = None
    status: int | None = None
    timed_out: bool = False  # cut off by the read or total timeout (``error`` says which)

    @property
    def ok(self) -> bool:
        """True when the request completed without error and produced output."""
        return self.error is None

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first, or None with fewer than two tokens."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


class _StreamError(Exception):
    """A problem inside one stream, carried to the one place that turns it into a result."""


class _Timeout(_StreamError):
    """The read or the total timeout cut the request off."""


@dataclass
class _Stream:
    """Accumulates the timing of one stream as events arrive."""

    started: float
    first: float | None = None
    last: float | None = None
    gaps: list[float] = field(default_factory=list)
    events_with_text: int = 0
    usage_tokens: int | None = None
    usage_prompt: int | None = None
    done: bool = False

    def on_text(self, now: float) -> None:
        if self.first is None:
            self.first = now
        elif self.last is not None:
            self.gaps.append(now - self.last)
        self.last = now
        self.events_with_text += 1


def _event_text(event: dict[str, object]) -> str:
    """The output text an OpenAI stream event carries ("" for none)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices:
        return ""
    choice = choices[0]
    if not isinstance(choice, dict):
        return ""
    text = choice.get("text")
    if isinstance(text, str):
        return text
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        if isinstance(content, str):
            return content
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str):
            return reasoning
    return ""


def _apply_event(stream: _Stream, data: str, now: float) -> None:
    """Fold one ``data:`` payload into ``stream``; raises :class:`_StreamError` for a bad or error event."""
    if data == "[DONE]":
        stream.done = True
        return
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise _StreamError(f"malformed event: {data[:80]!r}") from exc
    if not isinstance(event, dict):
        raise _StreamError(f"malformed event: {data[:80]!r}")
    if "error" in event:
        raise _StreamError(f"server error event: {json.dumps(event['error'])[:200]}")
    if _event_text(event):
        stream.on_text(now)
    usage = event.get("usage")
    if isinstance(usage, dict):
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        if isinstance(completion, int):
            stream.usage_tokens = completion
        if isinstance(prompt, int):
            stream.usage_prompt = prompt


class OpenAIClient:
    """Sends streaming requests to one OpenAI-compatible base URL (``http://host:port``).

    Thread-safe: each :meth:`send` opens its own connection. ``clock`` is injectable for tests.
    """

    def __init__(self, base_url: str, *, read_timeout: float = 30.0, total_timeout: float = 300.0,
                 api_key: str | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"base URL must be http://host[:port], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[: -len("/v1")]
        self.read_timeout = read_timeout
        self.total_timeout = total_timeout
        self._api_key = api_key
        self.clock = clock

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def send(self, request: CompletionRequest) -> RequestResult:
        """Post ``request``, stream the answer, and measure it. Never raises for network or server faults."""
        body = json.dumps(request.body()).encode()
        started = self.clock()
        stream = _Stream(started=started)
        status: int | None = None
        error: str | None = None
        timed_out = False
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.read_timeout)
        try:
            conn.request("POST", self.prefix + request.api.path, body=body, headers=self._headers())
            response = conn.getresponse()
            status = response.status
            if status != 200:
                detail = response.read(300).decode("utf-8", "replace").strip()
                raise _StreamError(f"HTTP {status}: {detail}")
            self._read_events(conn, response, stream, started)
            if not stream.done:
                raise _StreamError("stream ended before [DONE]")
            if stream.first is None:
                raise _StreamError("stream carried no output text")
        except _StreamError as exc:
            error, timed_out = str(exc), isinstance(exc, _Timeout)
        except TimeoutError:  # connect, send or the response's headers
            error, timed_out = f"timed out after {self.read_timeout:g} s waiting for the response", True
        except (OSError, http.client.HTTPException) as exc:  # boundary: one request's network faults
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            conn.close()
        ended = self.clock()
        tokens = stream.usage_tokens if stream.usage_tokens is not None else stream.events_with_text
        return RequestResult(
            sent_at=started,
            e2e=ended - started,
            ttft=None if stream.first is None else stream.first - started,
            itl=tuple(stream.gaps),
            output_tokens=tokens,
            prompt_tokens=stream.usage_prompt if stream.usage_prompt is not None else request.prompt_tokens,
            error=error,
            status=status,
            timed_out=timed_out,
        )

    def _read_events(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                     stream: _Stream, started: float) -> None:
        """Read ``data:`` lines until ``[DONE]``, end of stream or a timeout (each read waits at most
        ``read_timeout`` and what is left of ``total_timeout``)."""
        while not stream.done:
            left = self.total_timeout - (self.clock() - started)
            if left <= 0:
                raise _Timeout(f"request exceeded the total timeout of {self.total_timeout:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(min(self.read_timeout, left))
            try:
                raw = response.readline(1 << 20)
            except TimeoutError as exc:
                if self.clock() - started >= self.total_timeout:
                    raise _Timeout(f"request exceeded the total timeout of {self.total_timeout:g} s") from exc
                raise _Timeout(f"read timed out after {self.read_timeout:g} s") from exc
            now = self.clock()
            if now - started > self.total_timeout:
                raise _Timeout(f"request exceeded the total timeout of {self.total_timeout:g} s")
            if not raw:
                return
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data:"):
                _apply_event(stream, line[len("data:"):].strip(), now)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

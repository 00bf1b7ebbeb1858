"""A simulated OpenAI-compatible API whose latencies follow a load model with a known knee.

The model is the one continuous batching gives a memory-bound decoder: ``slots`` requests decode at once
(vLLM's ``max_num_seqs``), each admitted request spends ``prefill_seconds`` to its first token and
``tpot_seconds`` per further token, and requests beyond the slots wait in a FIFO queue. So a request's
TTFT is its queue wait plus the prefill, its TPOT is ``tpot_seconds``, and the arrival rate the slots
sustain (:meth:`LoadModel.knee_rate`) is ``slots / (prefill + (output - 1) x tpot)``: below it the queue
stays short and every SLO holds; above it the queue, and TTFT with it, grows without bound. That rate is
the knee a load test must find.

Streams are real server-sent events as vLLM writes them (``data: {...}`` chunks, a usage chunk when
``stream_options.include_usage`` is set, ``data: [DONE]``); timing uses deadlines from the admission
time, so sleep overheads do not accumulate. Served by the demo's engine simulator
(:mod:`watchdog.demo.engine_sim`) next to its ``/metrics``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from io import BufferedIOBase

OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions")


@dataclass(frozen=True)
class LoadModel:
    """Slots, prefill time and time per output token of the simulated engine."""

    slots: int
    prefill_seconds: float
    tpot_seconds: float

    def service_seconds(self, output_tokens: int) -> float:
        """How long one admitted request holds its slot."""
        return self.prefill_seconds + max(output_tokens - 1, 0) * self.tpot_seconds

    def knee_rate(self, output_tokens: int) -> float:
        """Requests per second the slots sustain with every request producing ``output_tokens``."""
        return self.slots / self.service_seconds(output_tokens)


class FifoSlots:
    """A counting semaphore that admits waiters strictly in arrival order (an engine's waiting queue)."""

    def __init__(self, slots: int) -> None:
        self._cond = threading.Condition()
        self._free = slots
        self._next_ticket = 0
        self._admitting = 0

    def acquire(self) -> None:
        """Block until every earlier caller was admitted and a slot is free."""
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.wait_for(lambda: ticket == self._admitting and self._free > 0)
            self._admitting += 1
            self._free -= 1
            self._cond.notify_all()

    def release(self) -> None:
        """Free one slot."""
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class RequestError(ValueError):
    """The request body is not a valid completion request (becomes HTTP 400)."""


def _event(chat: bool, model: str, index: int, text: str, finish: str | None) -> bytes:
    choice: dict[str, object] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text} if index else {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    kind = "chat.completion.chunk" if chat else "text_completion"
    payload = {"id": "sim", "object": kind, "model": model, "choices": [choice]}
    return f"data: {json.dumps(payload)}\n\n".encode()


class SimulatedOpenAI:
    """Answers completion requests as a :class:`LoadModel` engine would. Thread-safe."""

    def __init__(self, model: LoadModel, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.model = model
        self._slots = FifoSlots(model.slots)
        self._clock = clock
        self._sleep = sleep

    @staticmethod
    def parse(path: str, raw: bytes) -> tuple[bool, str, int, int, bool]:
        """``(chat, model, prompt_tokens, max_tokens, include_usage)`` of a request; RequestError if invalid."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise RequestError(f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError("body must be a JSON object")
        chat = path.endswith("/chat/completions")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError("messages: a non-empty list is required")
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            raw_prompt = body.get("prompt")
            if not isinstance(raw_prompt, str):
                raise RequestError("prompt: a string is required")
            prompt = raw_prompt
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise RequestError("max_tokens: a positive integer is required")
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        return chat, str(body.get("model", "sim")), max(1, len(prompt.split())), max_tokens, include_usage

    def stream(self, chat: bool, model: str, prompt_tokens: int, max_tokens: int,
               include_usage: bool) -> Generator[bytes, None, None]:
        """The SSE chunks of one request, each yielded when the simulated engine would emit it."""
        self._slots.acquire()
        try:
            admitted = self._clock()
            for index in range(max_tokens):
                deadline = admitted + self.model.prefill_seconds + index * self.model.tpot_seconds
                delay = deadline - self._clock()
                if delay > 0:
                    self._sleep(delay)
                finish = "length" if index == max_tokens - 1 else None
                yield _event(chat, model, index, f" tok{index}", finish)
        finally:
            self._slots.release()
        if include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            yield f"data: {json.dumps({'id': 'sim', 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"


def write_chunked(wfile: BufferedIOBase, chunks: Generator[bytes, None, None]) -> None:
    """Write ``chunks`` with HTTP/1.1 chunked transfer encoding, flushing each (as uvicorn streams).

    The generator is closed however writing ends, so a client that hangs up frees its slot at once.
    """
    try:
        for chunk in chunks:
            wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            wfile.flush()
        wfile.write(b"0\r\n\r\n")
        wfile.flush()
    finally:
        chunks.close()

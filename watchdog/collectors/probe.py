"""Canary probes: a tiny fixed greedy completion sent to each engine's OpenAI-compatible API at a low rate.

An engine whose ``/metrics`` answers may still be unable to serve (a wedged scheduler, a stopped engine
core behind a live API server) or may serve wrong tokens (silent corruption after a GPU fault). For each
``engines[]`` entry with a ``probe`` section, :class:`ProbeCollector` POSTs ``{model, prompt,
max_tokens, temperature 0, seed, stream: true}`` to the probe URL (``/v1/completions``) every
``interval_seconds``, reads the server-sent events, and exports (labels: the endpoint's ``job`` and
``instance`` as its scrape has them, the configured extra labels, and ``model``):

- ``watchdog_engine_probe_success`` 1/0: the last completed probe returned at least one token in time;
- ``watchdog_engine_probe_ttft_seconds``, ``watchdog_engine_probe_tpot_seconds`` of the last success;
- ``watchdog_engine_probe_output_info{digest}`` 1: the first 16 hex digits of the SHA-256 of the output;
- ``watchdog_engine_probe_output_changed`` 1/0: that digest differs from the stored baseline;
- ``watchdog_engine_probe_slo_seconds{signal}``: the configured TTFT/TPOT thresholds (for the rules);
- ``watchdog_engine_probe_requests_total{result}``: ``ok``, ``error`` or ``timeout``.

The request runs on the probe's own daemon thread, so a server that accepts and never answers cannot
hold up the tick: :meth:`ProbeCollector.collect` returns at once with the last outcome, and a probe still
running past ``timeout_seconds`` counts as a failure (``timeout``); the next probe starts only once that
call has returned (no thread pile-up). The baseline (first digest seen for this job,
model and prompt) lives in the state database (:class:`ProbeBaselines`): it survives restarts and starts
over when the probed model or the prompt changes. Cost: docs/probes.md.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from watchdog.collectors.base import Collector, CollectorContext
from watchdog.collectors.engines import target_labels
from watchdog.config.settings import EngineProbeSettings, EngineSettings, Settings
from watchdog.infra.state import StateDB
from watchdog.infra.workers import DaemonPool
from watchdog.model import Sample, make_labels

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "The capital of France is"
USER_AGENT = "inference-watchdog-probe"
DIGEST_HEX = 16
RESULTS = ("ok", "error", "timeout")


@dataclass(frozen=True)
class ProbeSpec:
    """One engine's probe (a validated ``engines[].probe`` section plus the endpoint's target labels)."""

    url: str
    model: str
    targets: Mapping[str, str]
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 8
    seed: int = 1234
    interval_seconds: float = 15.0
    timeout_seconds: float = 10.0
    ttft_slo_seconds: float = 1.0
    tpot_slo_seconds: float = 0.2

    @classmethod
    def from_settings(cls, endpoint: EngineSettings, probe: EngineProbeSettings) -> ProbeSpec:
        """Build from one ``engines[]`` entry and its ``probe`` section."""
        return cls(
            url=probe.url, model=probe.model, targets=target_labels(endpoint), prompt=probe.prompt,
            max_tokens=probe.max_tokens, seed=probe.seed, interval_seconds=probe.interval_seconds,
            timeout_seconds=probe.timeout_seconds, ttft_slo_seconds=probe.ttft_slo_seconds,
            tpot_slo_seconds=probe.tpot_slo_seconds,
        )

    def request_body(self) -> bytes:
        """The fixed greedy request: same bytes every time."""
        return json.dumps({"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens,
                           "temperature": 0, "top_p": 1, "seed": self.seed, "stream": True},
                          sort_keys=True).encode()

    @property
    def prompt_sha(self) -> str:
        """Identifies the request (prompt, length, seed) whose output the baseline holds."""
        return hashlib.sha256(self.request_body()).hexdigest()[:DIGEST_HEX]


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe's result. ``result`` is ``ok``, ``error`` or ``timeout``; times in seconds."""

    result: str
    error: str = ""
    ttft_seconds: float = 0.0
    tpot_seconds: float = 0.0
    tokens: int = 0
    text: str = ""

    @property
    def digest(self) -> str:
        """First 16 hex digits of the SHA-256 of the output text."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:DIGEST_HEX]


class ProbeError(Exception):
    """A probe that returned no usable completion (connection, status, malformed stream)."""


class ProbeTimeout(ProbeError):
    """The stream did not end within the probe's overall deadline (a trickling or stalled server)."""


def parse_stream(events: Iterable[tuple[float, str]], started: float) -> ProbeOutcome:
    """A successful outcome from ``(monotonic time, line)`` pairs of an OpenAI completions SSE stream.

    Each ``data: {json}`` line with a non-empty ``choices[0].text`` is one token (vLLM and SGLang stream
    one token per event); ``usage.completion_tokens``, when sent, is the token count. TTFT is the first
    token's time after ``started``; TPOT the mean gap between first and last token. Raises
    :class:`ProbeError` for an ``error`` event, a malformed line or a stream without tokens.
    """
    first = last = 0.0
    chunks: list[str] = []
    usage_tokens = 0
    for at, line in events:
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ProbeError(f"malformed stream event: {data[:80]!r}") from exc
        if not isinstance(event, dict):
            raise ProbeError(f"malformed stream event: {data[:80]!r}")
        if event.get("error"):
            raise ProbeError(f"engine error: {str(event['error'])[:200]}")
        usage = event.get("usage") or {}
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            usage_tokens = usage["completion_tokens"]
        choices = event.get("choices") or []
        text = choices[0].get("text") if choices and isinstance(choices[0], dict) else None
        if not text:
            continue
        if not chunks:
            first = at
        last = at
        chunks.append(str(text))
    if not chunks:
        raise ProbeError("stream ended without a token")
    tokens = usage_tokens or len(chunks)
    tpot = (last - first) / (tokens - 1) if tokens > 1 else 0.0
    return ProbeOutcome("ok", ttft_seconds=first - started, tpot_seconds=tpot, tokens=tokens, text="".join(chunks))


def run_probe(spec: ProbeSpec, clock: Callable[[], float] = time.monotonic) -> ProbeOutcome:
    """Send the probe once and read the stream within ``timeout_seconds``; never raises."""
    parts = urlsplit(spec.url)
    started = clock()
    deadline = started + spec.timeout_seconds
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_class(parts.hostname or "", parts.port, timeout=spec.timeout_seconds)
    try:
        conn.request("POST", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     body=spec.request_body(),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream",
                              "User-Agent": USER_AGENT})
        response = conn.getresponse()
        if response.status != 200:
            raise ProbeError(f"HTTP {response.status} {response.reason}")
        return parse_stream(_lines(conn, response, deadline, clock), started)
    except ProbeTimeout as exc:
        return ProbeOutcome("timeout", error=str(exc))
    except ProbeError as exc:
        return ProbeOutcome("error", error=str(exc))
    except TimeoutError:
        return ProbeOutcome("timeout", error=f"timed out after {spec.timeout_seconds:g}s")
    except (OSError, http.client.HTTPException) as exc:  # refused, reset, bad status line
        return ProbeOutcome("error", error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _lines(conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float,
           clock: Callable[[], float]) -> Iterable[tuple[float, str]]:
    """The response's lines with their arrival times; the overall deadline bounds a trickling server."""
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            raise ProbeTimeout("timed out reading the stream")
        if conn.sock is not None:
            conn.sock.settimeout(remaining)
        raw = response.readline(65536)
        if not raw:
            return
        yield clock(), raw.decode("utf-8", errors="replace")


class ProbeBaselines:
    """The first output digest per job for its model and request, in the state database."""

    COMPONENT = "engine_probe_baselines"
    DDL = ("CREATE TABLE IF NOT EXISTS engine_probe_baselines (job TEXT PRIMARY KEY, model TEXT NOT NULL, "
           "request_sha TEXT NOT NULL, digest TEXT NOT NULL, since_ms INTEGER NOT NULL)",)

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema(self.COMPONENT, 1, self.DDL)

    def compare(self, job: str, model: str, request_sha: str, digest: str, now_ms: int) -> bool:
        """True when ``digest`` differs from the baseline; stores it as the baseline when there is none or
        the model or request changed (a new model's output is a new baseline, not a corruption)."""
        with self.db.transaction() as cur:
            row = cur.execute("SELECT model, request_sha, digest FROM engine_probe_baselines WHERE job = ?",
                              (job,)).fetchone()
            if row is not None and row["model"] == model and row["request_sha"] == request_sha:
                return bool(row["digest"] != digest)
            cur.execute("INSERT INTO engine_probe_baselines(job, model, request_sha, digest, since_ms) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(job) DO UPDATE SET model = excluded.model, "
                        "request_sha = excluded.request_sha, digest = excluded.digest, "
                        "since_ms = excluded.since_ms", (job, model, request_sha, digest, now_ms))
            return False

    def baseline(self, job: str) -> str | None:
        """The stored digest of ``job``, if any."""
        rows = self.db.query("SELECT digest FROM engine_probe_baselines WHERE job = ?", (job,))
        return str(rows[0]["digest"]) if rows else None


@dataclass
class _State:
    last_start: float | None = None
    inflight: Future[ProbeOutcome] | None = None
    inflight_since: float = 0.0
    reported: bool = True  # the call in flight has been reported (it completed, or timed out)
    outcome: ProbeOutcome | None = None
    changed: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESULTS, 0))


class ProbeCollector(Collector):
    """Schedules one engine's probe and reports its last outcome; see the module docstring."""

    timeout_seconds = 1.0  # collect() never waits for the probe itself

    def __init__(self, spec: ProbeSpec, baselines: ProbeBaselines | None, *,
                 clock: Callable[[], float] = time.time,
                 prober: Callable[[ProbeSpec], ProbeOutcome] = run_probe,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.name = f"probe:{spec.targets['job']}"
        self.baselines = baselines
        self._clock = clock  # schedules probes (simulated in the demo harness)
        self._wall = wall  # times a probe in flight (real time: the HTTP call is real)
        self._prober = prober
        self._state = _State()
        self._worker = DaemonPool(1, f"probe-{self.name}")

    def collect(self) -> list[Sample]:
        """Harvest a finished probe, fail one past its timeout, start the next when due; the samples."""
        state, now = self._state, self._clock()
        if state.inflight is not None and not state.reported:
            if state.inflight.done():
                self._finish(state.inflight.result(), now)
            elif self._wall() - state.inflight_since > self.spec.timeout_seconds + 1.0:
                # The server accepted and never answered: the call keeps its thread, no next one starts.
                self._finish(ProbeOutcome("timeout", error="no answer within the probe timeout"), now)
        if ((state.inflight is None or state.inflight.done())
                and (state.last_start is None or now - state.last_start >= self.spec.interval_seconds)):
            state.last_start = now
            state.inflight_since = self._wall()
            state.reported = False
            state.inflight = self._worker.submit(self._prober, self.spec)
        return self.samples()

    def _finish(self, outcome: ProbeOutcome, now: float) -> None:
        state = self._state
        state.reported = True
        state.outcome = outcome
        state.counts[outcome.result] = state.counts.get(outcome.result, 0) + 1
        if outcome.result != "ok":
            log.info("engine probe failed", extra={"collector": self.name, "error": outcome.error})
            return
        if self.baselines is not None:
            state.changed = self.baselines.compare(self.spec.targets["job"], self.spec.model,
                                                   self.spec.prompt_sha, outcome.digest, round(now * 1000))

    def samples(self) -> list[Sample]:
        """The series of the last completed probe (none before the first completes, but the counters)."""
        base = {**self.spec.targets, "model": self.spec.model}
        out = [Sample(_labels("watchdog_engine_probe_requests_total", base, result=r), float(n))
               for r, n in sorted(self._state.counts.items())]
        out += [Sample(_labels("watchdog_engine_probe_slo_seconds", base, signal="ttft"), self.spec.ttft_slo_seconds),
                Sample(_labels("watchdog_engine_probe_slo_seconds", base, signal="tpot"), self.spec.tpot_slo_seconds)]
        outcome = self._state.outcome
        if outcome is None:
            return out
        ok = outcome.result == "ok"
        out.append(Sample(_labels("watchdog_engine_probe_success", base), 1.0 if ok else 0.0))
        if ok:
            out += [Sample(_labels("watchdog_engine_probe_ttft_seconds", base), outcome.ttft_seconds),
                    Sample(_labels("watchdog_engine_probe_tpot_seconds", base), outcome.tpot_seconds),
                    Sample(_labels("watchdog_engine_probe_output_info", base, digest=outcome.digest), 1.0),
                    Sample(_labels("watchdog_engine_probe_output_changed", base),
                           1.0 if self._state.changed else 0.0)]
        return out


def _labels(name: str, base: Mapping[str, str], **extra: str) -> Any:
    return make_labels({**base, **extra, "__name__": name})


def probe_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """One :class:`ProbeCollector` per ``engines[]`` entry with a ``probe`` section."""
    probed = [(e, e.probe) for e in settings.engines if e.probe is not None]
    if not probed:
        return []
    baselines = ProbeBaselines(context.db_for(settings.state_dir))
    clock = context.clock or time.time
    return [ProbeCollector(ProbeSpec.from_settings(e, p), baselines, clock=clock) for e, p in probed]


__all__ = ["ProbeBaselines", "ProbeCollector", "ProbeError", "ProbeOutcome", "ProbeSpec", "parse_stream",
           "probe_collectors", "run_probe"]

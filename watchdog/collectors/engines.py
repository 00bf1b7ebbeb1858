"""Engine collector: scrape each inference engine's Prometheus endpoint like a Prometheus server would.

One collector per configured endpoint (``engines:`` in the config), named ``engine:<job>``. Each tick:

- ``GET`` the endpoint with ``Accept-Encoding: gzip``; the whole exchange (connect, TLS, status line,
  headers, body) and the parsing are bounded by ``scrape_timeout_seconds`` as a whole (a server that
  drips bytes, even one per header line, cannot stretch it: the socket is shut at the deadline), and the body is
  capped at ``max_payload_bytes`` while reading, after decompression (a gzip bomb is cut off too).
- Parse with :mod:`watchdog.exposition`, dropping the ``*_created`` samples of counters and histograms
  (creation timestamps; no rule may use them, and they would double the series count of vLLM).
- Attach target labels with ``honor_labels: false`` semantics: ``job`` (the configured name),
  ``instance`` (host:port of the URL) and the configured extra ``labels``; a payload label that clashes
  with a target label is kept as ``exported_<name>``.
- Add the numeric config series of :mod:`watchdog.engines.config_series` (KV blocks, block size).
- Always return ``up``, ``scrape_duration_seconds`` and ``scrape_samples_scraped`` for the target (and
  their ``watchdog_engine_*`` copies, which the exporter exports instead), plus
  ``watchdog_engine_info{kind}``: a down, slow, garbage or oversized endpoint is ``up 0`` with no other
  series (its previous series go stale), and never affects another endpoint.

Reading (:func:`fetch`) is I/O; everything else (:func:`target_labels`, :func:`apply_target_labels`,
:func:`detect_kind`, :func:`scrape_result_samples`) is pure and tested with literal inputs.
"""

from __future__ import annotations

import http.client
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from watchdog.collectors.base import Collector, CollectorContext
from watchdog.config.settings import EngineKind, EngineSettings, Settings
from watchdog.engines.config_series import config_series
from watchdog.exposition import ExpositionError, parse_columns
from watchdog.infra.httpdeadline import Cutoff, UnsupportedURL, connection
from watchdog.model import METRIC_NAME, Labels, Sample, make_labels, metric_name

log = logging.getLogger(__name__)

ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
USER_AGENT = "inference-watchdog"
CHUNK_BYTES = 64 * 1024
KINDS = ("vllm", "sglang")
CACHE_SLACK = 1_000
DEADLINE_CHECK_EVERY = 4096


NO_ENGINE_METRICS = "answered, but no engine metrics"


class ScrapeError(Exception):
    """A scrape that produced no usable payload (connection, HTTP status, timeout, size, encoding)."""


def scrape_instance(url: str) -> str:
    """``host:port`` of the URL (the scheme's default port when none is given), like Prometheus'
    ``instance`` label."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


# --------------------------------------------------------------------------------------------------
# I/O: one HTTP GET with an overall deadline and a size cap


def fetch(url: str, timeout_seconds: float, max_bytes: int,
          clock: Callable[[], float] = time.monotonic) -> str:
    """The body of ``GET url`` as text; raises :class:`ScrapeError` on any failure (see module doc)."""
    try:
        conn, path = connection(url, timeout_seconds)
    except UnsupportedURL as exc:
        raise ScrapeError(str(exc)) from exc
    deadline = clock() + timeout_seconds
    with Cutoff(conn, timeout_seconds) as cutoff:  # closes the connection, and with it the response
        try:
            conn.request("GET", path, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": USER_AGENT,
                                               "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout_seconds:g}"})
            _set_remaining(conn, deadline, clock)
            response = conn.getresponse()
            if response.status != 200:
                raise ScrapeError(f"HTTP {response.status} {response.reason}")
            encoding = (response.getheader("Content-Encoding") or "").strip().lower()
            if encoding not in ("", "identity", "gzip"):
                raise ScrapeError(f"unsupported Content-Encoding {encoding!r}")
            declared = response.getheader("Content-Length")
            if encoding != "gzip" and declared and declared.isdigit() and int(declared) > max_bytes:
                raise ScrapeError(f"body of {declared} bytes exceeds the {max_bytes}-byte cap")
            body = _read_capped(conn, response, encoding == "gzip", max_bytes, deadline, clock)
            if cutoff.expired:  # the cut-off may look like an ordinary end of body
                raise TimeoutError("scrape deadline passed")
        except ScrapeError:
            if cutoff.expired:
                raise ScrapeError(f"timed out after {timeout_seconds:g}s") from None
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, timeout, bad status
            if isinstance(exc, TimeoutError) or cutoff.expired:
                raise ScrapeError(f"timed out after {timeout_seconds:g}s") from exc
            if isinstance(exc, ConnectionRefusedError):
                raise ScrapeError(f"connection refused: nothing listens on {scrape_instance(url)}") from exc
            raise ScrapeError(f"{type(exc).__name__}: {exc}") from exc
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"body is not UTF-8 text (byte {exc.start})") from exc


def _set_remaining(conn: http.client.HTTPConnection, deadline: float, clock: Callable[[], float]) -> None:
    remaining = deadline - clock()
    if remaining <= 0:
        raise TimeoutError("scrape deadline passed")
    if conn.sock is not None:
        conn.sock.settimeout(remaining)


def _read_capped(conn: http.client.HTTPConnection, response: http.client.HTTPResponse, gzipped: bool,
                 max_bytes: int, deadline: float, clock: Callable[[], float]) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    parts: list[bytes] = []
    size = 0
    while True:
        _set_remaining(conn, deadline, clock)
        chunk = response.read1(CHUNK_BYTES) if hasattr(response, "read1") else response.read(CHUNK_BYTES)
        if not chunk:
            break
        if inflater is not None:
            try:
                chunk = inflater.decompress(chunk, max_bytes + 1 - size)
            except zlib.error as exc:
                raise ScrapeError(f"bad gzip body: {exc}") from exc
            if inflater.unconsumed_tail:  # more output pending than the cap allows
                raise ScrapeError(f"decompressed body exceeds the {max_bytes}-byte cap")
        size += len(chunk)
        if size > max_bytes:
            raise ScrapeError(f"body exceeds the {max_bytes}-byte cap")
        parts.append(chunk)
    if inflater is not None:
        try:
            tail = inflater.flush()
        except zlib.error as exc:
            raise ScrapeError(f"bad gzip body: {exc}") from exc
        size += len(tail)
        if size > max_bytes:
            raise ScrapeError(f"decompressed body exceeds the {max_bytes}-byte cap")
        parts.append(tail)
        if not inflater.eof:
            raise ScrapeError("truncated gzip body")
    return b"".join(parts)


# --------------------------------------------------------------------------------------------------
# Pure parts


def target_labels(endpoint: EngineSettings) -> dict[str, str]:
    """The labels a Prometheus scrape of this endpoint attaches: extra labels, ``job``, ``instance``."""
    out = dict(endpoint.labels)
    out["job"] = endpoint.job
    out["instance"] = scrape_instance(endpoint.url)
    return out


def apply_target_labels(labels: Labels, targets: Mapping[str, str],
                        pairs: dict[tuple[str, str], tuple[str, str]] | None = None) -> Labels:
    """``labels`` with ``targets`` attached, honor_labels=false: clashing labels become ``exported_*``.

    As Prometheus' scrape loop does it: target labels win; each clashing payload value moves to the
    first free name among ``exported_<name>``, ``exported_exported_<name>``, ... (shortest names first).
    With ``pairs``, the result is built from the (name, value) pairs held there (added when new): an
    engine's hundreds of series repeat the same ``job``, ``instance``, ``model_name`` and ``le`` pairs,
    each then held once.
    """
    have = dict(labels)
    conflicts = [(name, have[name]) for name in targets if have.get(name, "") != ""]
    have.update(targets)
    for name, value in sorted(conflicts, key=lambda item: len(item[0])):
        exported = name
        while True:
            exported = f"exported_{exported}"
            if have.get(exported, "") == "":
                have[exported] = value
                break
    labels = make_labels(have)
    return labels if pairs is None else tuple([pairs.setdefault(pair, pair) for pair in labels])


@dataclass
class ScrapeCaches:
    """What one endpoint's scrapes reuse from the previous ones: series text -> its label set with the
    target labels attached, and the (name, value) pairs those label sets share.

    Bounded by the endpoint's own size: :meth:`bound` empties them all when one holds more than twice the
    lines of the last payload (plus :data:`CACHE_SLACK`), so an engine that invents label values at every
    scrape makes its caches start over every few scrapes instead of growing, and costs no other endpoint
    anything (each endpoint has its own).
    """

    series: dict[str, Labels] = field(default_factory=dict)
    """Series text -> relabelled labels (the parser's cache, see ``parse_exposition(relabel=...)``)."""
    pairs: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(name, value) pair -> the one instance of it that the cached label sets hold."""

    def bound(self, text: str) -> None:
        """Empty every cache when one holds more than ``2 * lines + CACHE_SLACK`` entries, ``lines``
        those of the page ``text`` (counted only when a cache holds more than ``CACHE_SLACK``)."""
        if len(self.series) <= CACHE_SLACK and len(self.pairs) <= CACHE_SLACK:
            return  # within the limit, whatever the page's length
        limit = 2 * text.count("\n") + CACHE_SLACK
        if len(self.series) > limit or len(self.pairs) > limit:
            self.series.clear()
            self.pairs.clear()


def detect_kind(names: Iterable[str]) -> str:
    """``vllm`` or ``sglang`` by the majority metric-name prefix; ``unknown`` when neither appears."""
    counts = dict.fromkeys(KINDS, 0)
    for name in names:
        prefix, sep, _ = name.partition(":")
        if sep and prefix in counts:
            counts[prefix] += 1
    best = max(KINDS, key=lambda k: counts[k])
    return best if counts[best] else "unknown"


# Prometheus' per-scrape series and the agent's own names for them. Rules read Prometheus' names (so a
# rule works here and in a Prometheus scraping the engine); the exporter never exports those (they are
# Prometheus' own for its targets) but exports the ``watchdog_engine_*`` copies.
SCRAPE_SERIES = (
    ("up", "watchdog_engine_up"),
    ("scrape_duration_seconds", "watchdog_engine_scrape_duration_seconds"),
    ("scrape_samples_scraped", "watchdog_engine_scrape_samples_scraped"),
)


def scrape_result_samples(targets: Mapping[str, str], up: bool, duration_seconds: float,
                          samples_scraped: int) -> list[Sample]:
    """The per-target series Prometheus synthesises for every scrape, under its names and under ours."""
    values = (1.0 if up else 0.0, duration_seconds, float(samples_scraped))
    return [Sample(make_labels({**targets, METRIC_NAME: name}), value)
            for names, value in zip(SCRAPE_SERIES, values, strict=True) for name in names]


def parse_payload(text: str, targets: Mapping[str, str], caches: ScrapeCaches | None = None,
                  deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> list[Sample]:
    """Every sample of ``text`` (``*_created`` dropped) with target labels; raises ExpositionError, or
    ScrapeError once ``clock()`` passes ``deadline`` (checked every few thousand lines).

    ``caches`` may be kept by the caller across scrapes of the same target (then bounded here after each
    parse): a series text seen before costs one dictionary lookup, the parser's own.
    """
    caches = caches or ScrapeCaches()
    pairs = caches.pairs

    def relabel(labels: Labels) -> Labels:  # once per new series text: the parser caches the result
        return apply_target_labels(labels, targets, pairs)

    check = None
    if deadline is not None:
        def check(parsed: int) -> None:  # before every DEADLINE_CHECK_EVERY lines
            if clock() > deadline:
                raise ScrapeError(f"parsing passed the scrape deadline after {parsed} samples")

    labels, values = parse_columns(text, drop_created=True, cache=caches.series, relabel=relabel, check=check,
                                   check_every=DEADLINE_CHECK_EVERY)
    caches.bound(text)
    return list(map(Sample, labels, values))


# --------------------------------------------------------------------------------------------------
# The collector


class EngineCollector(Collector):
    """Scrapes one endpoint per :meth:`collect`; see the module docstring for the contract."""

    def __init__(self, endpoint: EngineSettings, *, fetcher: Callable[[str, float, int], str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.name = f"engine:{endpoint.job}"
        # The runner's deadline sits a little past our own HTTP deadline, so a slow endpoint is reported
        # by us as up=0 rather than by the runner as a collector timeout.
        self.timeout_seconds = endpoint.scrape_timeout_seconds + 1.0
        self.background = True  # a slow engine must not stretch the tick (see collectors.base)
        self.targets = target_labels(endpoint)
        self._fetch = fetcher or (lambda url, timeout, cap: fetch(url, timeout, cap))
        self._clock = clock
        self.last_error = ""
        self.kind = endpoint.kind.value if endpoint.kind is not EngineKind.AUTO else "unknown"
        self._caches = ScrapeCaches()

    def collect(self) -> list[Sample]:
        """Scrape once; never raises for the endpoint's faults (they become ``up 0``)."""
        started = self._clock()
        try:
            text = self._fetch(self.endpoint.url, self.endpoint.scrape_timeout_seconds,
                               self.endpoint.max_payload_bytes)
            samples = parse_payload(text, self.targets, self._caches,
                                    deadline=started + self.endpoint.scrape_timeout_seconds, clock=self._clock)
        except (ScrapeError, ExpositionError) as exc:
            self.last_error = str(exc)
            log.info("engine scrape failed", extra={"collector": self.name, "url": redact_url(self.endpoint.url),
                                                    "error": self.last_error})
            return scrape_result_samples(self.targets, False, self._clock() - started, 0)
        self.last_error = ""
        detected = detect_kind(metric_name(sample.labels) for sample in samples)
        if detected == "unknown":
            self.last_error = (f"{NO_ENGINE_METRICS} (no vllm:* or sglang:* series among {len(samples)} "
                               "samples): is this the engine's own /metrics?")
        if self.endpoint.kind is EngineKind.AUTO:
            self.kind = detected
        scraped = len(samples)
        samples.extend(config_series(samples, self.targets))
        samples.append(Sample(make_labels({**self.targets, METRIC_NAME: "watchdog_engine_info", "kind": self.kind}),
                              1.0))
        samples.extend(scrape_result_samples(self.targets, True, self._clock() - started, scraped))
        return samples

    def call_failure(self) -> str:
        """The last scrape's failure: refused, timed out, an HTTP error, or no engine metrics in the page."""
        return self.last_error

    def failure_samples(self) -> list[Sample]:
        """What a scrape the runner gave up on (or the store refused) reports: ``up 0``."""
        return scrape_result_samples(self.targets, False, self.endpoint.scrape_timeout_seconds, 0)


def redact_url(url: str) -> str:
    """``url`` without its credentials (``user:password@`` becomes ``***@``), for logs."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def engine_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """One :class:`EngineCollector` per ``engines[]`` entry of the config."""
    del context  # engines need nothing injected: tests and the demo serve real HTTP on loopback
    return [EngineCollector(endpoint) for endpoint in settings.engines]


__all__ = [
    "EngineCollector",
    "ScrapeCaches",
    "ScrapeError",
    "apply_target_labels",
    "detect_kind",
    "engine_collectors",
    "fetch",
    "parse_payload",
    "redact_url",
    "scrape_instance",
    "scrape_result_samples",
    "target_labels",
]

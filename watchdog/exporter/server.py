"""The exporter's HTTP(S) server: ``/metrics`` (Prometheus text), ``/-/healthy``, ``/-/ready``.

Contract:
- Serving never blocks the evaluation loop (its own threads); a TLS handshake happens in the
  connection's thread, so a client that stalls its handshake holds only its own thread, and every
  connection has a socket timeout.
- ``/-/ready`` answers 200 only after the first completed tick (readiness is a callable injected by the
  agent); ``/-/healthy`` answers 200 while the process serves. Both stay open under basic auth (probes
  need no password and learn nothing); ``/metrics`` and ``/`` need the credentials when auth is on.
- ``/metrics`` is gzip-compressed when the scraper accepts it (Prometheus does).
- :meth:`ExporterServer.reconfigure` swaps TLS and auth settings atomically for new connections (SIGHUP
  with rotated certificates or password); the listen address is fixed for the process's life.
- Requests are counted in ``watchdog_exporter_requests_total{handler, code}`` (bounded label values).
- With ``api`` set (:class:`watchdog.exporter.api.QueryAPI`), ``/api/v1/*`` (GET and POST) answers
  Prometheus' query API behind the same TLS and basic auth (handler label ``api``).
- With ``verdicts`` set (a callable returning the agent's serving verdict source, or None while it has
  none), ``GET /api/v1/engines`` and ``GET /api/v1/engines/<job>/health`` answer the load-balancer
  views of :mod:`watchdog.serving.health` behind the same TLS and basic auth (handler label ``engines``).
- The exporter cannot be used to exhaust the agent's file descriptors or threads: at most
  ``max_connections`` connections at once and ``max_connections_per_client`` from one address (more are
  closed at accept and counted in ``watchdog_exporter_connections_rejected_total``), and each request
  must arrive whole (request line and headers) within ``request_deadline_seconds`` of the connection
  being ready for it, or the connection is cut (slowloris; an idle keep-alive connection the same).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.access import ExporterSecurity
from watchdog.exporter.collector import (
    SeriesLimiter,
    StoreCollector,
)
from watchdog.exporter.dcgm import DcgmProvider
from watchdog.exporter.security import load_security
from watchdog.exporter.selection import ExportSelection
from watchdog.infra import httpdeadline as deadlines
from watchdog.infra.httpdeadline import DeadlineHandle
from watchdog.infra.wakeable import WakeableServer, serve_in_thread, stop_and_close
from watchdog.model import Labels, Sample, metric
from watchdog.pods.directory import PodDirectory
from watchdog.serving import health as serving_health
from watchdog.serving.model import VerdictSource
from watchdog.store import Store

log = logging.getLogger(__name__)

# The classic text format every Prometheus 2.x parses (prometheus-client >= 0.22 labels its output 1.0.0).
CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONNECTION_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS = 128
MAX_CONNECTIONS_PER_CLIENT = 16
REQUEST_DEADLINE_SECONDS = 15.0
HANDLERS = {"/metrics": "metrics", "/-/healthy": "healthy", "/-/ready": "ready", "/": "root"}
OPEN_PATHS = frozenset({"/-/healthy", "/-/ready"})
GZIP_MIN_BYTES = 1024
GZIP_LEVEL = 1  # the fastest: half level 5's CPU for 12 % more bytes (benchmarks/exporter.py)
API_BODY_LIMIT_BYTES = 1 << 20


def parse_listen(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:9847``) to a (host, port) tuple; raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def accepts_gzip(accept_encoding: str | None) -> bool:
    """True when an ``Accept-Encoding`` header allows gzip (``q=0`` refuses it)."""
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=") if params.strip().startswith("q=") else "1"
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


class ExporterStats:
    """Request counters of the server, exported as self-metrics. Thread-safe."""

    def __init__(self) -> None:
        self._requests: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self.last_scrape_duration_seconds = 0.0
        self.connections_rejected = 0

    def count(self, handler: str, code: int) -> None:
        """Count one answered request."""
        with self._lock:
            self._requests[(handler, str(code))] += 1

    def self_samples(self) -> list[Sample]:
        """``watchdog_exporter_requests_total`` and ``watchdog_exporter_scrape_duration_seconds``."""
        with self._lock:
            out = [Sample(metric("watchdog_exporter_requests_total", handler=h, code=c), float(n))
                   for (h, c), n in sorted(self._requests.items())]
        out.append(Sample(metric("watchdog_exporter_scrape_duration_seconds"), self.last_scrape_duration_seconds))
        out.append(Sample(metric("watchdog_exporter_connections_rejected_total"), float(self.connections_rejected)))
        return out


class _Server(WakeableServer, ThreadingHTTPServer):
    """ThreadingHTTPServer that wraps each connection in TLS inside the connection's own thread."""

    daemon_threads = True
    request_queue_size = 128  # a burst of connections is accepted (and capped) rather than left in the backlog
    exporter: ExporterServer
    _open: Counter[str]
    _open_lock: threading.Lock

    def process_request(self, request: Any, client_address: Any) -> None:
        """Admit the connection if the caps allow (see module docstring), else close it at once."""
        exporter, client = self.exporter, str(client_address[0])
        with self._open_lock:
            admitted = (sum(self._open.values()) < exporter.max_connections
                        and self._open[client] < exporter.max_connections_per_client)
            if admitted:
                self._open[client] += 1
        if not admitted:
            exporter.stats.connections_rejected += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(str(client_address[0]))

    def _release(self, client: str) -> None:
        with self._open_lock:
            self._open[client] -= 1
            if self._open[client] <= 0:
                del self._open[client]

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(CONNECTION_TIMEOUT_SECONDS)
        context = self.exporter.security.tls
        if context is None:
            super().finish_request(request, client_address)
            return
        try:
            wrapped = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("exporter TLS handshake failed", extra={"client": client_address[0], "error": str(exc)})
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("exporter connection error", exc_info=True, extra={"client": client_address[0]})


class _Server6(_Server):
    """The same on an IPv6 address (``[::]:9847`` listens on both families where the OS allows)."""

    address_family = socket.AF_INET6


class ExporterServer:
    """A threaded HTTP(S) server exposing ``registry``; ``start()`` / ``stop()``; ``port`` after start."""

    def __init__(
        self,
        registry: CollectorRegistry,
        address: str,
        ready: Callable[[], bool],
        security: ExporterSecurity | None = None,
        stats: ExporterStats | None = None,
        limiter: SeriesLimiter | None = None,
        selection: ExportSelection | None = None,
        page: Callable[[], bytes] | None = None,
    ) -> None:
        """``page`` renders ``/metrics`` (default: ``generate_latest`` over ``registry``)."""
        self.registry = registry
        self.page = page or (lambda: generate_latest(self.registry))
        self.limiter = limiter
        self.selection = selection
        self.host, self.port = parse_listen(address)
        self.ready = ready
        self.security = security or ExporterSecurity()
        self.stats = stats or ExporterStats()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.api: Any = None  # a watchdog.exporter.api.QueryAPI serving /api/v1/*, when set
        self.verdicts: Callable[[], VerdictSource | None] | None = None  # serves /api/v1/engines*, when set
        self.max_connections = MAX_CONNECTIONS
        self.max_connections_per_client = MAX_CONNECTIONS_PER_CLIENT
        self.request_deadline_seconds = REQUEST_DEADLINE_SECONDS

    @property
    def url(self) -> str:
        """Base URL of the running server (``https://host:port`` under TLS)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.security.scheme}://{host}:{self.port}"

    def reconfigure(self, security: ExporterSecurity) -> None:
        """Use new TLS/auth settings for connections accepted from now on."""
        if (security.tls is None) != (self.security.tls is None):
            log.warning("exporter TLS switched on or off by reload; scrapers must change scheme",
                        extra={"scheme": security.scheme})
        self.security = security

    def apply(self, prepared: PreparedExporter) -> None:
        """Switch to settings loaded by :func:`prepare_exporter` (cannot fail)."""
        self.reconfigure(prepared.security)
        if self.limiter is not None:
            self.limiter.set_limits(prepared.max_series_per_metric, prepared.max_series_per_job)
        if self.selection is not None:
            self.selection.pass_through_engine_series = prepared.pass_through_engine_series

    def reload(self, section: ExporterSettings, environ: Mapping[str, str] | None = None) -> None:
        """Re-read certificates, key and password and apply new caps from the ``exporter`` settings.

        Everything is loaded before anything changes: on :class:`ExporterConfigError` the running
        settings stay."""
        self.apply(prepare_exporter(section, environ))

    def render_metrics(self) -> bytes:
        """The Prometheus text exposition of the page; times itself for the self-metric."""
        started = time.monotonic()
        body = self.page()
        self.stats.last_scrape_duration_seconds = time.monotonic() - started
        return body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "inference-watchdog"
            sys_version = ""
            timeout = CONNECTION_TIMEOUT_SECONDS
            _deadline: DeadlineHandle | None = None

            def handle_one_request(self) -> None:
                # The request line and headers must arrive within the deadline (do_GET disarms it); the
                # process's one shared deadline thread keeps it, not a thread per request.
                self._deadline = deadlines.schedule(exporter.request_deadline_seconds, self._cut)
                try:
                    super().handle_one_request()
                finally:
                    deadlines.cancel(self._deadline)

            def _cut(self) -> None:
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def do_POST(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                if self._deadline is not None:
                    deadlines.cancel(self._deadline)
                path, _, query_string = self.path.partition("?")
                is_engines = exporter.verdicts is not None and serving_health.handles(path)
                is_api = not is_engines and exporter.api is not None and path.startswith("/api/v1/")
                handler = "engines" if is_engines else "api" if is_api else HANDLERS.get(path, "other")
                auth = exporter.security.auth
                if auth is not None and path not in OPEN_PATHS and not auth.check(self.headers.get("Authorization")):
                    self._send(handler, 401, b"unauthorized\n", "text/plain",
                               {"WWW-Authenticate": 'Basic realm="inference-watchdog", charset="UTF-8"'})
                elif is_engines and exporter.verdicts is not None:
                    if self.command != "GET":
                        # Read what the client sends first: a body left unread makes the close a reset, and
                        # the client would see no answer at all.
                        self.rfile.read(min(int(self.headers.get("Content-Length") or 0), API_BODY_LIMIT_BYTES))
                        self._send(handler, 405, b"method not allowed\n", "text/plain")
                    else:
                        answer = serving_health.respond(exporter.verdicts(), path)
                        self._send(handler, answer.code, answer.body, answer.content_type)
                elif is_api:
                    length = min(int(self.headers.get("Content-Length") or 0), API_BODY_LIMIT_BYTES)
                    body = self.rfile.read(length) if self.command == "POST" and length > 0 else b""
                    answer = exporter.api.handle(self.command, path, query_string, body,
                                                 self.headers.get("Content-Type") or "")
                    self._send(handler, answer.code, answer.body, answer.content_type)
                elif self.command == "POST":
                    self._send(handler, 405, b"method not allowed\n", "text/plain")
                elif path == "/metrics":
                    body = exporter.render_metrics()
                    headers = {}
                    if accepts_gzip(self.headers.get("Accept-Encoding")) and len(body) >= GZIP_MIN_BYTES:
                        body = gzip.compress(body, compresslevel=GZIP_LEVEL)
                        headers["Content-Encoding"] = "gzip"
                    self._send(handler, 200, body, CONTENT_TYPE_TEXT, headers)
                elif path == "/-/healthy":
                    self._send(handler, 200, b"inference-watchdog is healthy.\n", "text/plain")
                elif path == "/-/ready":
                    if exporter.ready():
                        self._send(handler, 200, b"inference-watchdog is ready.\n", "text/plain")
                    else:
                        self._send(handler, 503, b"inference-watchdog is starting.\n", "text/plain")
                elif path == "/":
                    body = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
                    self._send(handler, 200, body, "text/html")
                else:
                    self._send(handler, 404, b"not found\n", "text/plain")

            def _send(self, handler: str, code: int, body: bytes, content_type: str,
                      headers: Mapping[str, str] | None = None) -> None:
                # Counted before the response leaves, so a client that got it can already see it counted.
                exporter.stats.count(handler, code)
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("exporter request: " + format, *args)

        return Handler

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises OSError when the address is taken."""
        server_class = _Server6 if ":" in self.host else _Server
        self._server = server_class((self.host, self.port), self._handler())
        self._server.exporter = self
        self._server._open = Counter()
        self._server._open_lock = threading.Lock()
        self.port = self._server.server_address[1]
        self._thread = serve_in_thread(self._server, "exporter")

    def stop(self) -> None:
        """Stop accepting (at once: the accept loop is woken, not polled) and close the socket; requests
        in progress finish in their own daemon threads."""
        if self._server is not None:
            stop_and_close(self._server, self._thread)
            self._server, self._thread = None, None


@dataclass(frozen=True)
class PreparedExporter:
    """The ``exporter`` settings loaded and checked (certificates, key, password read), ready to apply."""

    security: ExporterSecurity
    max_series_per_metric: int
    max_series_per_job: int
    pass_through_engine_series: bool


def prepare_exporter(section: ExporterSettings, environ: Mapping[str, str] | None = None) -> PreparedExporter:
    """Load what the ``exporter`` settings name; raises :class:`ExporterConfigError`, changes nothing."""
    return PreparedExporter(load_security(section, environ), section.max_series_per_metric,
                            section.max_series_per_job, section.pass_through_engine_series)


def exporter_for_store(
    store: Store,
    listen: str,
    ready: Callable[[], bool],
    section: ExporterSettings | None = None,
    clock: Callable[[], float] = time.time,
    environ: Mapping[str, str] | None = None,
    pods: PodDirectory | None = None,
    node: str = "",
    pod_labels: Callable[[], bool] = lambda: True,
) -> ExporterServer:
    """An exporter of ``store`` on ``listen`` configured by the ``exporter`` settings (None: the schema's
    defaults): TLS, basic auth and cardinality caps; its own request and drop counters are exported too.
    Raises :class:`watchdog.exporter.access.ExporterConfigError` on a bad section. ``pods`` adds namespace,
    pod and container to the exported GPU and engine series while ``pod_labels()`` (the agent's
    ``pod_resources.pod_labels``, so a reload applies) is true; ``exporter.dcgm_compatible`` adds the
    ``DCGM_FI_*`` fields (``node`` is their ``Hostname``)."""
    prepared = prepare_exporter(section or section_settings(ExporterSettings, "exporter"), environ)
    limiter = SeriesLimiter(prepared.max_series_per_metric, prepared.max_series_per_job)
    selection = ExportSelection(prepared.pass_through_engine_series)
    stats = ExporterStats()
    registry = CollectorRegistry(auto_describe=False)
    section = section or section_settings(ExporterSettings, "exporter")
    providers = [stats.self_samples]
    if section.dcgm_compatible:
        providers.append(DcgmProvider(store, node or socket.gethostname(), clock, pods, pod_labels).samples)
    relabel: Callable[[list[Labels]], list[Labels]] | None = None
    if pods is not None:
        directory = pods

        def relabel(keys: list[Labels]) -> list[Labels]:
            return directory.relabel_keys(keys) if pod_labels() else keys
    collector = StoreCollector(store, providers=providers, clock=clock, limiter=limiter, selection=selection,
                               relabel=relabel)
    registry.register(collector)
    return ExporterServer(registry, listen, ready=ready, security=prepared.security, stats=stats, limiter=limiter,
                          selection=selection, page=collector.render)

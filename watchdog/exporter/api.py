"""Prometheus' HTTP query API over the agent's own store, served on the exporter's port.

Endpoints (GET, and for those in :data:`POST_ENDPOINTS` POST with an
``application/x-www-form-urlencoded`` body, whose values come before the URL's as in Go's
``r.FormValue``): ``/api/v1/query``, ``/api/v1/query_range``, ``/api/v1/series``, ``/api/v1/labels``,
``/api/v1/label/<name>/values``, ``/api/v1/rules``, ``/api/v1/alerts``, and what Grafana's Prometheus
data source asks at connect and while a query is edited: ``/api/v1/status/buildinfo`` (the Prometheus
API version followed, :data:`PROMETHEUS_API_VERSION`, with the agent's own version as ``revision``),
``/api/v1/metadata`` (``metric``, ``limit``: type and help of every stored metric name as the
``/metrics`` page declares them, ``unit`` empty as the text format has none) and
``/api/v1/query_exemplars`` (always empty: the agent keeps no exemplars).

Contract: every answer is Prometheus 2.42's JSON: ``{"status": "success", "data": ...}``, or
``{"status": "error", "errorType": ..., "error": ...}`` with its HTTP code: ``bad_data`` 400 (bad
parameter or query), ``execution`` 422 (evaluation error), ``timeout`` 503 (past ``timeout``, default
:data:`DEFAULT_TIMEOUT_SECONDS`), 404 for an unknown ``/api/v1/`` path, 405 for other methods. Times are
Unix seconds or RFC 3339; durations seconds or Prometheus durations. Subqueries without a step use the
agent's tick. The store holds what the agent keeps (15 minutes at 1 s by default), so this is a
data source for one node's recent past (docs/dashboards.md). Authentication and TLS are the
exporter's (``server.py`` calls :meth:`QueryAPI.handle` after its auth check). One addition to
Prometheus' shapes: with ``suppression`` set (the agent sets it), each alert of ``/api/v1/alerts`` also
has Alertmanager's ``status``: ``{"state": "active"|"suppressed", "silencedBy": [silence ids],
"inhibitedBy": [fingerprints of firing alerts]}``; clients that do not know the field ignore it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from watchdog.golang.gomath import format_api_value
from watchdog.model import Alert, AlertState, Labels, metric_name
from watchdog.promql import EvalOptions, PromQLError, evaluate, parse_query
from watchdog.promql import nodes as n
from watchdog.promql.format import api_timestamp, to_api_json
from watchdog.promql.values import Scalar, VectorSample
from watchdog.rules.durations import DurationError, parse_duration

PREFIX = "/api/v1/"
POST_ENDPOINTS = frozenset({"query", "query_range", "query_exemplars", "series", "labels"})
"""The endpoints Prometheus 2.42 also answers by POST; the others (label values, metadata, rules, alerts,
status) answer POST with 405, as its router does."""
GET_ENDPOINTS = POST_ENDPOINTS | {"metadata", "rules", "alerts", "status/buildinfo"}
PROMETHEUS_API_VERSION = "2.42.0"
"""The Prometheus whose HTTP API and PromQL semantics the agent follows (docs/promql.md)."""
DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_POINTS_PER_SERIES = 11_000
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MIN_MS = -(1 << 62)
_MAX_MS = 1 << 62
_ERROR_CODES = {"bad_data": 400, "execution": 422, "timeout": 503, "internal": 500}


class APIError(Exception):
    """An error answer: Prometheus' ``errorType`` and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Response:
    """What the server sends: status code, JSON body, content type."""

    code: int
    body: bytes
    content_type: str = "application/json"


AlertSuppression = Callable[[Sequence[Alert], int], Mapping[str, tuple[Sequence[str], Sequence[str]]]]
"""Given alerts and now (ms): for each suppressed one, by fingerprint, the ids of the silences matching it
and the fingerprints of the firing alerts inhibiting it
(:meth:`watchdog.notify.decisions.muting.Muting.suppression`)."""


class QueryAPI:
    """Answers ``/api/v1/*`` requests; ``store`` is read, ``engine`` (a callable returning the current
    :class:`watchdog.rules.engine.RuleEngine` or None) gives ``rules`` and ``alerts``. ``sample_limit``
    bounds the samples one evaluation holds and the points a range query returns (``--query.max-samples``).
    ``suppression`` adds Alertmanager's ``status`` (``state`` active or suppressed, ``silencedBy``,
    ``inhibitedBy``) to each alert of ``/api/v1/alerts``, a field Prometheus' shape does not have."""

    def __init__(self, store: Any, engine: Callable[[], Any] = lambda: None,
                 clock: Callable[[], float] = time.time, subquery_step_ms: int = 1000,
                 lookback_ms: int = 300_000, sample_limit: int | None = None,
                 suppression: AlertSuppression | None = None) -> None:
        self.store = store
        self.engine = engine
        self.suppression = suppression
        self.clock = clock
        self.subquery_step_ms = subquery_step_ms
        self.lookback_ms = lookback_ms
        self.sample_limit = sample_limit

    def handle(self, method: str, path: str, query_string: str, body: bytes = b"",
               content_type: str = "") -> Response:
        """One request to a path under ``/api/v1/``."""
        endpoint = path[len(PREFIX):]
        if method not in ("GET", "POST") or (method == "POST" and endpoint not in POST_ENDPOINTS
                                             and self._known(endpoint)):
            return Response(405, b"Method Not Allowed\n", "text/plain")
        form: dict[str, list[str]] = {}
        if method == "POST" and content_type.split(";")[0].strip() == "application/x-www-form-urlencoded":
            form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        for key, values in parse_qs(query_string, keep_blank_values=True).items():
            form.setdefault(key, []).extend(values)
        try:
            data = self._dispatch(endpoint, form)
        except APIError as exc:
            return _json(_ERROR_CODES.get(exc.kind, 400),
                         {"status": "error", "errorType": exc.kind, "error": exc.message})
        if data is None:
            return Response(404, b"404 page not found\n", "text/plain")
        return _json(200, {"status": "success", "data": data})

    @staticmethod
    def _known(endpoint: str) -> bool:
        return endpoint in GET_ENDPOINTS or re.fullmatch(r"label/[^/]+/values", endpoint) is not None

    def _dispatch(self, endpoint: str, form: Mapping[str, list[str]]) -> Any:
        if endpoint == "query":
            return self._query(form)
        if endpoint == "query_range":
            return self._query_range(form)
        if endpoint == "series":
            return self._series(form)
        if endpoint == "labels":
            return self._labels(form)
        match = re.fullmatch(r"label/([^/]+)/values", endpoint)
        if match:
            return self._label_values(match.group(1), form)
        if endpoint == "rules":
            return self._rules(form)
        if endpoint == "alerts":
            return self._alerts()
        if endpoint == "status/buildinfo":
            return _buildinfo()
        if endpoint == "metadata":
            return self._metadata(form)
        if endpoint == "query_exemplars":
            return self._query_exemplars(form)
        return None

    # ------------------------------------------------------------------------------- queries

    def _now_ms(self) -> int:
        return round(self.clock() * 1000)

    def _parse(self, form: Mapping[str, list[str]]) -> Any:
        try:
            return parse_query(_value(form, "query"))
        except PromQLError as exc:
            raise APIError("bad_data", f'invalid parameter "query": {exc}') from None

    def _deadline(self, form: Mapping[str, list[str]]) -> float:
        timeout = DEFAULT_TIMEOUT_SECONDS
        if _value(form, "timeout"):
            timeout = min(timeout, _duration_param(form, "timeout") / 1000)
        return time.monotonic() + timeout

    def _evaluate(self, query: Any, t_ms: int, deadline: float, range_ms: tuple[int, int] | None = None) -> Any:
        """One evaluation at ``t_ms``; in a range query, ``range_ms`` is its ``(start, end)``, which
        ``@ start()`` and ``@ end()`` resolve to (Prometheus' ``PreprocessExpr``)."""
        try:
            options = EvalOptions(self.lookback_ms, self.subquery_step_ms, deadline,
                                  sample_limit=self.sample_limit, range_ms=range_ms)
            return evaluate(query, self.store, t_ms, options)
        except PromQLError as exc:
            raise APIError(exc.kind if exc.kind in _ERROR_CODES else "execution", exc.message) from None

    def _query(self, form: Mapping[str, list[str]]) -> Any:
        t_ms = _time_param(form, "time", self._now_ms())
        deadline = self._deadline(form)
        query = self._parse(form)
        return to_api_json(self._evaluate(query, t_ms, deadline))

    def _query_range(self, form: Mapping[str, list[str]]) -> Any:
        start = _time_param(form, "start", None)
        end = _time_param(form, "end", None)
        if end < start:
            raise APIError("bad_data", "end timestamp must not be before start time")
        step = _duration_param(form, "step")
        if step <= 0:
            raise APIError("bad_data", "zero or negative query resolution step widths are not accepted. "
                                       "Try a positive integer")
        if (end - start) // step > MAX_POINTS_PER_SERIES:
            raise APIError("bad_data", "exceeded maximum resolution of 11,000 points per timeseries. "
                                       "Try decreasing the query resolution (?step=XX)")
        deadline = self._deadline(form)
        query = self._parse(form)
        if query.value_type not in (n.VECTOR, n.SCALAR):
            kind = {n.MATRIX: "range vector", n.STRING: "string"}.get(query.value_type, query.value_type)
            raise APIError("bad_data", f'invalid expression type "{kind}" for range query, must be Scalar '
                                       "or instant Vector")
        series: dict[Labels, list[list[Any]]] = {}
        returned = 0
        for t_ms in range(start, end + 1, step):
            value = self._evaluate(query, t_ms, deadline, (start, end))
            points: Iterable[tuple[Labels, float]]
            if isinstance(value, Scalar):
                points = [((), value.value)]
            else:
                points = [(s.labels, s.value) for s in value if isinstance(s, VectorSample)]
            returned += len(points)
            if self.sample_limit is not None and returned > self.sample_limit:
                raise APIError("execution", "query processing would load too many samples into memory in "
                                            "query execution")
            for labels, v in points:
                series.setdefault(labels, []).append([api_timestamp(t_ms), format_api_value(v)])
        return {"resultType": "matrix",
                "result": [{"metric": dict(labels), "values": values}
                           for labels, values in sorted(series.items())]}

    # ------------------------------------------------------------------------------- metadata

    def _matching_series(self, form: Mapping[str, list[str]], required: bool) -> list[Labels]:
        """Label sets of stored series with a sample in [start, end], matching any ``match[]``."""
        start = _time_param(form, "start", _MIN_MS)
        end = _time_param(form, "end", _MAX_MS)
        selectors = form.get("match[]", [])
        if required and not selectors:
            raise APIError("bad_data", "no match[] parameter provided")
        candidates: list[Any] = []
        if selectors:
            seen: set[Labels] = set()
            for text in selectors:
                for series in self.store.select(_selector_matchers(text)):
                    if series.labels not in seen:
                        seen.add(series.labels)
                        candidates.append(series)
        else:
            candidates = self.store.all_series()
        out = []
        for series in candidates:
            times, _ = series.window(start, end)
            if len(times):
                out.append(series.labels)
        return sorted(out)

    def _series(self, form: Mapping[str, list[str]]) -> Any:
        return [dict(labels) for labels in self._matching_series(form, required=True)]

    def _labels(self, form: Mapping[str, list[str]]) -> Any:
        return sorted({name for labels in self._matching_series(form, required=False) for name, _ in labels})

    def _label_values(self, name: str, form: Mapping[str, list[str]]) -> Any:
        if not _LABEL_NAME.match(name):
            raise APIError("bad_data", f"invalid label name: {json.dumps(name)}")
        values = {dict(labels).get(name, "") for labels in self._matching_series(form, required=False)}
        values.discard("")
        return sorted(values)

    def _metadata(self, form: Mapping[str, list[str]]) -> Any:
        """Prometheus 2.42's ``metricMetadata``: ``limit`` metrics (negative: all), one metric with
        ``metric`` (2.42 has no ``limit_per_metric``; one entry per metric here anyway)."""
        limit = _int_param(form, "limit")
        wanted = _value(form, "metric")
        names = {metric_name(series.labels) for series in self.store.all_series()}
        out: dict[str, list[dict[str, str]]] = {}
        for name in sorted(names):
            if limit >= 0 and len(out) >= limit:
                break
            key, entry = metadata_of(name)
            if not key or (wanted and key != wanted):
                continue
            entries = out.setdefault(key, [])
            if entry not in entries:
                entries.append(entry)
        return out

    def _query_exemplars(self, form: Mapping[str, list[str]]) -> Any:
        self._parse(form)  # a bad query is bad_data, as in Prometheus
        _time_param(form, "start", _MIN_MS)
        _time_param(form, "end", _MAX_MS)
        return []

    # ------------------------------------------------------------------------------- rules

    def _rules(self, form: Mapping[str, list[str]]) -> Any:
        engine = self.engine()
        kind = _value(form, "type").lower()
        if kind not in ("", "alert", "record"):
            raise APIError("bad_data", f'invalid parameter "type": unsupported type {_value(form, "type")!r}')
        groups = []
        for status in engine.status() if engine is not None else []:
            rules = []
            for rule_status in status.rules:
                rule = rule_status.rule
                is_alert = hasattr(rule, "alert")
                if (kind == "alert" and not is_alert) or (kind == "record" and is_alert):
                    continue
                rules.append(_rule_json(rule_status, status.stats))
            groups.append({
                "name": status.group.name, "file": status.group.file, "rules": rules,
                "interval": (status.group.interval_ms or self.subquery_step_ms) / 1000,
                "limit": status.group.limit,
                "evaluationTime": status.stats.last_duration_seconds,
                "lastEvaluation": _rfc3339(status.stats.last_evaluation_ms),
            })
        return {"groups": groups}

    def _alerts(self) -> Any:
        engine = self.engine()
        alerts = [] if engine is None else [a for a in engine.alerts() if a.state is not AlertState.INACTIVE]
        if self.suppression is None:
            return {"alerts": [_alert_json(a) for a in alerts]}
        suppressed = self.suppression(alerts, self._now_ms())
        out = []
        for alert in alerts:
            silenced_by, inhibited_by = suppressed.get(alert.fingerprint, ((), ()))
            out.append({**_alert_json(alert), "status": {
                "state": "suppressed" if silenced_by or inhibited_by else "active",
                "silencedBy": list(silenced_by), "inhibitedBy": list(inhibited_by)}})
        return {"alerts": out}


# ----------------------------------------------------------------------------------- helpers


def _json(code: int, document: Any) -> Response:
    return Response(code, json.dumps(document, separators=(",", ":")).encode("utf-8"))


def _buildinfo() -> dict[str, str]:
    from watchdog import __version__

    return {"version": PROMETHEUS_API_VERSION, "revision": f"inference-watchdog {__version__}", "branch": "",
            "buildUser": "inference-watchdog", "buildDate": "", "goVersion": ""}


def metadata_of(name: str) -> tuple[str, dict[str, str]]:
    """The metadata key and entry Prometheus records for series ``name`` from the ``/metrics`` page
    (its ``# TYPE``/``# HELP``): ``("", {})`` for the series Prometheus writes itself (``up``...)."""
    from watchdog.exporter.collector import family_of
    from watchdog.exporter.page import family_header
    from watchdog.exporter.selection import PROMETHEUS_SCRAPE_SERIES

    if name in PROMETHEUS_SCRAPE_SERIES or not name:
        return "", {}
    family, typ, doc = family_of(name)
    type_line = family_header(family, typ, doc).splitlines()[1]
    key, _, declared = type_line[len("# TYPE "):].rpartition(" ")
    return key, {"type": "unknown" if declared == "untyped" else declared, "help": doc, "unit": ""}


def _int_param(form: Mapping[str, list[str]], key: str) -> int:
    text = _value(form, key)
    if not text:
        return -1
    try:
        return int(text, 10)
    except ValueError:
        raise APIError("bad_data", f"{key} must be a number") from None


def _value(form: Mapping[str, list[str]], key: str) -> str:
    values = form.get(key)
    return values[0] if values else ""


def parse_api_time(text: str) -> int:
    """Prometheus' ``parseTime``: Unix seconds (float) or RFC 3339, to ms; raises ValueError."""
    try:
        seconds = float(text)
    except ValueError:
        candidate = text.strip()
        if candidate.endswith(("Z", "z")):
            candidate = candidate[:-1] + "+00:00"
        candidate = re.sub(r"(\.\d{6})\d+", r"\1", candidate)  # Python keeps microseconds
        moment = dt.datetime.fromisoformat(candidate)
        if moment.tzinfo is None:
            raise ValueError("no time zone") from None
        return round(moment.timestamp() * 1000)
    if not math.isfinite(seconds):
        raise ValueError("not finite")
    return round(seconds * 1000)


def _time_param(form: Mapping[str, list[str]], key: str, default: int | None) -> int:
    text = _value(form, key)
    if text == "":
        if default is None:
            raise APIError("bad_data", f'invalid parameter "{key}": cannot parse "" to a valid timestamp')
        return default
    try:
        return parse_api_time(text)
    except ValueError:
        raise APIError("bad_data",
                       f'invalid parameter "{key}": cannot parse "{text}" to a valid timestamp') from None


def _duration_param(form: Mapping[str, list[str]], key: str) -> int:
    """Prometheus' ``parseDuration``: float seconds or a duration (``15s``), to ms."""
    text = _value(form, key)
    try:
        seconds = float(text)
        if math.isfinite(seconds) and abs(seconds) < 9.2e9:
            return round(seconds * 1000)
    except ValueError:
        try:
            return parse_duration(text)
        except DurationError:
            pass
    raise APIError("bad_data", f'invalid parameter "{key}": cannot parse "{text}" to a valid duration')


def _selector_matchers(text: str) -> Any:
    try:
        query = parse_query(text)
    except PromQLError as exc:
        raise APIError("bad_data", f'invalid parameter "match[]": {exc}') from None
    expr = n.unwrap_parens(query.expr)
    if not isinstance(expr, n.VectorSelector):
        raise APIError("bad_data", f'invalid parameter "match[]": {text} is not a series selector')
    return expr.matchers


def _rfc3339(t_ms: int | None) -> str:
    if t_ms is None:
        return "0001-01-01T00:00:00Z"
    moment = dt.datetime.fromtimestamp(t_ms / 1000, tz=dt.timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    return text + (f".{fraction}" if fraction else "") + "Z"


def _go_float_e(value: float) -> str:
    """Go ``strconv.FormatFloat(v, 'e', -1, 64)`` (the alert ``value`` field)."""
    from watchdog.golang.gostrconv import format_float

    return format_float(value, "e", -1)


def _alert_json(alert: Any) -> dict[str, Any]:
    return {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "state": alert.state.value,
        "activeAt": _rfc3339(alert.active_at_ms),
        "value": _go_float_e(alert.value),
    }


def _rule_json(status: Any, stats: Any) -> dict[str, Any]:
    rule = status.rule
    health = "unknown" if stats.last_evaluation_ms is None else ("err" if status.last_error else "ok")
    common = {
        "name": rule.name,
        "query": rule.expr,
        "labels": dict(rule.labels),
        "health": health,
        "evaluationTime": stats.last_duration_seconds,
        "lastEvaluation": _rfc3339(stats.last_evaluation_ms),
    }
    if status.last_error:
        common["lastError"] = status.last_error
    if not hasattr(rule, "alert"):
        return {**common, "type": "recording"}
    active = [a for a in status.alerts if a.state is not AlertState.INACTIVE]
    state = AlertState.FIRING if any(a.state is AlertState.FIRING for a in active) else \
        AlertState.PENDING if active else AlertState.INACTIVE
    return {
        "state": state.value, **common,
        "duration": rule.for_ms / 1000,
        "keepFiringFor": rule.keep_firing_for_ms / 1000,
        "annotations": dict(rule.annotations),
        "alerts": [_alert_json(a) for a in active],
        "type": "alerting",
    }

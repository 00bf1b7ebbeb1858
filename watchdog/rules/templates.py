"""Alert label and annotation templates, rendered exactly as Prometheus 2.42 renders them.

Contract:
- The template text is prefixed with Prometheus' definitions (``$labels``, ``$externalLabels``,
  ``$externalURL``, ``$value``) and parsed as Go ``text/template`` under the name ``__alert_<alertname>``,
  with Prometheus' function map (``humanize``, ``humanize1024``, ``humanizeDuration``,
  ``humanizePercentage``, ``humanizeTimestamp``, ``printf``, ``toUpper``, ``toLower``, ``title``,
  ``reReplaceAll``, ``match``, ``query``/``first``/``label``/``value``/``sortByLabel``, ``args``,
  ``safeHtml``, ``stripPort``, ``stripDomain``, ``graphLink``, ``tableLink``, ``toTime``,
  ``parseDuration``, ``pathPrefix``, ``externalURL``) plus Go's builtins.
- :func:`check_template` raises :class:`TemplateParseError` for what Prometheus rejects at load time
  (syntax errors, unknown functions, undefined variables).
- :func:`expand` never raises: a failing template renders as ``<error expanding template: ...>``, the
  text Prometheus puts in the annotation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote_plus, urlsplit

from watchdog.golang import gofmt, gomath, gonet, goregexp, gostrconv, gostrings
from watchdog.golang.gotemplate import (
    MISSING,
    FuncError,
    GoFunc,
    GoStruct,
    Template,
    TemplateExecError,
    TemplateParseError,
    parse,
)
from watchdog.golang.gotime import GoTime
from watchdog.rules.durations import DurationError, parse_duration

__all__ = [
    "TEMPLATE_DEFS",
    "QueryFunc",
    "TemplateContext",
    "TemplateParseError",
    "check_template",
    "expand",
    "template_name",
]

TEMPLATE_DEFS = (
    "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}"
    "{{$externalURL := .ExternalURL}}{{$value := .Value}}"
)
_DATA_TYPE = (
    "struct { Labels map[string]string; ExternalLabels map[string]string; ExternalURL string; "
    "Value float64 }"
)
_NIL_DEREF = "runtime error: invalid memory address or nil pointer dereference"

QueryFunc = Callable[[str], list[tuple[dict[str, str], float]]]
"""Runs an instant PromQL query at the evaluation time: (labels incl. ``__name__``, value) pairs.
Raises any exception whose text becomes the template error."""


class QueryResult(list):  # type: ignore[type-arg,unused-ignore]
    """Prometheus' ``queryResult``: a list of ``*sample`` structs."""

    GO_TYPE = "template.queryResult"


class SafeHTML(str):
    """``html/template.HTML`` (a string type)."""

    GO_TYPE = "template.HTML"


class AnyMap(dict):  # type: ignore[type-arg,unused-ignore]
    """``map[string]interface {}`` (what ``args`` returns)."""

    GO_TYPE = "map[string]interface {}"


def template_name(alertname: str) -> str:
    """Prometheus' template name for an alerting rule."""
    return "__alert_" + alertname


def _to_float(value: Any) -> float:
    """Prometheus' ``convertToFloat``."""
    if isinstance(value, bool) or value is None or value is MISSING:
        raise FuncError(f"can't convert {gofmt.go_type(None if value is MISSING else value)} to float")
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, str) and not isinstance(value, SafeHTML):
        try:
            return gostrconv.parse_float(value)
        except ValueError as exc:
            raise FuncError(str(exc)) from exc
    raise FuncError(f"can't convert {gofmt.go_type(value)} to float")


def _g4(value: float) -> str:
    return gofmt.sprintf("%.4g", [value])


def humanize(arg: Any) -> str:
    """1234567 → ``1.235M``, 0.0012 → ``1.2m``."""
    v = _to_float(arg)
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    if abs(v) >= 1:
        return _divided(v, 1000, ("k", "M", "G", "T", "P", "E", "Z", "Y"))
    return _small_prefix_scaled(v)


def humanize1024(arg: Any) -> str:
    """1048576 → ``1Mi``."""
    v = _to_float(arg)
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    return _divided(v, 1024, ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"))


def _small_prefix_scaled(v: float) -> str:
    """A magnitude below 1 multiplied by 1000 per SI prefix (m, u, n, ...) until at least 1, printed
    with that prefix (Prometheus' humanize and humanizeDuration for small values)."""
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return _g4(v) + prefix


def _divided(v: float, base: int, prefixes: tuple[str, ...]) -> str:
    """``v`` divided by ``base`` once per prefix while at least ``base``, printed with the last prefix."""
    prefix = ""
    for p in prefixes:
        if abs(v) < base:
            break
        prefix = p
        v /= base
    return _g4(v) + prefix


def humanize_duration(arg: Any) -> str:
    """90 → ``1m 30s``, 0.25 → ``250ms``."""
    v = _to_float(arg)
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    if v == 0:
        return _g4(v) + "s"
    if abs(v) >= 1:
        sign = ""
        if v < 0:
            sign, v = "-", -v
        # Go's int64(v) saturates to MinInt64 on amd64 for values past the int64 range.
        duration = int(v) if v < 2.0**63 else -(2**63)
        seconds = gomath.int_rem(duration, 60)
        minutes = gomath.int_rem(gomath.int_quo(duration, 60), 60)
        hours = gomath.int_rem(gomath.int_quo(gomath.int_quo(duration, 60), 60), 24)
        days = gomath.int_quo(gomath.int_quo(gomath.int_quo(duration, 60), 60), 24)
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g4(v)}s"
    return f"{_small_prefix_scaled(v)}s"


def humanize_percentage(arg: Any) -> str:
    """0.1234 → ``12.34%``."""
    return _g4(_to_float(arg) * 100) + "%"


def _float_to_time(v: float) -> GoTime:
    nanos = v * 1e9
    if nanos > 2**63 - 1 or nanos < -(2**63):
        raise FuncError(f"{gofmt.format_value(v)} cannot be represented as a nanoseconds timestamp "
                        "since it overflows int64")
    ns = int(nanos)
    ms = abs(ns) // 1_000_000 * (1 if ns >= 0 else -1)  # Go's integer division truncates toward zero
    return GoTime(ms)


def humanize_timestamp(arg: Any) -> str:
    """Unix seconds → ``2009-11-10 23:00:00 +0000 UTC``."""
    v = _to_float(arg)
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    return _float_to_time(v).go_string()


def to_time(arg: Any) -> GoTime:
    """Unix seconds → a time value."""
    v = _to_float(arg)
    if math.isnan(v) or math.isinf(v):
        raise FuncError("value is NaN or Inf")
    return _float_to_time(v)


def _go_regex(pattern: str) -> Any:
    """The unanchored Go regex; a bad pattern fails the template function with Go's wording."""
    try:
        return goregexp.compile_unanchored(pattern)
    except goregexp.RegexError as exc:
        raise FuncError(str(exc)) from exc


def re_replace_all(pattern: str, repl: str, text: str) -> str:
    """Go's ``regexp.MustCompile(pattern).ReplaceAllString(text, repl)``."""
    regex = _go_regex(pattern)
    out: list[str] = []
    last_end = 0
    for match in regex.finditer(text):
        start, end = match.span()
        out.append(text[last_end:start])
        if end > last_end or start == 0:
            out.append(goregexp.expand(repl, match))
        last_end = end
    out.append(text[last_end:])
    return "".join(out)


def re_match(pattern: str, text: str) -> bool:
    """Go's ``regexp.MatchString`` (unanchored)."""
    return _go_regex(pattern).search(text) is not None


def strip_port(host_port: str) -> str:
    """``host:port`` → ``host``; anything else unchanged."""
    split = gonet.split_host_port(host_port)
    return host_port if split is None else split[0]


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def strip_domain(host_port: str) -> str:
    """``node1.example.com:9100`` → ``node1:9100``; IP addresses unchanged."""
    split = gonet.split_host_port(host_port)
    host, port = (host_port, "") if split is None else split
    if _is_ip(host):
        return host_port
    host = host.split(".")[0]
    if port:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return host


def _sample(labels: Mapping[str, str], value: float) -> GoStruct:
    return GoStruct({"Labels": dict(labels), "Value": value}, "*template.sample", pointer=True)


def _first(result: QueryResult) -> GoStruct:
    if result:
        return result[0]  # type: ignore[no-any-return,unused-ignore]
    raise FuncError("first() called on vector with no elements")


def _sample_field(sample: Any, name: str) -> Any:
    if not isinstance(sample, GoStruct):
        raise FuncError(_NIL_DEREF)
    return sample.fields[name]


def _sort_by_label(label: str, result: QueryResult) -> QueryResult:
    return QueryResult(sorted(result, key=lambda s: s.fields["Labels"].get(label, "")))


def _parse_duration_seconds(text: str) -> float:
    try:
        return parse_duration(text) / 1000.0
    except DurationError as exc:
        raise FuncError(str(exc).replace("'", '"')) from exc


def _func_map(query: QueryFunc | None, external_url: str | None) -> dict[str, GoFunc]:
    def run_query(expr: str) -> QueryResult:
        if query is None:
            raise FuncError("query is not available here")
        try:
            rows = query(expr)
        except Exception as exc:  # the query's own error becomes the template error, as in Prometheus
            raise FuncError(str(exc)) from exc
        return QueryResult(_sample(labels, value) for labels, value in rows)

    def path_prefix() -> str:
        if external_url is None:
            raise FuncError(_NIL_DEREF)
        return urlsplit(external_url).path

    def external() -> str:
        if external_url is None:
            raise FuncError(_NIL_DEREF)
        return external_url

    return {
        "query": GoFunc(run_query, ("string",)),
        "first": GoFunc(_first, ("template.queryResult",)),
        "label": GoFunc(lambda name, s: _sample_field(s, "Labels").get(name, ""),
                        ("string", "*template.sample")),
        "value": GoFunc(lambda s: _sample_field(s, "Value"), ("*template.sample",)),
        "strvalue": GoFunc(lambda s: _sample_field(s, "Labels").get("__value__", ""),
                           ("*template.sample",)),
        "args": GoFunc(lambda *a: AnyMap({f"arg{i}": v for i, v in enumerate(a)}), (), "any"),
        "reReplaceAll": GoFunc(re_replace_all, ("string", "string", "string")),
        "safeHtml": GoFunc(lambda text: SafeHTML(text), ("string",)),
        "match": GoFunc(re_match, ("string", "string")),
        "title": GoFunc(gostrings.title, ("string",)),
        "toUpper": GoFunc(gostrings.to_upper, ("string",)),
        "toLower": GoFunc(gostrings.to_lower, ("string",)),
        "graphLink": GoFunc(lambda e: f"/graph?g0.expr={quote_plus(e, safe='')}&g0.tab=0", ("string",)),
        "tableLink": GoFunc(lambda e: f"/graph?g0.expr={quote_plus(e, safe='')}&g0.tab=1", ("string",)),
        "sortByLabel": GoFunc(_sort_by_label, ("string", "template.queryResult")),
        "stripPort": GoFunc(strip_port, ("string",)),
        "stripDomain": GoFunc(strip_domain, ("string",)),
        "humanize": GoFunc(humanize, ("any",)),
        "humanize1024": GoFunc(humanize1024, ("any",)),
        "humanizeDuration": GoFunc(humanize_duration, ("any",)),
        "humanizePercentage": GoFunc(humanize_percentage, ("any",)),
        "humanizeTimestamp": GoFunc(humanize_timestamp, ("any",)),
        "toTime": GoFunc(to_time, ("any",)),
        "pathPrefix": GoFunc(path_prefix, ()),
        "externalURL": GoFunc(external, ()),
        "parseDuration": GoFunc(_parse_duration_seconds, ("string",)),
    }


_NAMES_ONLY = _func_map(None, None)


@lru_cache(maxsize=4096)
def _parsed(text: str, alertname: str) -> Template:
    return parse(TEMPLATE_DEFS + text, template_name(alertname), _NAMES_ONLY)


def check_template(text: str, alertname: str) -> None:
    """Raise :class:`TemplateParseError` when Prometheus would reject the template at load time."""
    _parsed(text, alertname)


@dataclass(frozen=True)
class TemplateContext:
    """What a template can see: the alert's series labels and value, and the evaluation environment."""

    labels: Mapping[str, str]
    value: float
    external_labels: Mapping[str, str]
    external_url: str | None = None
    query: QueryFunc | None = None


def expand(text: str, alertname: str, ctx: TemplateContext) -> str:
    """Render one label or annotation template; errors render as Prometheus renders them."""
    if "{{" not in text:
        return text
    name = template_name(alertname)
    try:
        tmpl = _parsed(text, alertname)
    except TemplateParseError as exc:
        return f"<error expanding template: error parsing template {name}: {exc}>"
    data = GoStruct(
        {
            "Labels": dict(ctx.labels),
            "ExternalLabels": dict(ctx.external_labels),
            "ExternalURL": ctx.external_url or "",
            "Value": float(ctx.value),
        },
        _DATA_TYPE,
    )
    try:
        return tmpl.execute(data, _func_map(ctx.query, ctx.external_url))
    except TemplateExecError as exc:
        return f"<error expanding template: error executing template {name}: {exc}>"
    except RecursionError:
        return f"<error expanding template: error executing template {name}: too deeply nested>"

"""``inference-watchdog query [--metrics-file F]... [--rules PATH]... [--at T] [--json] EXPR``.

An instant PromQL query, evaluated by our evaluator, over:
- ``--metrics-file F`` (repeatable): Prometheus text exposition captures (a vLLM or SGLang ``/metrics``
  page, ``-`` for stdin). Every sample is stored at the query time T, whatever timestamp the file
  carries, so a capture from last week answers "what did this page say"; ``rate()`` over a single
  capture is empty, as it would be in Prometheus after one scrape. ``_created`` samples are kept.
- without ``--metrics-file``: the live agent, through Prometheus' query API on its exporter
  (``POST --url/api/v1/query``, default ``http://127.0.0.1:9847``; ``https://user:password@host:port``
  for an exporter behind TLS and basic auth), over the agent's whole store (15 minutes at 1 s by
  default), so ``rate(engine:prompt_tokens_total[1m])`` works; the agent's own rules are already applied.

On captures, the shipped rule pack (``rules/*.yaml``, as ``rules eval`` uses) is evaluated once at T
before the query, so recording rules (``engine:*``) and ``ALERTS`` are queryable; ``--rules PATH``
(repeatable, globs allowed) replaces it and ``--no-rules`` turns rules off. An empty answer to a query
that names ``engine:*`` series says why on stderr. ``--at`` takes RFC 3339 or Unix seconds.

Output: ``--json`` prints exactly Prometheus' ``/api/v1/query`` response,
``{"status": "success", "data": {"resultType": ..., "result": [...]}}``, or
``{"status": "error", "errorType": "bad_data"|"execution", "error": "..."}`` with exit code 1.
Without ``--json``: one line per sample, ``name{labels} => value``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.promql.limits import COMMAND_BUDGET, QueryBudget, stopped_because

DEFAULT_URL = "http://127.0.0.1:9847"
SCRAPE_TIMEOUT_SECONDS = 10.0
SCRAPE_LIMIT_BYTES = 64 * 1024 * 1024


class QueryCommandError(Exception):
    """A problem with the command's inputs; ``kind`` is the Prometheus API errorType."""

    def __init__(self, message: str, kind: str = "bad_data") -> None:
        super().__init__(message)
        self.kind = kind


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``query`` command."""
    parser = sub.add_parser(
        "query",
        help="instant PromQL query over metrics files or the live node, rules applied",
        description="Evaluate one instant PromQL query with the agent's own evaluator.",
        epilog="An expression that starts with '-' goes after '--': query -- '-delta(x[5m])'. "
               "Exit status: 0 on success, 1 on any error.",
    )
    parser.add_argument("expr", metavar="EXPR", help="the PromQL expression")
    parser.add_argument("--metrics-file", action="append", default=[], metavar="F",
                        help="Prometheus text exposition file ('-' = stdin); repeatable")
    parser.add_argument("--rules", action="append", default=[], metavar="PATH",
                        help="rule file or glob, evaluated once at T before the query on captures; "
                             "repeatable (default: the shipped rule pack)")
    parser.add_argument("--no-rules", action="store_true",
                        help="do not evaluate any rules on captures (raw series only)")
    parser.add_argument("--at", default=None, metavar="T",
                        help="evaluation time: RFC 3339 or Unix seconds (default: now)")
    parser.add_argument("--json", action="store_true",
                        help="print the Prometheus /api/v1/query response")
    parser.add_argument("--url", default=DEFAULT_URL,
                        help=f"the agent's exporter, asked through /api/v1/query when no --metrics-file is "
                             f"given (default {DEFAULT_URL}; user:password@ for basic auth)")
    parser.set_defaults(func=_query)


def parse_time(text: str | None, now: float) -> int:
    """``--at`` as integer milliseconds: RFC 3339 (``2024-05-01T12:00:00Z``) or Unix seconds."""
    if text is None:
        return round(now * 1000)
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds):
            raise QueryCommandError(f"invalid time {text!r}")
        return round(seconds * 1000)
    candidate = text.strip()
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = dt.datetime.fromisoformat(candidate)
    except ValueError:
        raise QueryCommandError(
            f"invalid time {text!r}: use RFC 3339 (2024-05-01T12:00:00Z) or Unix seconds"
        ) from None
    if moment.tzinfo is None:
        raise QueryCommandError(f"invalid time {text!r}: RFC 3339 needs a time zone (Z or +hh:mm)")
    return round(moment.timestamp() * 1000)


@dataclass(frozen=True)
class MetricsText:
    """One exposition document and where it came from (for error messages)."""

    source: str
    text: str


def run_query(
    expr: str,
    documents: Sequence[MetricsText],
    rule_paths: Sequence[str],
    t_ms: int,
    budget: QueryBudget = COMMAND_BUDGET,
) -> Any:
    """Load ``documents`` into a fresh store at ``t_ms``, apply ``rule_paths`` once, evaluate ``expr``.

    Pure apart from reading rule files. Each rule and the query run under ``budget`` (CPU seconds and
    samples held at once). Returns the evaluator's value; raises :class:`QueryCommandError` (inputs, a
    rule stopped by the budget) or :class:`watchdog.promql.PromQLError` (the query; past the budget its
    message says which limit stopped it).
    """
    from watchdog.promql import parse_query

    query = parse_query(expr)  # fail fast on a bad query, before reading anything
    return evaluate_within(query, load_capture(documents, rule_paths, t_ms, budget), t_ms, budget)


def evaluate_within(query: Any, store: Any, t_ms: int, budget: QueryBudget = COMMAND_BUDGET) -> Any:
    """Evaluate a parsed ``query`` over ``store`` under ``budget``; past it, the
    :class:`watchdog.promql.PromQLError` says which limit stopped it."""
    from watchdog.promql import PromQLError, evaluate

    try:
        return evaluate(query, store, t_ms, budget.options())
    except PromQLError as exc:
        raise PromQLError(stopped_because(exc, budget), exc.kind) from None


def load_capture(documents: Sequence[MetricsText], rule_paths: Sequence[str], t_ms: int,
                 budget: QueryBudget = COMMAND_BUDGET) -> Any:
    """A fresh store holding ``documents`` at ``t_ms`` with ``rule_paths`` applied once (each rule under
    ``budget``)."""
    from watchdog.exposition import ExpositionError, parse_exposition
    from watchdog.store import Store

    store = Store(retention_ms=24 * 3600 * 1000, max_points=16, max_series=2_000_000)
    for document in documents:
        try:
            for labels, value, _timestamp in parse_exposition(document.text):
                store.append(labels, t_ms, value)
        except ExpositionError as exc:
            raise QueryCommandError(f"{document.source}: {exc}") from None
    if rule_paths:
        _apply_rules(rule_paths, store, t_ms, budget)
    return store


def unknown_names(expr: str, known: Sequence[str]) -> list[str]:
    """``no series named X; did you mean Y?`` for each metric name the query selects that ``known`` (the
    names in the store) lacks, nearest name first; [] when every name exists."""
    from watchdog.infra.suggest import closest
    from watchdog.promql import parse_query

    notes = []
    for selector in parse_query(expr).selectors():
        name = selector.name
        if name and name not in known:
            match = closest(name, known)
            notes.append(f"no series named {name}" + (f"; did you mean {match}?" if match else ""))
    return list(dict.fromkeys(notes))


def _apply_rules(rule_paths: Sequence[str], store: Any, t_ms: int, budget: QueryBudget) -> None:
    from watchdog.rules.engine import RuleEngine
    from watchdog.rules.loader import RuleLoadError, load_rule_files

    try:
        ruleset = load_rule_files(rule_paths)
    except RuleLoadError as exc:
        raise QueryCommandError(str(exc)) from None
    engine = RuleEngine(ruleset, store, rule_timeout_s=budget.cpu_seconds, sample_limit=budget.max_samples)
    engine.evaluate(t_ms)
    for failure in engine.failures_at(t_ms):
        if failure.reason in ("timeout", "samples"):
            # A rule the budget stopped leaves its series out: say so rather than answer without them.
            limit = f": stopped at the sample limit of {budget.max_samples}" if failure.reason == "samples" else ""
            raise QueryCommandError(f"rule {failure.rule!r} of group {failure.group!r}: {failure.error}{limit}",
                                    "execution")


def _read_documents(paths: Sequence[str]) -> list[MetricsText]:
    documents: list[MetricsText] = []
    for path in paths:
        if path == "-":
            documents.append(MetricsText("<stdin>", sys.stdin.read()))
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                documents.append(MetricsText(path, handle.read()))
        except OSError as exc:
            raise QueryCommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    return documents


def ask_agent(url: str, expr: str, t_ms: int) -> dict[str, Any]:
    """``POST url/api/v1/query`` (form body, as Prometheus' own clients send it); the decoded answer,
    ``status`` ``success`` or ``error``. Raises :class:`QueryCommandError` when the agent cannot be read."""
    import base64
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    base = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname
                          else parts.netloc, path=parts.path.removesuffix("/metrics").rstrip("/"))
    endpoint = urllib.parse.urlunsplit(base) + "/api/v1/query"
    body = urllib.parse.urlencode({"query": expr, "time": f"{t_ms / 1000:.3f}"}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    if parts.username is not None:
        secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    request = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_SECONDS) as response:
            raw: bytes = response.read(SCRAPE_LIMIT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raw = exc.read(SCRAPE_LIMIT_BYTES + 1)
        if not raw.startswith(b"{"):
            raise QueryCommandError(f"{endpoint}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise QueryCommandError(
            f"cannot reach the agent's query API at {endpoint} ({exc}); is the agent running? "
            "Use --metrics-file to query a capture instead"
        ) from None
    try:
        answer: dict[str, Any] = json.loads(raw)
    except ValueError:
        raise QueryCommandError(f"{endpoint}: not a Prometheus API answer") from None
    return answer


def why_empty(expr: str, rules_applied: bool, live: bool) -> str | None:
    """A note for an empty answer to a query that names ``engine:*`` series, else None."""
    if "engine:" not in expr:
        return None
    if live:
        return ("note: no engine:* series in the agent's store: they come from its recording rules "
                "(rules.paths must include the shipped rules/engines.yaml) over a scraped engine "
                "(engines: in the config); `inference-watchdog check` shows both")
    if not rules_applied:
        return ("note: engine:* series are written by recording rules, and no rules were evaluated "
                "(--no-rules, or no shipped rule pack found); drop --no-rules or pass --rules "
                "rules/engines.yaml")
    return ("note: the rules ran but wrote no engine:* series: the capture holds no metrics of a "
            "supported engine (vLLM, SGLang) that the rules read")


def _unparsable(expr: str) -> bool:
    """Whether the parser itself rejects ``expr`` (then a caret can show where)."""
    import promql_parser

    try:
        promql_parser.parse(expr)
    except ValueError:
        return True
    return False


def _query(args: argparse.Namespace) -> int:
    from watchdog.promql import PromQLError, api_text_lines, parse_query, to_api_json
    from watchdog.promql.parse import caret_lines, error_offset
    from watchdog.promtool.eval_input import default_rule_files

    live = not args.metrics_file
    rule_paths: list[str] = []
    try:
        t_ms = parse_time(args.at, time.time())
        if live:
            if args.rules or args.no_rules:
                raise QueryCommandError("--rules and --no-rules apply to --metrics-file captures; the "
                                        "live agent answers with its own rules applied")
            answer = ask_agent(args.url, args.expr, t_ms)
            if answer.get("status") != "success":
                raise QueryCommandError(str(answer.get("error")), str(answer.get("errorType", "bad_data")))
            data = answer["data"]
        else:
            rule_paths = [] if args.no_rules else (args.rules or default_rule_files())
            query = parse_query(args.expr)  # fail fast on a bad query, before reading anything
            store = load_capture(_read_documents(args.metrics_file), rule_paths, t_ms)
            data = to_api_json(evaluate_within(query, store, t_ms))
    except (QueryCommandError, PromQLError) as exc:
        kind = exc.kind
        message = str(exc)
        if args.json:
            _print_json({"status": "error", "errorType": kind, "error": message})
        else:
            print(f"error: {message}", file=sys.stderr)
            if isinstance(exc, PromQLError) and kind == "bad_data" and _unparsable(args.expr):
                for line in caret_lines(args.expr, error_offset(args.expr)):
                    print(line, file=sys.stderr)
        return 1
    if data.get("resultType") in ("vector", "matrix") and not data.get("result"):
        rules_note = why_empty(args.expr, live or bool(rule_paths), live)
        names = [] if live or (rules_note and not rule_paths) else unknown_names(args.expr, store.names())
        note = "; ".join(names) or rules_note  # a misspelt name first, unless no rules could write it
        if note:
            print(note, file=sys.stderr)
    if args.json:
        _print_json({"status": "success", "data": data})
    else:
        for line in api_text_lines(data):
            print(line)
    return 0


def _print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write("\n")

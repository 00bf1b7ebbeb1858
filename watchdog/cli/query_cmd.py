"""``inference-watchdog query [--metrics-file F]... [--rules PATH]... [--at T] [--json] EXPR``.

An instant PromQL query, evaluated by our evaluator, over:
- ``--metrics-file F`` (repeatable): Prometheus text exposition captures (a vLLM or SGLang ``/metrics``
  page, ``-`` for stdin). Every sample is stored at the query time T, whatever timestamp the file
  carries, so a capture from last week answers "what did this page say"; ``rate()`` over a single
  capture is empty, as it would be in Prometheus after one scrape. ``_created`` samples are kept.
- without ``--metrics-file``: the live node, by scraping its exporter once
  (``--url``, default ``http://127.0.0.1:9847/metrics``), which serves every stored series and ``ALERTS``.

``--rules PATH`` (repeatable, globs allowed) evaluates those rule files once at T before the query, so
recording rules (``engine:*``) and ``ALERTS`` are queryable. ``--at`` takes RFC 3339 or Unix seconds.

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

DEFAULT_URL = "http://127.0.0.1:9847/metrics"
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
                        help="rule file or glob, evaluated once at T before the query; repeatable")
    parser.add_argument("--at", default=None, metavar="T",
                        help="evaluation time: RFC 3339 or Unix seconds (default: now)")
    parser.add_argument("--json", action="store_true",
                        help="print the Prometheus /api/v1/query response")
    parser.add_argument("--url", default=DEFAULT_URL,
                        help=f"exporter to read when no --metrics-file is given (default {DEFAULT_URL})")
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
) -> Any:
    """Load ``documents`` into a fresh store at ``t_ms``, apply ``rule_paths`` once, evaluate ``expr``.

    Pure apart from reading rule files. Returns the evaluator's value; raises :class:`QueryCommandError`
    (inputs) or :class:`watchdog.promql.PromQLError` (the query).
    """
    from watchdog.engines.exposition import ExpositionError, parse_exposition
    from watchdog.promql import evaluate, parse_query
    from watchdog.store import Store

    query = parse_query(expr)  # fail fast on a bad query, before reading anything
    store = Store(retention_ms=24 * 3600 * 1000, max_points=16, max_series=2_000_000)
    for document in documents:
        try:
            for labels, value, _timestamp in parse_exposition(document.text):
                store.append(labels, t_ms, value)
        except ExpositionError as exc:
            raise QueryCommandError(f"{document.source}: {exc}") from None
    if rule_paths:
        _apply_rules(rule_paths, store, t_ms)
    return evaluate(query, store, t_ms)


def _apply_rules(rule_paths: Sequence[str], store: Any, t_ms: int) -> None:
    from watchdog.rules.engine import RuleEngine
    from watchdog.rules.loader import RuleLoadError, load_rule_files

    try:
        ruleset = load_rule_files(rule_paths)
    except RuleLoadError as exc:
        raise QueryCommandError(str(exc)) from None
    RuleEngine(ruleset, store).evaluate(t_ms)


def _read_documents(paths: Sequence[str], url: str) -> list[MetricsText]:
    if not paths:
        return [MetricsText(url, _scrape(url))]
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


def _scrape(url: str) -> str:
    """One GET of the node's exporter (the live mode)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_SECONDS) as response:
            body: bytes = response.read(SCRAPE_LIMIT_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise QueryCommandError(
            f"cannot read the live node at {url} ({exc}); is the agent running? "
            "Use --metrics-file to query a capture instead"
        ) from None
    if len(body) > SCRAPE_LIMIT_BYTES:
        raise QueryCommandError(f"{url}: response larger than {SCRAPE_LIMIT_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


def _query(args: argparse.Namespace) -> int:
    from watchdog.promql import PromQLError, to_api_json, to_text_lines

    try:
        t_ms = parse_time(args.at, time.time())
        documents = _read_documents(args.metrics_file, args.url)
        value = run_query(args.expr, documents, args.rules, t_ms)
    except (QueryCommandError, PromQLError) as exc:
        kind = exc.kind
        message = str(exc)
        if args.json:
            _print_json({"status": "error", "errorType": kind, "error": message})
        else:
            print(f"error: {message}", file=sys.stderr)
        return 1
    if args.json:
        _print_json({"status": "success", "data": to_api_json(value)})
    else:
        for line in to_text_lines(value):
            print(line)
    return 0


def _print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write("\n")

"""Bridge from ``promql-parser``'s AST to our nodes, with validation against Prometheus 2.42.

``promql-parser`` (a Rust port) parses and type-checks; it follows a newer Prometheus than the 2.42
oracle, so this module rejects what 2.42 lacks (``limitk``, ``info()``, ``{a="1" or b="2"}``, ...) with
an error naming the construct, and registers the 2.42-only ``holt_winters``.
"""

from __future__ import annotations

import datetime as dt
import re
from contextvars import ContextVar
from functools import lru_cache

import promql_parser as pp

from watchdog.golang.goregexp import RegexError, compile_anchored
from watchdog.model import METRIC_NAME
from watchdog.promql import nodes as n
from watchdog.promql.errors import PromQLError
from watchdog.promql.lex242 import prepare, string_end
from watchdog.store import Matcher

VECTOR_FUNCTIONS = (
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "days_in_month", "day_of_month", "day_of_week", "day_of_year", "deg", "delta",
    "deriv", "exp", "floor", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_replace",
    "label_join", "ln", "log10", "log2", "last_over_time", "max_over_time", "min_over_time", "minute",
    "month", "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "sgn", "sin", "sinh", "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
    "sum_over_time", "tan", "tanh", "timestamp", "vector", "year",
)

# Every function of Prometheus 2.42 and its return type (argument types are checked by the parser).
FUNCTION_RETURN_TYPES: dict[str, str] = {
    **dict.fromkeys(VECTOR_FUNCTIONS, n.VECTOR),
    "pi": n.SCALAR,
    "scalar": n.SCALAR,
    "time": n.SCALAR,
}

AGGREGATIONS = frozenset((
    "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile",
    "stddev", "stdvar", "group", "count_values",
))

_MATCH_OPS = {
    str(pp.MatchOp.Equal): "=",
    str(pp.MatchOp.NotEqual): "!=",
    str(pp.MatchOp.Re): "=~",
    str(pp.MatchOp.NotRe): "!~",
}

_CARDINALITIES = {
    str(pp.VectorMatchCardinality.OneToOne): n.CARD_ONE_TO_ONE,
    str(pp.VectorMatchCardinality.ManyToOne): n.CARD_MANY_TO_ONE,
    str(pp.VectorMatchCardinality.OneToMany): n.CARD_ONE_TO_MANY,
    str(pp.VectorMatchCardinality.ManyToMany): n.CARD_MANY_TO_MANY,
}

_AT_MARKERS: ContextVar[dict[int, int] | None] = ContextVar("_AT_MARKERS", default=None)
"""While a query is converted: marker ``@`` times (ms) -> the real times (see ``lex242.prepare``)."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ONE_MS = dt.timedelta(milliseconds=1)
_INT64_MAX = (1 << 63) - 1


def _register_holt_winters() -> None:
    """Teach the parser Prometheus 2.42's ``holt_winters`` (renamed in Prometheus 3)."""
    try:
        pp.register_extra_functions([
            pp.Function(
                "holt_winters",
                [pp.ValueType.Matrix, pp.ValueType.Scalar, pp.ValueType.Scalar],
                pp.ValueType.Vector,
            )
        ])
    except ValueError:
        # Already known to this parser build (registered earlier or built in): nothing to add.
        return


_register_holt_winters()


MAX_QUERY_CHARS = 16_384
MAX_NESTING = 64
MAX_OPERATORS = 200
_OPERATOR_WORDS = frozenset(("and", "or", "unless", "atan2"))
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def check_query_size(text: str) -> None:
    """Reject, before the Rust parser sees it, a query that could crash it or exhaust Python's recursion:
    longer than ``MAX_QUERY_CHARS``, brackets nested deeper than ``MAX_NESTING``, or more than
    ``MAX_OPERATORS`` operators (a chain ``a + a + ...`` nests as deep as it is long; the parser dies
    with SIGSEGV around five thousand). Linear in the text; string literals are skipped."""
    if len(text) > MAX_QUERY_CHARS:
        raise PromQLError(f"query is {len(text)} characters long; the limit is {MAX_QUERY_CHARS}")
    depth = deepest = operators = 0
    i, size = 0, len(text)
    while i < size:
        ch = text[i]
        if ch in "\"'`":
            close = text.find(ch, i + 1)
            while close != -1 and ch != "`" and _escaped(text, close):
                close = text.find(ch, close + 1)
            i = size if close == -1 else close + 1
            continue
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
        elif ch in "+-*/%^<>=!":
            operators += 1
        elif ch.isalpha() or ch in "_:":
            word = _WORD.match(text, i)
            if word is not None:
                operators += word.group(0) in _OPERATOR_WORDS
                i = word.end()
                continue
        i += 1
    if deepest > MAX_NESTING:
        raise PromQLError(f"query nests brackets {deepest} deep; the limit is {MAX_NESTING}")
    if operators > MAX_OPERATORS:
        raise PromQLError(f"query has {operators} operators; the limit is {MAX_OPERATORS}")


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and text[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


@lru_cache(maxsize=2048)
def parse_expr(text: str) -> n.Expr:
    """Parse and validate ``text``; raises :class:`PromQLError` naming the problem (also for a query
    too large or too deep to parse safely, see :func:`check_query_size`)."""
    if not text.strip():
        raise PromQLError("empty query")
    check_query_size(text)
    try:
        prepared = prepare(text)
        try:
            root = pp.parse(prepared.text)
        except ValueError as exc:
            raise PromQLError(_parser_message(str(exc))) from None
        _reject_newer_syntax(text)
        token = _AT_MARKERS.set(prepared.markers)
        try:
            return _convert(root)
        except RecursionError:
            raise PromQLError("query is nested too deeply") from None
        except (ValueError, OverflowError) as exc:  # the binding cannot hold a duration (x[100000000y])
            if "too large" in str(exc) or isinstance(exc, OverflowError):
                raise PromQLError("duration out of range") from None
            raise PromQLError(f"cannot convert the query: {exc}") from None
        finally:
            _AT_MARKERS.reset(token)
    except PromQLError as exc:
        raise PromQLError(_with_position(text, exc.message)) from None


def _with_position(text: str, message: str) -> str:
    """Prefix ``line:column:`` (1-based, as Prometheus does) when the message names a construct
    (``'holt_winterz'``) that occurs once in the text as a call."""
    named = re.search(r"'([A-Za-z_:][A-Za-z0-9_:]*)'", message)
    if named is None:
        return message
    calls = [m.start() for m in re.finditer(rf"(?<![\w:]){re.escape(named.group(1))}\s*\(", text)]
    if len(calls) != 1:
        return message
    line = text.count("\n", 0, calls[0]) + 1
    column = calls[0] - (text.rfind("\n", 0, calls[0]) + 1) + 1
    return f"{line}:{column}: {message}"


_OFFSET_KEYWORD = re.compile(r"\S.*?(?<![\w:])offset$", re.IGNORECASE | re.DOTALL)
"""Text that ends with the keyword ``offset`` after an expression (not ``clock_offset``, not a lone metric
named ``offset``)."""
_DURATION_NUMBER = re.compile(r"(?<![\w.:])\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*(?![\w:])")


def _reject_newer_syntax(text: str) -> None:
    """Reject Prometheus 3 syntax the parser accepts: quoted names in selectors, durations as numbers.

    Scans the text outside string literals: inside ``{...}`` a string right after ``{`` or ``,`` is a
    quoted (UTF-8) metric or label name; outside ``[...]`` a duration not after ``offset`` is a number.
    """
    depth_brace = depth_bracket = 0
    previous = ""
    plain: list[str] = []  # the text with string literals blanked out
    i = 0
    while i < len(text):
        char = text[i]
        if char in "\"'`":
            end = string_end(text, i)
            if depth_brace and previous in ("{", ","):
                raise PromQLError(
                    f"unsupported quoted metric or label name {text[i:end + 1]} (Prometheus 3 only)"
                )
            plain.append(" " * (end + 1 - i))
            previous = "string"
            i = end + 1
            continue
        if char == "{":
            depth_brace += 1
        elif char == "}":
            depth_brace -= 1
        elif char == "[":
            depth_bracket += 1
        elif char == "]":
            depth_bracket -= 1
        if not char.isspace():
            previous = char
        plain.append(" " if depth_bracket > 0 and char not in "[]" else char)
        i += 1
    blanked = "".join(plain)
    for match in _DURATION_NUMBER.finditer(blanked):
        before = blanked[: match.start()].rstrip().rstrip("+-").rstrip()
        if not _OFFSET_KEYWORD.search(before):
            raise PromQLError(
                f"unsupported duration {match.group(0)!r} used as a number (Prometheus 3 only)"
            )


def _parser_message(message: str) -> str:
    """The parser's message, with Prometheus' wording for unknown functions."""
    unknown = re.match(r"unknown function with name '([^']*)'", message)
    if unknown:
        return f"unsupported function '{unknown.group(1)}'"
    return message


def _ms(delta: dt.timedelta | None) -> int:
    """A (possibly negative) timedelta as integer milliseconds, exactly; a duration beyond Go's
    ``time.Duration`` (int64 nanoseconds, about 292 years) is 2.42's "duration out of range"."""
    if delta is None:
        return 0
    ms = delta // _ONE_MS
    if abs(ms) * 1_000_000 > _INT64_MAX:
        raise PromQLError("duration out of range")
    return ms


def _at(modifier: pp.AtModifier | None) -> n.At | None:
    """Our ``@`` modifier from the parser's."""
    if modifier is None:
        return None
    if modifier.type in (pp.AtModifierType.Start, pp.AtModifierType.End):
        return n.At(None, end=modifier.type == pp.AtModifierType.End)
    try:
        when = modifier.at
    except BaseException as exc:  # the binding panics on times before 1970 (pyo3's PanicException)
        if type(exc).__name__ != "PanicException":
            raise
        raise PromQLError("unsupported @ modifier: timestamps before 1970") from None
    if when is None:  # pragma: no cover - the parser always sets it for At
        raise PromQLError("unsupported @ modifier without a time")
    ms = _ms(when - _EPOCH)
    return n.At((_AT_MARKERS.get() or {}).get(ms, ms))


def _matchers(selector: pp.VectorSelector) -> tuple[Matcher, ...]:
    """Store matchers for a selector, the ``__name__`` equality matcher first."""
    if selector.matchers.or_matchers:
        raise PromQLError(f"unsupported 'or' inside label matchers (Prometheus 3 only): {selector}")
    out: list[Matcher] = []
    if selector.name:
        out.append((METRIC_NAME, "=", selector.name))
    for matcher in selector.matchers.matchers:
        op = _MATCH_OPS[str(matcher.op)]
        if op in ("=~", "!~"):
            try:
                compile_anchored(matcher.value)
            except RegexError as exc:
                raise PromQLError(f"invalid regular expression {matcher.value!r}: {exc}") from None
        out.append((matcher.name, op, matcher.value))
    # Put the first name-equality matcher first so the store can use its name index.
    out.sort(key=lambda m: 0 if (m[0] == METRIC_NAME and m[1] == "=") else 1)
    return tuple(out)


def _vector_selector(node: pp.VectorSelector) -> n.VectorSelector:
    return n.VectorSelector(
        name=node.name,
        matchers=_matchers(node),
        offset_ms=_ms(node.offset),
        at=_at(node.at),
    )


def _convert(node: pp.Expr) -> n.Expr:
    """Convert one parser node (recursively)."""
    if isinstance(node, pp.NumberLiteral):
        return n.NumberLiteral(float(node.val))
    if isinstance(node, pp.StringLiteral):
        return n.StringLiteral(node.val)
    if isinstance(node, pp.VectorSelector):
        return _vector_selector(node)
    if isinstance(node, pp.MatrixSelector):
        return n.MatrixSelector(_vector_selector(node.vector_selector), _ms(node.range))
    if isinstance(node, pp.ParenExpr):
        inner = _convert(node.expr)
        return n.Paren(inner, type=inner.type)
    if isinstance(node, pp.UnaryExpr):
        inner = _convert(node.expr)
        return n.Negate(inner, type=inner.type)
    if isinstance(node, pp.SubqueryExpr):
        step = _ms(node.step) if node.step is not None else None
        return n.Subquery(
            expr=_convert(node.expr),
            range_ms=_ms(node.range),
            step_ms=step if step else None,
            offset_ms=_ms(node.offset),
            at=_at(node.at),
        )
    if isinstance(node, pp.Call):
        name = node.func.name
        if name not in FUNCTION_RETURN_TYPES:
            raise PromQLError(f"unsupported function '{name}'")
        return n.Call(name, tuple(_convert(a) for a in node.args), type=FUNCTION_RETURN_TYPES[name])
    if isinstance(node, pp.AggregateExpr):
        return _aggregate(node)
    if isinstance(node, pp.BinaryExpr):
        return _binary(node)
    raise PromQLError(f"unsupported expression {type(node).__name__}")


def _aggregate(node: pp.AggregateExpr) -> n.Aggregate:
    op = str(node.op)
    if op not in AGGREGATIONS:
        raise PromQLError(f"unsupported aggregation '{op}'")
    grouping: tuple[str, ...] = ()
    without = False
    if node.modifier is not None:
        grouping = tuple(sorted(node.modifier.labels))
        without = node.modifier.type == pp.AggModifierType.Without
    param = _convert(node.param) if node.param is not None else None
    return n.Aggregate(op, _convert(node.expr), param, grouping, without)


def _binary(node: pp.BinaryExpr) -> n.Binary:
    op = str(node.op)
    if op not in n.BINARY_OPS:
        raise PromQLError(f"unsupported binary operator '{op}'")
    lhs, rhs = _convert(node.lhs), _convert(node.rhs)
    modifier = node.modifier
    return_bool = bool(modifier.return_bool) if modifier is not None else False
    result_type = n.SCALAR if lhs.type == n.SCALAR and rhs.type == n.SCALAR else n.VECTOR
    matching: n.VectorMatching | None = None
    if lhs.type == n.VECTOR and rhs.type == n.VECTOR:
        card = n.CARD_MANY_TO_MANY if op in n.SET_OPS else n.CARD_ONE_TO_ONE
        on = False
        labels: tuple[str, ...] = ()
        include: tuple[str, ...] = ()
        if modifier is not None:
            fill = modifier.fill_values
            if fill is not None and (fill.lhs is not None or fill.rhs is not None):
                raise PromQLError("unsupported fill modifier (not in Prometheus 2.42)")
            card = _CARDINALITIES[str(modifier.card)]
            if op in n.SET_OPS:
                card = n.CARD_MANY_TO_MANY
            if modifier.matching is not None:
                on = modifier.matching.type == pp.LabelModifierType.Include
                labels = tuple(modifier.matching.labels)
            include = tuple(modifier.group_labels or ())
        matching = n.VectorMatching(card, on, labels, include)
    elif modifier is not None and modifier.matching is not None and modifier.matching.labels:
        raise PromQLError("vector matching only allowed between instant vectors")
    return n.Binary(op, lhs, rhs, matching, return_bool, type=result_type)


_ENDINGS = ("", "1", "x", "m", "1m", "m]", '"', '"x"', '="x"', "x[1m]", "[1m]", "(x)", " (x)", "1, x", "x, 1",
            ") (x)", "(x) (x)", " (x) (x)", " 1", " x")
_CLOSERS = ("", ")", "))", ")))", "]", "])", "]))", "}", "})", "}))", '"}', '"})')
_COMPLETIONS = tuple(dict.fromkeys(ending + closer for ending in _ENDINGS for closer in _CLOSERS))


def _completable(prefix: str) -> bool:
    """Whether some short ending turns ``prefix`` into a query the parser accepts."""
    for ending in _COMPLETIONS:
        try:
            pp.parse(prefix + ending)
        except ValueError:
            continue
        return True
    return False


def error_offset(text: str) -> int:
    """Where a query that does not parse goes wrong, as a 0-based offset into ``text``: the first
    character after which no ending can make it valid, or ``len(text)`` when it is merely incomplete
    (an unclosed bracket). For a caret under the query; the parser itself does not report positions."""
    def word(char: str) -> bool:
        return char.isalnum() or char in "_:."

    for end in range(1, len(text) + 1):
        inside_word = end < len(text) and word(text[end - 1]) and word(text[end])
        if not inside_word and not text[end - 1].isspace() and not _completable(text[:end]):
            start = end - 1
            while start > 0 and word(text[start]) and word(text[start - 1]):
                start -= 1  # the caret goes under the start of the word that went wrong
            return start
    return len(text)


def caret_lines(text: str, offset: int) -> list[str]:
    """The query's line holding ``offset`` and a caret under that column (one-line form for a terminal)."""
    start = text.rfind("\n", 0, offset) + 1
    stop = text.find("\n", offset)
    line = text[start:stop if stop >= 0 else len(text)]
    return [f"  {line}", "  " + " " * (offset - start) + "^"]

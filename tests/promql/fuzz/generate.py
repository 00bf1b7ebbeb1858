"""Random material for the differential fuzzer: input series, expressions, alert rules, templates.

Expressions are trees of :class:`Node` so that a disagreement can be minimised by replacing a node
with one of its children of the same kind (see ``differ.minimise``). Kinds: ``v`` instant vector,
``s`` scalar, ``m`` range vector (matrix), ``t`` a template. Everything is drawn from one
``random.Random`` so a seed reproduces a run exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

METRICS = ("gauge", "counter_total", "other")
JOBS = ("a", "b")
INSTANCES = ("0", "1")
BUCKETS = ("0.1", "0.5", "1", "5", "+Inf")

MATH_FUNCTIONS = (
    "abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "rad", "deg", "sgn", "timestamp",
    "sort", "sort_desc", "absent", "day_of_month", "day_of_week", "day_of_year", "days_in_month",
    "hour", "minute", "month", "year", "round",
)
RANGE_FUNCTIONS = (
    "rate", "increase", "delta", "irate", "idelta", "deriv", "changes", "resets", "avg_over_time",
    "sum_over_time", "count_over_time", "min_over_time", "max_over_time", "last_over_time",
    "present_over_time", "stddev_over_time", "stdvar_over_time", "absent_over_time",
)
AGGREGATIONS = ("sum", "avg", "min", "max", "count", "group", "stddev", "stdvar")
ARITH = ("+", "-", "*", "/", "%", "^", "atan2")
COMPARE = ("==", "!=", ">", "<", ">=", "<=")
SETS = ("and", "or", "unless")
GROUP_LABELS = ("job", "inst", "le", "__name__", "nope", '"job"')
NUMBERS = (
    "0", "1", "-1", "2", "0.5", "3.14159", "10", "100", "1e3", "1e-3", "1e308", "-1e308", "1e-320",
    "5e-324", "1e400", "0x1f", "0x1p3", ".5", "5.", "Inf", "-Inf", "NaN", "+Inf", "710", "-745.2",
    "1e22", "3e15", "0.1", "1_000", "0b11", "0o17", "017", "1e", "0.0", "-0",
)
DURATIONS = ("1m", "5m", "30s", "90s", "2m30s", "1h", "10m", "3m", "1m30s", "5", "0s", "1ms", "1d",
             "1y", "1w", "1M", "2s", "1h1m")
AT_VALUES = ("0", "60", "300", "600.5", "1e10", "-1", "-60", "1e20", "9.3e15", "start()", "end()",
             "1e300", "Inf", "NaN", "123.456", "-9.3e15")
REGEXES = (".*", "a|b", "(?i)A", r"\\Qa.b\\E", "[[:alpha:]]+", "x*", "a(?=b)", r"\\d+", "",
           r"\\p{L}+", "(a)|b", ".+", "[a-", "(?P<n>a)", r"a\\z", "^a$", r"\\C", "a{2,1001}", "(?s).*",
           r"\\x{61}", "[^a]")
TEMPLATE_ATOMS = (
    "{{ $value }}", "{{ $labels.job }}", "{{ $labels.inst }}", "{{ $labels.nope }}",
    "{{ humanize $value }}", "{{ humanize1024 $value }}", "{{ humanizeDuration $value }}",
    "{{ humanizePercentage $value }}", "{{ humanizeTimestamp $value }}", '{{ printf "%.2f" $value }}',
    '{{ printf "%[2]v %[1]v" 1 "x" }}', '{{ printf "%#v" $labels.job }}', '{{ printf "%U" 1234 }}',
    '{{ printf "%+q" "é☺" }}', '{{ printf "%5.1s|%-6d|%x" 3.14 "s" 255 }}', '{{ printf "%v" $labels }}',
    '{{ printf "%q %x %X %o %b %e %g %G" "a" 10 "hi" 8 5 1234.5678 0.000012 1e21 }}',
    '{{ printf "%08.3f|%+d|% d|%t|%c" 3.14159 5 7 true 65 }}', '{{ printf "%[3]*.[2]*[1]f" 12.0 2 6 }}',
    '{{ printf "%!" }}', '{{ printf "%d" }}', '{{ printf "%d %d" 1 }}', '{{ printf "%z" 1 }}',
    '{{ toUpper "ǆ ß ﬃ ǰ" }}', '{{ toLower "İ Σ ǅ" }}', '{{ title "hello wörld ǆ" }}',
    '{{ title $labels.job }}', '{{ reReplaceAll "(a)" "${1}x$1y" $labels.job }}',
    '{{ reReplaceAll "é(a)" "$1é" "éa" }}', '{{ match "a.*" $labels.job }}',
    "{{ if gt $value 1.0 }}big{{ else }}small{{ end }}",
    "{{ range $k, $v := $labels }}{{ $k }}={{ $v }};{{ end }}", "{{ $labels }}",
    '{{ template "x" }}', '{{ define "x" }}X{{ end }}{{ template "x" }}', "{{ len $labels }}",
    "{{ with $labels.job }}j={{ . }}{{ end }}", '{{ eq $labels.job "a" }}',
    "{{ $value | humanize }}", '{{ stripPort "host:9090" }}', '{{ parseDuration "1m30s" }}',
    "{{ toTime $value }}", '{{ "a" | printf "%s-%s" "b" }}', "{{ 1e3 }} {{ 0x10 }} {{ 'a' }}",
    "{{- $value -}}", "{{/* c */}}x", "{{ index $labels \"job\" }}", "{{ slice \"abc\" 1 }}",
    "{{ html \"<a>\" }} {{ js \"'\" }} {{ urlquery \"a b\" }}", "{{ not 0 }} {{ and 1 0 }} {{ or 0 2 }}",
    "{{ $x := 1 }}{{ $x = 2 }}{{ $x }}", "{{ print 1 2 \"a\" \"b\" 3.5 }}", "{{ println $value }}",
    "{{ humanize \"12345\" }}", "{{ humanizeDuration -90.5 }}", "{{ humanizeTimestamp 1e20 }}",
)


@dataclass(frozen=True)
class Node:
    """An expression tree node: ``fmt`` with ``{0}``, ``{1}``... replaced by the rendered children."""

    kind: str
    fmt: str
    kids: tuple[Node, ...] = ()

    def render(self) -> str:
        """The expression text."""
        return self.fmt.format(*(kid.render() for kid in self.kids))

    def shrinks(self) -> Iterator[Node]:
        """Smaller candidates: a child of the same kind, or this node with one child shrunk."""
        for kid in self.kids:
            if kid.kind == self.kind:
                yield kid
        for index, kid in enumerate(self.kids):
            for smaller in kid.shrinks():
                yield replace(self, kids=(*self.kids[:index], smaller, *self.kids[index + 1:]))


def _escape(text: str) -> str:
    """``text`` with braces doubled, for use inside a ``Node.fmt``."""
    return text.replace("{", "{{").replace("}", "}}")


def leaf(kind: str, text: str) -> Node:
    """A node without children."""
    return Node(kind, _escape(text))


@dataclass
class AlertRule:
    """One generated alerting rule (rendered into a rule file by ``differ``)."""

    name: str
    expr: Node
    for_: str | None
    keep_firing_for: str | None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


class Generator:
    """Draws series, expressions and rules from one seeded ``random.Random``."""

    def __init__(self, seed: int, weird: float = 0.05) -> None:
        self.rng = random.Random(seed)
        self.weird = weird  # probability of edge-case literals (parity of accept/reject)

    # ----------------------------------------------------------------------------- input series

    def values(self, count: int) -> str:
        """A promtool value string covering about ``count`` points."""
        rng = self.rng
        parts: list[str] = []
        left = count
        while left > 0:
            n = rng.randint(1, max(1, min(left, 8)))
            pick = rng.random()
            start = rng.choice(("0", "1", "-5", "100", "0.1", "1e10", "3", "-0.5", "1e-5", "7"))
            step = rng.choice(("1", "2", "0.5", "-1", "10", "0", "0.1", "1e9", "-3", "60"))
            if pick < 0.45:
                sign = "-" if step.startswith("-") else "+"
                parts.append(f"{start}{sign}{step.lstrip('-')}x{n}")
                left -= n + 1
            elif pick < 0.6:
                parts.append(f"{rng.choice(('_', 'stale'))}x{n}" if rng.random() < 0.5 else
                             rng.choice(("_", "stale")))
                left -= 1
            elif pick < 0.75:
                parts.append(rng.choice(("NaN", "Inf", "-Inf", "0", "-0", "1e308", "5e-324", "42")))
                left -= 1
            else:
                parts.append(f"{start}x{n}")
                left -= n + 1
        return " ".join(parts)

    def series(self) -> list[tuple[str, str]]:
        """Input series: gauges, a counter, an unrelated metric and one histogram."""
        rng = self.rng
        out: list[tuple[str, str]] = []
        for metric in METRICS:
            for job in JOBS:
                for inst in INSTANCES:
                    if rng.random() < 0.7:
                        out.append((f'{metric}{{job="{job}",inst="{inst}"}}', self.values(rng.randint(3, 25))))
        for job in JOBS:
            total = 0
            counts = []
            for le in BUCKETS:
                total += rng.choice((0, 0, 1, 2, 5))
                counts.append((le, total))
            for le, count in counts:
                if rng.random() < 0.9:
                    step = rng.choice((0, 1, count, 2 * count))
                    vals = f"{count}+{step}x20" if rng.random() < 0.9 else rng.choice(("NaN", "NaN x5", "1 NaN 3"))
                    out.append((f'h_bucket{{job="{job}",le="{le}"}}', vals))
        if rng.random() < 0.2:  # odd label values for label_replace / templates
            out.append(('odd{job="ünï",inst="a.b:9090"}', "1 2 3"))
        return out

    # ------------------------------------------------------------------------------ expressions

    def duration(self) -> str:
        if self.rng.random() < self.weird:
            return self.rng.choice(DURATIONS)
        return self.rng.choice(DURATIONS[:10])

    def number(self) -> str:
        if self.rng.random() < self.weird:
            return self.rng.choice(NUMBERS)
        return self.rng.choice(NUMBERS[:10])

    def matcher(self) -> str:
        rng = self.rng
        label = rng.choice(("job", "inst", "job", "nope", "le"))
        op = rng.choice(("=", "!=", "=~", "!~"))
        if op in ("=~", "!~"):
            regexes = REGEXES if rng.random() < self.weird * 4 else REGEXES[:3]
            value = rng.choice(regexes)
        else:
            value = rng.choice(("a", "b", "0", "1", "", "ünï"))
        quote = rng.choice(('"', '"', "'", "`")) if rng.random() < self.weird * 2 else '"'
        if quote == "`":
            value = value.replace("\\\\", "\\")
        return f"{label}{op}{quote}{value}{quote}"

    def modifiers(self) -> str:
        rng = self.rng
        out = ""
        if rng.random() < 0.15:
            out += " offset " + rng.choice(("1m", "5m", "-1m", "30s", "-2m")) if rng.random() > self.weird \
                else " offset " + rng.choice(DURATIONS)
        if rng.random() < 0.15:
            ats = AT_VALUES if rng.random() < self.weird * 4 else AT_VALUES[:4] + AT_VALUES[10:12]
            at = " @ " + rng.choice(ats)
            out = at + out if rng.random() < 0.5 else out + at
        return out

    def selector(self) -> str:
        rng = self.rng
        pick = rng.random()
        if pick < 0.1:
            return rng.choice(('{__name__=~"gauge|other"}', '{__name__="gauge",job="a"}',
                               'h_bucket', '{job="a"}', '{__name__=~".*_total"}'))
        name = rng.choice((*METRICS, "h_bucket", "missing"))
        if rng.random() < 0.5:
            return name
        matchers = ",".join(self.matcher() for _ in range(rng.randint(1, 2)))
        return f"{name}{{{matchers}}}"

    def vector(self, depth: int) -> Node:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.2:
            return leaf("v", self.selector() + self.modifiers())
        pick = rng.randrange(16)
        d = depth - 1
        if pick == 0:
            fn = rng.choice(MATH_FUNCTIONS)
            if fn == "round" and rng.random() < 0.5:
                return Node("v", "round({0}, {1})", (self.vector(d), self.scalar(d)))
            return Node("v", fn + "({0})", (self.vector(d),))
        if pick in (1, 2):
            return Node("v", rng.choice(RANGE_FUNCTIONS) + "({0})", (self.matrix(d),))
        if pick == 3:
            fn = rng.choice(("quantile_over_time", "predict_linear", "holt_winters", "clamp", "clamp_min",
                             "clamp_max"))
            if fn == "quantile_over_time":
                return Node("v", fn + "({0}, {1})", (self.scalar(d), self.matrix(d)))
            if fn == "predict_linear":
                return Node("v", fn + "({0}, {1})", (self.matrix(d), self.scalar(d)))
            if fn == "holt_winters":
                return Node("v", fn + "({0}, {1}, {2})", (self.matrix(d), self.scalar(d), self.scalar(d)))
            if fn == "clamp":
                return Node("v", fn + "({0}, {1}, {2})", (self.vector(d), self.scalar(d), self.scalar(d)))
            return Node("v", fn + "({0}, {1})", (self.vector(d), self.scalar(d)))
        if pick in (4, 5):
            return self.aggregation(d)
        if pick in (6, 7, 8):
            return self.binary(d)
        if pick == 9:
            return Node("v", "vector({0})", (self.scalar(d),))
        if pick == 10:
            dst = rng.choice(("job", "new", "__name__", "inst", "1bad"))
            repl = rng.choice(("$1", "${1}x", "$1é", "é$1", "$2", "$name", "x$1y", "", "$$1"))
            src = rng.choice(("job", "inst", "__name__", "nope"))
            regex = rng.choice(("(.*)", "(a)(.*)", "(.)", "(?P<name>.*)", "", "(.*", "é(.*)", "(.*)ï"))
            args = _escape(f'"{dst}", "{repl}", "{src}", "{regex}"')
            return Node("v", "label_replace({0}, " + args + ")", (self.vector(d),))
        if pick == 11:
            return Node("v", 'label_join({0}, "joined", "' + rng.choice(("-", "", ",")) + '", "job", "inst")',
                        (self.vector(d),))
        if pick == 12:
            inner = rng.choice(("h_bucket", "rate(h_bucket[5m])", "sum by (le) (h_bucket)",
                                "sum by (le, job) (increase(h_bucket[3m]))", "gauge"))
            return Node("v", "histogram_quantile({0}, " + _escape(inner) + ")",
                        (self.scalar(d),))
        if pick == 13:
            return Node("v", "-{0}", (self.vector(d),))
        if pick == 14:
            return Node("v", "({0})", (self.vector(d),))
        return Node("v", "timestamp({0})", (leaf("v", self.selector() + self.modifiers()),))

    def grouping(self) -> str:
        rng = self.rng
        if rng.random() < 0.4:
            return ""
        labels = ", ".join(rng.sample(GROUP_LABELS if rng.random() < self.weird * 4 else GROUP_LABELS[:3],
                                      rng.randint(0, 2)))
        return f" {rng.choice(('by', 'without'))} ({labels}) "

    def aggregation(self, d: int) -> Node:
        rng = self.rng
        grouping = self.grouping()
        pick = rng.random()
        if pick < 0.15:
            op = rng.choice(("topk", "bottomk", "quantile"))
            return Node("v", op + grouping + "({0}, {1})", (self.scalar(d), self.vector(d)))
        if pick < 0.2:
            return Node("v", "count_values" + grouping + '("value", {0})', (self.vector(d),))
        op = rng.choice(AGGREGATIONS)
        if rng.random() < 0.5:
            return Node("v", op + grouping + "({0})", (self.vector(d),))
        return Node("v", op + "({0})" + grouping, (self.vector(d),))

    def matching(self) -> str:
        rng = self.rng
        if rng.random() < 0.6:
            return ""
        labels = ", ".join(rng.sample(("job", "inst", "le"), rng.randint(0, 2)))
        out = f" {rng.choice(('on', 'ignoring'))}({labels})"
        if rng.random() < 0.3:
            out += f" {rng.choice(('group_left', 'group_right'))}({rng.choice(('', 'inst', 'job'))})"
        return out

    def binary(self, d: int) -> Node:
        rng = self.rng
        pick = rng.random()
        if pick < 0.15:
            return Node("v", "{0} " + rng.choice(SETS) + self.matching() + " {1}", (self.vector(d), self.vector(d)))
        op = rng.choice(ARITH + COMPARE)
        if op in COMPARE and rng.random() < 0.4:
            op += " bool"
        if pick < 0.5:
            return Node("v", "{0} " + op + self.matching() + " {1}", (self.vector(d), self.vector(d)))
        if pick < 0.75:
            return Node("v", "{0} " + op + " {1}", (self.vector(d), self.scalar(d)))
        return Node("v", "{0} " + op + " {1}", (self.scalar(d), self.vector(d)))

    def scalar(self, depth: int) -> Node:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.5:
            return leaf("s", self.number())
        pick = rng.randrange(6)
        d = depth - 1
        if pick == 0:
            return leaf("s", rng.choice(("time()", "pi()")))
        if pick == 1:
            return Node("s", "scalar({0})", (self.vector(d),))
        if pick == 2:
            op = rng.choice(ARITH + tuple(c + " bool" for c in COMPARE))
            return Node("s", "{0} " + op + " {1}", (self.scalar(d), self.scalar(d)))
        if pick == 3:
            return Node("s", "-{0}", (self.scalar(d),))
        if pick == 4:
            return Node("s", rng.choice(("exp", "sqrt", "ln", "sin", "atan", "sinh", "cosh")) + "({0})",
                        (self.scalar(d),))
        return Node("s", "({0})", (self.scalar(d),))

    def matrix(self, depth: int) -> Node:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.75:
            return leaf("m", f"{self.selector()}[{self.duration()}]{self.modifiers()}")
        step = rng.choice(("", "1m", "30s", "2m", "7s", "", "1m30s"))
        if rng.random() < self.weird:
            step = rng.choice(("0s", "1ms", "5"))
        return Node("m", "({0})[" + self.duration() + ":" + step + "]" + self.modifiers(), (self.vector(depth - 1),))

    # ------------------------------------------------------------------------------ rules

    def template(self) -> str:
        rng = self.rng
        return " ".join(rng.choice(TEMPLATE_ATOMS) for _ in range(rng.randint(1, 3)))

    def alert(self, index: int) -> AlertRule:
        rng = self.rng
        expr = self.vector(rng.randint(0, 3))
        if rng.random() < 0.6:
            threshold = leaf("s", rng.choice(("0", "1", "5")))
            expr = Node("v", "{0} " + rng.choice((">", "<", ">=", "!=")) + " {1}", (expr, threshold))
        for_ = rng.choice((None, "0s", "1m", "2m", "90s", "5m", "30s"))
        keep = rng.choice((None, None, "0s", "1m", "3m", "45s"))
        labels = {"severity": rng.choice(("page", "info"))}
        if rng.random() < 0.3:
            labels["detail"] = self.template()
        annotations = {"summary": self.template()}
        if rng.random() < 0.3:
            annotations["description"] = self.template()
        return AlertRule(f"Alert{index}", expr, for_, keep, labels, annotations)

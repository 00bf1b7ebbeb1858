"""Compare our evaluator with promtool 2.42 on the same input: "assert ours == promtool".

promtool prints what a ``promql_expr_test`` got when it differs from the expectation; asking for no
samples therefore makes it print every sample it computed (values in Go's exact ``%E`` form) or the
evaluation error. :func:`promtool_results` runs one test file for many cases and parses that output;
:func:`our_results` evaluates the same cases with our evaluator over a store loaded the same way.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import yaml

from watchdog.model import Labels, make_labels
from watchdog.promql import EvalOptions, PromQLError, evaluate, parse_query
from watchdog.promql.values import Scalar, VectorSample
from watchdog.promtool.notation import expand_values
from watchdog.store import Store

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

Case = tuple[str, str]
"""``(expr, eval_time)`` with eval_time in promtool duration form (``"10m"``)."""


@dataclass(frozen=True)
class Outcome:
    """Samples sorted by labels (values compared bit-exactly, NaN equal to NaN), or an error."""

    samples: tuple[tuple[Labels, float], ...] = ()
    error: str | None = None

    def same_as(self, other: Outcome) -> bool:
        """Equal samples (exact floats, NaN == NaN) or both errors."""
        if (self.error is None) != (other.error is None):
            return False
        if self.error is not None:
            return True
        if len(self.samples) != len(other.samples):
            return False
        for (la, va), (lb, vb) in zip(self.samples, other.samples, strict=True):
            if la != lb:
                return False
            if not (va == vb or (math.isnan(va) and math.isnan(vb))):
                return False
            if va == 0 and vb == 0 and math.copysign(1, va) != math.copysign(1, vb):
                return False
        return True


def duration_ms(text: str) -> int:
    """A Prometheus duration (``1m30s``) in milliseconds."""
    if text in ("0", "0s"):
        return 0
    return round(promql_parser.parse_duration(text).total_seconds() * 1000)


def series_labels(selector: str) -> Labels:
    """Labels of a promtool ``series:`` string such as ``foo{a="b"}``."""
    expr = promql_parser.parse(selector)
    assert isinstance(expr, promql_parser.VectorSelector), selector
    pairs = [(m.name, m.value) for m in expr.matchers.matchers]
    if expr.name:
        pairs.append(("__name__", expr.name))
    return make_labels(pairs)


def load_store(series: Sequence[tuple[str, str]], interval: str) -> Store:
    """A store holding ``series`` (promtool ``input_series``) sampled every ``interval`` from t=0."""
    store = Store(retention_ms=10**12, max_points=10**7)
    step = duration_ms(interval)
    for selector, values in series:
        labels = series_labels(selector)
        for index, value in enumerate(expand_values(values)):
            if value is not None:
                store.append(labels, index * step, value)
    return store


def our_results(
    series: Sequence[tuple[str, str]],
    interval: str,
    cases: Sequence[Case],
    evaluation_interval: str = "1m",
) -> dict[Case, Outcome]:
    """Our evaluator's outcome for each case, in promtool's terms (scalar = one sample with {})."""
    store = load_store(series, interval)
    step = duration_ms(evaluation_interval)
    out: dict[Case, Outcome] = {}
    for expr, eval_time in cases:
        try:
            value = evaluate(parse_query(expr), store, duration_ms(eval_time), EvalOptions(subquery_step_ms=step))
        except PromQLError as exc:
            out[(expr, eval_time)] = Outcome(error=str(exc))
            continue
        if isinstance(value, Scalar):
            samples: list[tuple[Labels, float]] = [((), value.value)]
        elif isinstance(value, list) and all(isinstance(s, VectorSample) for s in value):
            samples = [(s.labels, s.value) for s in value]
        else:
            out[(expr, eval_time)] = Outcome(error="rule result is not a vector or scalar")
            continue
        out[(expr, eval_time)] = Outcome(samples=tuple(sorted(samples, key=lambda s: s[0])))
    return out


_CASE_HEADER = re.compile(r'^    expr: (".*"), time: (\S+?),(?: err: (.*))?$')
_GOT = re.compile(r"^        got: (.*)$")


def _parse_go_labels(text: str, pos: int) -> tuple[Labels, int]:
    """Parse Go's ``{a="x", b="y"}`` starting at ``pos``; returns labels and the index after ``}``."""
    assert text[pos] == "{", text[pos:]
    pos += 1
    pairs: list[tuple[str, str]] = []
    while text[pos] != "}":
        eq = text.index("=", pos)
        name = text[pos:eq]
        # A Go-quoted string: find the closing quote, honouring backslash escapes.
        end = eq + 2
        while text[end] != '"':
            end += 2 if text[end] == "\\" else 1
        pairs.append((name, json.loads(text[eq + 1 : end + 1])))
        pos = end + 1
        if text.startswith(", ", pos):
            pos += 2
    return make_labels(pairs), pos + 1


def _parse_got(text: str) -> tuple[tuple[Labels, float], ...]:
    if text == "nil":
        return ()
    samples: list[tuple[Labels, float]] = []
    pos = 0
    while pos < len(text):
        labels, pos = _parse_go_labels(text, pos)
        assert text[pos] == " "
        end = text.find(", {", pos)
        end = len(text) if end < 0 else end
        samples.append((labels, float(text[pos + 1 : end])))
        pos = end + 2 if end < len(text) else end
    return tuple(sorted(samples, key=lambda s: s[0]))


def promtool_results(
    series: Sequence[tuple[str, str]],
    interval: str,
    cases: Sequence[Case],
    workdir: Path,
    evaluation_interval: str = "1m",
) -> dict[Case, Outcome]:
    """promtool's outcome for each case (cases must be distinct).

    promtool loads input samples only up to the last multiple of ``evaluation_interval`` that is not
    after the latest ``eval_time``; keep ``evaluation_interval`` at or below the input ``interval``.
    It is also the default subquery step.
    """
    test = {
        "evaluation_interval": evaluation_interval,
        "tests": [
            {
                "interval": interval,
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": [
                    {"expr": expr, "eval_time": eval_time, "exp_samples": []} for expr, eval_time in cases
                ],
            }
        ],
    }
    path = workdir / "oracle_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    run = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    outcomes = {case: Outcome() for case in cases}
    output = run.stdout + run.stderr  # promtool prints failures on stderr
    lines = output.splitlines()
    for index, line in enumerate(lines):
        header = _CASE_HEADER.match(line)
        if header is None:
            continue
        case = (json.loads(header.group(1)), header.group(2))
        if header.group(3) is not None:
            outcomes[case] = Outcome(error=header.group(3))
            continue
        got = _GOT.match(lines[index + 2])
        assert got is not None, lines[index : index + 3]
        outcomes[case] = Outcome(samples=_parse_got(got.group(1)))
    if run.returncode not in (0, 1) or ("FAILED" not in output and run.returncode != 0):
        raise RuntimeError(f"promtool failed: {output}")
    return outcomes


def _canonical_time(text: str) -> str:
    """promtool echoes eval_time as Go's model.Duration string (``90s`` -> ``1m30s``)."""
    if duration_ms(text) == 0:
        return "0s"
    return str(promql_parser.display_duration(promql_parser.parse_duration(text)))


def _values_close(a: Outcome, b: Outcome) -> bool:
    """Same number of samples with values equal to 12 digits, labels ignored."""
    if (a.error is None) != (b.error is None) or len(a.samples) != len(b.samples):
        return False
    ours = sorted((v for _, v in a.samples), key=lambda v: (math.isnan(v), v))
    theirs = sorted((v for _, v in b.samples), key=lambda v: (math.isnan(v), v))
    return all(
        x == y or (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-12)
        for x, y in zip(ours, theirs, strict=True)
    )


def compare_with_promtool(
    series: Sequence[tuple[str, str]],
    interval: str,
    cases: Sequence[Case],
    workdir: Path,
    evaluation_interval: str = "1m",
    order_dependent: Sequence[str] = (),
) -> list[str]:
    """Differences between our outcomes and promtool's, one readable line per disagreeing case.

    promtool creates input series in Go map order, so its series order (and with it the last bits of
    a sum, or which of two tied series ``topk`` keeps) varies between runs; expressions listed in
    ``order_dependent`` are compared by their values to 12 digits instead of exactly.
    """
    cases = list(dict.fromkeys((expr, _canonical_time(t)) for expr, t in cases))
    ours = our_results(series, interval, cases, evaluation_interval)
    theirs = promtool_results(series, interval, cases, workdir, evaluation_interval)
    problems = []
    loose = set(order_dependent)
    for case in cases:
        if case[0] in loose and _values_close(ours[case], theirs[case]):
            continue
        if not ours[case].same_as(theirs[case]):
            problems.append(f"{case[0]} @ {case[1]}: ours={ours[case]} promtool={theirs[case]}")
    return problems

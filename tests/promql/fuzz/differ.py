"""Run generated material through promtool 2.42 and our runner, compare, minimise, report.

Both tools get the same promtool test file. Every ``promql_expr_test`` and ``alert_rule_test`` asks for
nothing (``exp_samples: []``, ``exp_alerts: []``), so each tool prints, case by case, what it got; the
outputs are split into one block per case and compared exactly (floats print in Go's shortest ``%E``
form, so equal text is equal bits). Error texts are not compared, only that both sides failed.

A disagreement is minimised (fewer series, shorter value strings, a smaller expression, fewer rule
fields) while it still disagrees, checked again against promtool for run-to-run stability (promtool
creates series in Go map order, so order-dependent sums can differ between its own runs), and printed
as a promtool test file whose expectations are promtool's answer.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tests.promql.fuzz.generate import AlertRule, Generator, Node

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
Series = list[tuple[str, str]]
EVAL_TIMES = ("0s", "30s", "1m", "2m", "3m30s", "5m", "7m", "10m", "12m30s", "15m", "20m")
ALERT_TIMES = ("0s", "1m", "2m", "3m", "5m", "8m", "12m", "16m", "20m")
_BLOCK_START = re.compile(r"^    (?:expr|alertname|rule|name): ")
_EXPR_ERROR = re.compile(r"^(    expr: .*, time: \S+,) err: .*", re.S)
_RULE_ERROR = re.compile(r"^(    rule: .*?, time: \S+,) err: .*", re.S)
MAX_SHRINK_RUNS = 120


@dataclass
class Run:
    """One tool's answer for one test file: exit code and one text block per failing case."""

    code: int
    blocks: dict[str, str]
    other: str = ""

    def same_as(self, other: Run) -> bool:
        if self.code != other.code or self.blocks != other.blocks:
            return False
        return bool(self.other) == bool(other.other)


@dataclass
class Disagreement:
    """A minimised case on which the tools differ, with the test file that shows it."""

    kind: str  # "expr" or "alert"
    subject: str  # the expression, or the alert's expression
    ours: str
    promtool: str
    test_file: str
    files: dict[str, str] = field(default_factory=dict)

    def signature(self) -> str:
        """A rough class: the expression with numbers and strings blanked out."""
        text = re.sub(r'"[^"]*"|\'[^\']*\'|`[^`]*`', '"…"', self.subject)
        return self.kind + ": " + re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)

    def report(self) -> str:
        return (f"### {self.kind}: {self.subject}\n# ours:\n{_comment(self.ours)}\n# promtool:\n"
                f"{_comment(self.promtool)}\n{self.test_file}")


def _comment(text: str) -> str:
    return "\n".join("#   " + line for line in text.strip("\n").splitlines()) or "#   (passes)"


def split_blocks(stderr: str) -> tuple[dict[str, str], str]:
    """promtool's failure text, one block per case keyed by the case's header; the rest apart."""
    blocks: dict[str, str] = {}
    other: list[str] = []
    key: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if key is None:
            return
        text = "\n".join(lines)
        for pattern in (_EXPR_ERROR, _RULE_ERROR):
            match = pattern.match(text)
            if match:
                text = match.group(1) + " err: <error>"
        blocks[key] = text

    for line in stderr.splitlines():
        if _BLOCK_START.match(line):
            flush()
            key, lines = line, [line]
            for pattern in (_EXPR_ERROR, _RULE_ERROR):
                match = pattern.match(line)
                if match:
                    key = match.group(1)
            if line.startswith("    name: "):  # "name:" precedes the alertname line of a named group
                key = None
                other.append(line)
                lines = []
            continue
        if key is not None and line.startswith("        "):
            lines.append(line)
            continue
        if line.strip() in ("", "FAILED:"):
            continue
        flush()
        key = None
        other.append(line)
    flush()
    return blocks, "\n".join(other)


def _per_file(output: str, code: int) -> dict[str, Run]:
    """Split the merged stdout+stderr of a run over several test files into one ``Run`` per file."""
    runs: dict[str, Run] = {}
    for chunk in output.split("Unit Testing:  ")[1:]:
        name, _, rest = chunk.partition("\n")
        blocks, other = split_blocks(rest.replace("  SUCCESS", ""))
        runs[name.strip()] = Run(1 if (blocks or other) else 0, blocks, other)
    if not runs:
        runs[""] = Run(code, {}, output)
    return runs


def run_promtool(root: Path, names: Sequence[str]) -> dict[str, Run]:
    """``promtool test rules`` over ``names`` (in ``root``); one result per file."""
    proc = subprocess.run([PROMTOOL, "test", "rules", *names], cwd=root, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    return _per_file(proc.stdout, proc.returncode)


def run_ours(root: Path, names: Sequence[str]) -> dict[str, Run]:
    """Our runner, in process, over the same files."""
    import os

    from watchdog.promtool.runner import run_test_files

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        code = run_test_files(list(names), out=out, err=out)
    except Exception as exc:  # a crash of ours is a disagreement like any other
        return {name: Run(2, {}, f"CRASH {type(exc).__name__}: {exc}") for name in names}
    finally:
        os.chdir(cwd)
    return _per_file(out.getvalue(), code)


# ------------------------------------------------------------------------------ test files


def expr_test(series: Series, cases: Sequence[tuple[str, str]]) -> dict[str, Any]:
    return {
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "promql_expr_test": [{"expr": e, "eval_time": t, "exp_samples": []} for e, t in cases],
        }],
    }


def rule_file(rules: Sequence[AlertRule]) -> dict[str, Any]:
    groups = []
    for rule in rules:
        body: dict[str, Any] = {"alert": rule.name, "expr": rule.expr.render()}
        if rule.for_ is not None:
            body["for"] = rule.for_
        if rule.keep_firing_for is not None:
            body["keep_firing_for"] = rule.keep_firing_for
        if rule.labels:
            body["labels"] = dict(rule.labels)
        if rule.annotations:
            body["annotations"] = dict(rule.annotations)
        groups.append({"name": "g_" + rule.name, "rules": [body]})
    return {"groups": groups}


def alert_test(series: Series, rules: Sequence[AlertRule], times: Sequence[str],
               with_series_checks: bool = True) -> dict[str, Any]:
    group: dict[str, Any] = {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [{"alertname": r.name, "eval_time": t, "exp_alerts": []}
                            for r in rules for t in times],
    }
    if with_series_checks:
        group["promql_expr_test"] = [{"expr": e, "eval_time": t, "exp_samples": []}
                                     for t in times for e in ("ALERTS", "ALERTS_FOR_STATE")]
    return {"evaluation_interval": "1m", "rule_files": ["rules.yaml"], "tests": [group]}


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)


class Workspace:
    """A scratch directory; ``compare`` writes the files, runs both tools and returns both runs."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="promql-fuzz-"))

    def write(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            (self.root / name).write_text(text, encoding="utf-8")

    def compare(self, files: dict[str, str]) -> tuple[Run, Run]:
        """Both tools on ``test.yaml`` of ``files``."""
        self.write(files)
        ours = run_ours(self.root, ["test.yaml"])
        theirs = run_promtool(self.root, ["test.yaml"])
        return next(iter(ours.values())), next(iter(theirs.values()))


# ------------------------------------------------------------------------------ minimising


def _differs(ws: Workspace, files: dict[str, str]) -> bool:
    ours, theirs = ws.compare(files)
    return not ours.same_as(theirs)


def _shrink_series(series: Series, still: Callable[[Series], bool], budget: list[int]) -> Series:
    index = 0
    while index < len(series) and budget[0] > 0:
        budget[0] -= 1
        candidate = series[:index] + series[index + 1 :]
        if still(candidate):
            series = candidate
        else:
            index += 1
    for index in range(len(series)):
        tokens = series[index][1].split()
        while len(tokens) > 1 and budget[0] > 0:
            budget[0] -= 1
            candidate = list(series)
            candidate[index] = (series[index][0], " ".join(tokens[: len(tokens) // 2]))
            if not still(candidate):
                break
            series, tokens = candidate, tokens[: len(tokens) // 2]
    return series


def _shrink_node(node: Node, still: Callable[[Node], bool], budget: list[int]) -> Node:
    progress = True
    while progress and budget[0] > 0:
        progress = False
        for smaller in node.shrinks():
            budget[0] -= 1
            if still(smaller):
                node, progress = smaller, True
                break
            if budget[0] <= 0:
                break
    return node


def minimise_expr(ws: Workspace, series: Series, expr: Node, time: str) -> Disagreement:
    budget = [MAX_SHRINK_RUNS]

    def files(s: Series, e: Node) -> dict[str, str]:
        return {"test.yaml": dump(expr_test(s, [(e.render(), time)]))}

    expr = _shrink_node(expr, lambda e: _differs(ws, files(series, e)), budget)
    series = _shrink_series(series, lambda s: _differs(ws, files(s, expr)), budget)
    final = files(series, expr)
    ours, theirs = ws.compare(final)
    return Disagreement("expr", expr.render(), show(ours), show(theirs),
                        _expr_expectation(series, expr.render(), time, theirs), final)


def minimise_alert(ws: Workspace, series: Series, rule: AlertRule, times: Sequence[str]) -> Disagreement:
    budget = [MAX_SHRINK_RUNS]

    def files(s: Series, r: AlertRule, checks: bool = True) -> dict[str, str]:
        return {"test.yaml": dump(alert_test(s, [r], times, checks)), "rules.yaml": dump(rule_file([r]))}

    def still(r: AlertRule) -> bool:
        return _differs(ws, files(series, r))

    for candidate in (replace(rule, labels={}), replace(rule, annotations={}), replace(rule, for_=None),
                      replace(rule, keep_firing_for=None)):
        if budget[0] > 0 and candidate != rule:
            budget[0] -= 1
            merged = replace(rule, **{k: getattr(candidate, k) for k in
                                      ("labels", "annotations", "for_", "keep_firing_for")
                                      if getattr(candidate, k) != getattr(rule, k)})
            if still(merged):
                rule = merged
    expr = _shrink_node(rule.expr, lambda e: still(replace(rule, expr=e)), budget)
    rule = replace(rule, expr=expr)
    series = _shrink_series(series, lambda s: _differs(ws, files(s, rule)), budget)
    final = files(series, rule)
    ours, theirs = ws.compare(final)
    return Disagreement("alert", rule.expr.render(), show(ours), show(theirs),
                        "# rules.yaml\n" + final["rules.yaml"] + "# test.yaml\n" + final["test.yaml"], final)


def show(run: Run) -> str:
    return "\n".join([*run.blocks.values(), run.other]).strip("\n")


_GOT = re.compile(r"^        got: (.*)$", re.M)


def _expr_expectation(series: Series, expr: str, time: str, theirs: Run) -> str:
    """The case as a test file that promtool passes: its own answer as the expectation."""
    doc = expr_test(series, [(expr, time)])
    case = doc["tests"][0]["promql_expr_test"][0]
    got = _GOT.search("\n".join(theirs.blocks.values()))
    if got is None:
        case["exp_samples"] = []
        note = "" if theirs.blocks else "# promtool: nothing\n"
        return note + dump(doc) if "err: <error>" not in show(theirs) else \
            "# promtool rejects this expression (see above)\n" + dump(doc)
    from tests.promql.oracle import _parse_got

    samples = []
    for labels, value in _parse_got(got.group(1)):
        text = "{" + ", ".join(f'{k}="{_go_escape(v)}"' for k, v in labels if k != "__name__") + "}"
        name = dict(labels).get("__name__", "")
        samples.append({"labels": name + text, "value": value})
    case["exp_samples"] = samples
    return dump(doc)


def _go_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# ------------------------------------------------------------------------------ driving


@dataclass
class Totals:
    expressions: int = 0
    alerts: int = 0
    unstable: int = 0
    found: list[Disagreement] = field(default_factory=list)


def _stable(ws: Workspace, files: dict[str, str]) -> bool:
    """promtool gives the same answer six times (it creates input series in Go map order, which the
    order of a float sum or a tie follows; with many series one order can win several runs)."""
    ws.write(files)
    first = run_promtool(ws.root, ["test.yaml"])["test.yaml"]
    return all(run_promtool(ws.root, ["test.yaml"])["test.yaml"].same_as(first) for _ in range(5))


def _confirm(ws: Workspace, single: dict[str, str], minimise: Callable[[], Disagreement], totals: Totals,
             log: Callable[[str], None]) -> None:
    """A case that disagreed in its batch: check it alone and for stability under promtool, then
    minimise and record it."""
    if not _differs(ws, single):
        return  # depended on another case of the batch, or flaky
    if not _stable(ws, single):
        totals.unstable += 1
        return
    found = minimise()
    totals.found.append(found)
    log(found.report())


def fuzz_expressions(gen: Generator, ws: Workspace, batches: int, per_batch: int, totals: Totals,
                     log: Callable[[str], None] = print) -> None:
    for _ in range(batches):
        series = gen.series()
        cases: dict[tuple[str, str], Node] = {}
        while len(cases) < per_batch:
            node = gen.vector(gen.rng.randint(1, 4)) if gen.rng.random() < 0.85 else gen.scalar(3)
            cases.setdefault((node.render(), gen.rng.choice(EVAL_TIMES)), node)
        totals.expressions += len(cases)
        doc = expr_test(series, list(cases))
        ours, theirs = ws.compare({"test.yaml": dump(doc)})
        if ours.same_as(theirs):
            continue
        if ours.other != theirs.other and not ours.blocks and not theirs.blocks:
            log(f"file-level disagreement:\n ours: {ours.other}\n promtool: {theirs.other}")
        keys = set(ours.blocks) ^ set(theirs.blocks)
        keys |= {k for k in ours.blocks.keys() & theirs.blocks.keys() if ours.blocks[k] != theirs.blocks[k]}
        header = re.compile(r'^    expr: (".*"), time: (\S+?),')
        import json

        for key in sorted(keys):
            match = header.match(key)
            if match is None:
                continue
            expr_text, time = json.loads(match.group(1)), match.group(2)
            node = next((n for (e, _), n in cases.items() if e == expr_text), None)
            if node is None:
                continue
            single = {"test.yaml": dump(expr_test(series, [(expr_text, time)]))}
            _confirm(ws, single, lambda s=series, n=node, t=time: minimise_expr(ws, s, n, t), totals, log)


def fuzz_alerts(gen: Generator, ws: Workspace, batches: int, per_batch: int, totals: Totals,
                log: Callable[[str], None] = print) -> None:
    """Each rule gets its own test file and rule file (a rule error ends only its own file)."""
    for _ in range(batches):
        series = gen.series()
        rules = [gen.alert(i) for i in range(per_batch)]
        totals.alerts += len(rules)
        names = []
        for rule in rules:
            test = alert_test(series, [rule], ALERT_TIMES)
            test["rule_files"] = [f"rules_{rule.name}.yaml"]
            ws.write({f"test_{rule.name}.yaml": dump(test), f"rules_{rule.name}.yaml": dump(rule_file([rule]))})
            names.append(f"test_{rule.name}.yaml")
        ours = run_ours(ws.root, names)
        theirs = run_promtool(ws.root, names)
        for rule, name in zip(rules, names, strict=True):
            if name in ours and name in theirs and ours[name].same_as(theirs[name]):
                continue
            single = {"test.yaml": dump(alert_test(series, [rule], ALERT_TIMES)),
                      "rules.yaml": dump(rule_file([rule]))}
            _confirm(ws, single, lambda s=series, r=rule: minimise_alert(ws, s, r, ALERT_TIMES), totals, log)

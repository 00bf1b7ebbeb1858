"""Load and validate Prometheus rule files, strictly, with ``file:line`` errors.

Contract:
- :func:`load_rule_files` reads files and globs (in order; a glob's matches sorted) and returns a
  :class:`RuleSet` whose groups keep file order and rule order.
- Validation follows ``promtool check rules`` (Prometheus 2.42 ``rulefmt``): unknown keys, duplicate keys,
  empty or repeated group names in one file, ``record`` xor ``alert``, missing ``expr``, invalid durations,
  ``for``/``keep_firing_for``/``annotations`` on recording rules, invalid record names, label and
  annotation names, label templates and annotation templates (unknown functions included), and
  PromQL parse errors through :func:`watchdog.promql.parse_query` (which also rejects what our
  evaluator does not support). With ``lint_duplicates`` (default), two rules of a group with the same
  name and labels are an error too (promtool reports those as a lint finding).
- Every problem found is collected; one :class:`RuleLoadError` carries them all, each naming file,
  line, group, rule and what is wrong.
- :func:`load_ruleset` combines the config's ``rules.paths`` with the groups generated from the config
  (SLOs, the KV forecast's horizon) by ``watchdog.engines.slo`` and ``watchdog.engines.forecast``.
- An empty ``rules.paths`` (the default) means :func:`default_rule_paths`: the shipped rule pack, found
  from the installed package wherever it is installed, then the site rules in
  ``/etc/inference-watchdog/rules/*.yaml``; a site file with the name of a shipped one replaces it.
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from watchdog.config.settings import Settings
from watchdog.engines.forecast import forecast_rule_groups
from watchdog.engines.slo import slo_rule_groups
from watchdog.infra.yamllines import line_of
from watchdog.rules.durations import DurationError, parse_duration
from watchdog.rules.templates import TemplateParseError, check_template
from watchdog.rules.yamlnodes import (
    Entry,
    YamlError,
    compose,
    is_null,
    mapping_entries,
    scalar,
    sequence,
    string_map,
)

LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

GROUP_KEYS = ("name", "interval", "limit", "rules")
RULE_KEYS = ("record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations")
GENERATED_SOURCE = "<generated>"


@dataclass(frozen=True)
class RuleProblem:
    """One validation problem. ``rule`` is the rule's name (or ""), ``index`` its 1-based position."""

    file: str
    line: int
    problem: str
    group: str = ""
    rule: str = ""
    index: int = 0

    def __str__(self) -> str:
        parts = [f"{self.file}:{self.line}" if self.line else self.file]
        if self.group:
            parts.append(f'group "{self.group}"')
        if self.index:
            parts.append(f'rule {self.index} "{self.rule}"' if self.rule else f"rule {self.index}")
        return ": ".join([parts[0], ", ".join(parts[1:]), self.problem] if len(parts) > 1 else
                         [parts[0], self.problem])


class RuleLoadError(Exception):
    """Rule files that failed validation. ``problems`` lists every problem; the attributes ``file``,
    ``line``, ``group``, ``rule`` and ``problem`` describe the first one."""

    def __init__(self, problems: Sequence[RuleProblem]) -> None:
        self.problems = list(problems)
        first = self.problems[0]
        self.file, self.line, self.group, self.rule, self.problem = (
            first.file, first.line, first.group, first.rule, first.problem)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class RecordingRule:
    """``record: NAME`` with its expression and static labels."""

    record: str
    expr: str
    labels: dict[str, str]
    query: Any = field(compare=False, repr=False)
    line: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        """The rule's name (the recorded metric name)."""
        return self.record


@dataclass(frozen=True)
class AlertingRule:
    """``alert: NAME`` with ``for``/``keep_firing_for`` (ms) and templated labels/annotations."""

    alert: str
    expr: str
    for_ms: int
    keep_firing_for_ms: int
    labels: dict[str, str]
    annotations: dict[str, str]
    query: Any = field(compare=False, repr=False)
    line: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        """The rule's name (the alert name)."""
        return self.alert


Rule = RecordingRule | AlertingRule


@dataclass(frozen=True)
class RuleGroup:
    """A group: its rules run in order, each seeing the results of the ones before it."""

    name: str
    file: str
    rules: tuple[Rule, ...]
    interval_ms: int | None = None
    limit: int = 0
    line: int = 0


@dataclass(frozen=True)
class RuleSet:
    """Groups in evaluation order, plus the files they came from."""

    groups: tuple[RuleGroup, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def rule_count(self) -> int:
        """Number of rules over all groups."""
        return sum(len(g.rules) for g in self.groups)

    def alerting_rules(self) -> list[tuple[RuleGroup, AlertingRule]]:
        """Every alerting rule with its group."""
        return [(g, r) for g in self.groups for r in g.rules if isinstance(r, AlertingRule)]

    def merged(self, other: RuleSet) -> RuleSet:
        """This rule set followed by ``other``."""
        return RuleSet(self.groups + other.groups, self.files + other.files)


def expand_paths(paths_or_globs: Iterable[str], base_dir: str | None = None) -> list[str]:
    """Files named by paths and globs, in order, without repeats; a glob's matches are sorted.

    A plain path that does not exist is returned as is (loading it reports the error); a glob that
    matches nothing contributes nothing (as in Prometheus' ``rule_files``).
    """
    out: list[str] = []
    for item in paths_or_globs:
        path = item if base_dir is None or os.path.isabs(item) else os.path.join(base_dir, item)
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
        for match in matches:
            if match not in out:
                out.append(match)
    return out


def load_rule_files(paths_or_globs: Iterable[str], *, lint_duplicates: bool = True) -> RuleSet:
    """Load and validate rule files; raises :class:`RuleLoadError` listing every problem found."""
    files = expand_paths(paths_or_globs)
    groups: list[RuleGroup] = []
    problems: list[RuleProblem] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(RuleProblem(path, 0, f"cannot read rule file: {exc}"))
            continue
        file_groups, file_problems = parse_rule_text(text, path, lint_duplicates=lint_duplicates)
        groups.extend(file_groups)
        problems.extend(file_problems)
    if problems:
        raise RuleLoadError(problems)
    return RuleSet(tuple(groups), tuple(files))


def load_rule_text(text: str, source: str = "<string>", *, lint_duplicates: bool = True) -> RuleSet:
    """Validate rule-file text (e.g. generated); raises :class:`RuleLoadError`."""
    groups, problems = parse_rule_text(text, source, lint_duplicates=lint_duplicates)
    if problems:
        raise RuleLoadError(problems)
    return RuleSet(tuple(groups), (source,))


def load_rule_groups(
    group_dicts: Sequence[Mapping[str, Any]], source: str = GENERATED_SOURCE, *, lint_duplicates: bool = True
) -> RuleSet:
    """Validate groups given as plain dicts (the rule-file shape), via their YAML form."""
    text = yaml.safe_dump({"groups": [dict(g) for g in group_dicts]}, sort_keys=False, allow_unicode=True)
    return load_rule_text(text, source, lint_duplicates=lint_duplicates)


def parse_rule_text(
    text: str, source: str, *, lint_duplicates: bool = True
) -> tuple[list[RuleGroup], list[RuleProblem]]:
    """Parse one rule file's text into groups and the problems found (pure; no I/O)."""
    try:
        root = compose(text)
    except YamlError as exc:
        return [], [RuleProblem(source, exc.line, exc.problem)]
    if root is None:
        return [], []
    problems: list[RuleProblem] = []
    try:
        top = mapping_entries(root, "rule file")
    except YamlError as exc:
        return [], [RuleProblem(source, exc.line, exc.problem)]
    groups_node: yaml.Node | None = None
    for entry in top:
        if entry.key == "groups":
            groups_node = entry.value
        else:
            problems.append(RuleProblem(source, line_of(entry.key_node),
                                        f"field {entry.key} not found in type rulefmt.RuleGroups"))
    groups: list[RuleGroup] = []
    if groups_node is None:
        return groups, problems
    try:
        group_nodes = sequence(groups_node, "groups")
    except YamlError as exc:
        return groups, [*problems, RuleProblem(source, exc.line, exc.problem)]
    seen_names: set[str] = set()
    for group_node in group_nodes:
        group = _parse_group(group_node, source, problems, seen_names, lint_duplicates)
        if group is not None:
            groups.append(group)
    return groups, problems


def _parse_group(
    node: yaml.Node, source: str, problems: list[RuleProblem], seen_names: set[str], lint_duplicates: bool
) -> RuleGroup | None:
    line = line_of(node)
    try:
        entries = mapping_entries(node, "group")
    except YamlError as exc:
        problems.append(RuleProblem(source, exc.line, exc.problem))
        return None
    values = {entry.key: entry for entry in entries if entry.key in GROUP_KEYS}
    name = ""
    try:
        name = scalar(values["name"].value, "name") if "name" in values else ""
    except YamlError as exc:
        problems.append(RuleProblem(source, exc.line, exc.problem))
    for entry in entries:
        if entry.key not in GROUP_KEYS:
            problems.append(RuleProblem(source, line_of(entry.key_node),
                                        f"field {entry.key} not found in type rulefmt.RuleGroup", group=name))
    if not name:
        problems.append(RuleProblem(source, line, "Groupname must not be empty"))
    elif name in seen_names:
        problems.append(RuleProblem(source, line, f'groupname: "{name}" is repeated in the same file',
                                    group=name))
    seen_names.add(name)
    interval_ms: int | None = None
    if "interval" in values:
        interval_ms = _duration(values["interval"], source, problems, name, "", 0)
        if interval_ms == 0:
            interval_ms = None
    limit = 0
    if "limit" in values:
        try:
            limit = _yaml_int(values["limit"].value)
        except (ValueError, YamlError):
            problems.append(RuleProblem(source, line_of(values["limit"].value),
                                        "limit: expected an integer", group=name))
    rules: list[Rule] = []
    rule_nodes: list[yaml.Node] = []
    if "rules" in values:
        try:
            rule_nodes = sequence(values["rules"].value, "rules")
        except YamlError as exc:
            problems.append(RuleProblem(source, exc.line, exc.problem, group=name))
    seen_rules: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}
    for index, rule_node in enumerate(rule_nodes, start=1):
        rule = _parse_rule(rule_node, source, name, index, problems)
        if rule is None:
            continue
        kind = "record" if isinstance(rule, RecordingRule) else "alert"
        key = (kind, rule.name, tuple(sorted(rule.labels.items())))
        if lint_duplicates and key in seen_rules:
            problems.append(RuleProblem(
                source, rule.line,
                f"duplicate rule: same {kind} name and labels as rule {seen_rules[key]} of this group",
                group=name, rule=rule.name, index=index))
        seen_rules.setdefault(key, index)
        rules.append(rule)
    return RuleGroup(name, source, tuple(rules), interval_ms, limit, line)


def _yaml_int(node: yaml.Node) -> int:
    """A YAML value decoded into a Go ``int`` as ``yaml.v3`` does: null is 0, an integer (``0x10``
    too) is itself, a float is truncated, a string (even ``"3"``) is an error (ValueError)."""
    if is_null(node):
        return 0
    if not isinstance(node, yaml.ScalarNode) or node.tag not in ("tag:yaml.org,2002:int",
                                                                  "tag:yaml.org,2002:float"):
        raise ValueError("not a number")
    text = node.value.replace("_", "")
    try:
        return int(text, 0)
    except ValueError:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("not finite") from None
        return int(value)


def _duration(entry: Entry, source: str, problems: list[RuleProblem], group: str, rule: str,
              index: int) -> int:
    try:
        if is_null(entry.value):  # `for:` with nothing is zero; `for: ""` is an empty duration string
            return 0
        return parse_duration(scalar(entry.value, entry.key))
    except (YamlError, DurationError) as exc:
        message = str(exc).replace("'", '"')
        problems.append(RuleProblem(source, line_of(entry.value), f"{entry.key}: {message}",
                                    group=group, rule=rule, index=index))
        return 0


def _parse_rule(node: yaml.Node, source: str, group: str, index: int,
                problems: list[RuleProblem]) -> Rule | None:
    line = line_of(node)
    try:
        entries = mapping_entries(node, "rule")
    except YamlError as exc:
        problems.append(RuleProblem(source, exc.line, exc.problem, group=group, index=index))
        return None
    values: dict[str, Entry] = {}
    local: list[RuleProblem] = []

    def problem(at: int, message: str, name: str = "") -> None:
        local.append(RuleProblem(source, at, message, group=group, rule=name, index=index))

    for entry in entries:
        if entry.key not in RULE_KEYS:
            problem(line_of(entry.key_node), f"field {entry.key} not found in type rulefmt.RuleNode")
        else:
            values[entry.key] = entry

    def text_of(key: str) -> str:
        if key not in values:
            return ""
        try:
            return scalar(values[key].value, key)
        except YamlError as exc:
            problem(exc.line, exc.problem)
            return ""

    def map_of(key: str) -> dict[str, str]:
        if key not in values:
            return {}
        try:
            return string_map(values[key].value, key)
        except YamlError as exc:
            problem(exc.line, exc.problem)
            return {}

    record, alert, expr = text_of("record"), text_of("alert"), text_of("expr")
    name = alert or record
    name_line = line_of(values["alert"].value) if alert else (
        line_of(values["record"].value) if "record" in values else line)
    if record and alert:
        problem(name_line, "only one of 'record' and 'alert' must be set", name)
    if not record and not alert:
        problem(line, "one of 'record' or 'alert' must be set", name)
    for_ms = _duration(values["for"], source, local, group, name, index) if "for" in values else 0
    keep_ms = (_duration(values["keep_firing_for"], source, local, group, name, index)
               if "keep_firing_for" in values else 0)
    labels = map_of("labels")
    annotations = map_of("annotations")
    query = None
    expr_line = line_of(values["expr"].value) if "expr" in values else line
    if not expr:
        problem(expr_line, "field 'expr' must be set in rule", name)
    else:
        query = _parse_expr(expr, expr_line, name, problem)
    if record:
        if annotations:
            problem(name_line, "invalid field 'annotations' in recording rule", name)
        if for_ms:
            problem(name_line, "invalid field 'for' in recording rule", name)
        if keep_ms:
            problem(name_line, "invalid field 'keep_firing_for' in recording rule", name)
        if not METRIC_NAME_RE.match(record):
            problem(name_line, f"invalid recording rule name: {record}", name)
    labels_line = line_of(values["labels"].value) if "labels" in values else line
    for key in sorted(labels):
        if not LABEL_NAME_RE.match(key) or key == "__name__":
            problem(labels_line, f"invalid label name: {key}", name)
    annotations_line = line_of(values["annotations"].value) if "annotations" in values else line
    for key in sorted(annotations):
        if not LABEL_NAME_RE.match(key):
            problem(annotations_line, f"invalid annotation name: {key}", name)
    if alert:
        for kind, mapping, at in (("label", labels, labels_line), ("annotation", annotations,
                                                                   annotations_line)):
            for key in sorted(mapping):
                try:
                    check_template(mapping[key], alert)
                except TemplateParseError as exc:
                    problem(at, f'{kind} "{key}": {exc}', name)
    for item in local:
        problems.append(item if item.rule or not name else RuleProblem(
            item.file, item.line, item.problem, item.group, name, item.index))
    if local:
        return None
    if record:
        return RecordingRule(record, expr, labels, query, line)
    return AlertingRule(alert, expr, for_ms, keep_ms, labels, annotations, query, line)


def _parse_expr(expr: str, line: int, name: str, problem: Any) -> Any:
    from watchdog.promql import PromQLError, parse_query

    try:
        return parse_query(expr)
    except PromQLError as exc:
        problem(line, f"could not parse expression: {exc}", name)
        return None


SITE_RULES_DIR = "/etc/inference-watchdog/rules"


def shipped_rule_files() -> list[str]:
    """The shipped rule pack (``rules/*.yaml`` of the first asset directory, sorted), or []."""
    from watchdog.infra.paths import asset_dir

    folder = asset_dir("rules")
    return sorted(str(p) for p in folder.glob("*.yaml")) if folder else []


def default_rule_paths(site_dir: str = SITE_RULES_DIR) -> list[str]:
    """What an empty ``rules.paths`` loads: the shipped pack, then ``site_dir/*.yaml``; a site file named
    like a shipped one replaces it (so a site can patch one file of the pack)."""
    site = sorted(glob.glob(os.path.join(glob.escape(site_dir), "*.yaml")))
    site_names = {os.path.basename(p) for p in site}
    return [p for p in shipped_rule_files() if os.path.basename(p) not in site_names] + site


def configured_rule_paths(settings: Settings) -> list[str]:
    """``rules.paths``, or :func:`default_rule_paths` when it is empty."""
    return list(settings.rules.paths) or default_rule_paths()


def load_ruleset(settings: Settings, *, lint_duplicates: bool = True) -> RuleSet:
    """The node's full rule set: ``rules.paths`` files (see :func:`configured_rule_paths`), then groups
    generated from the config (SLOs, the KV forecast's horizon)."""
    files = load_rule_files(configured_rule_paths(settings), lint_duplicates=lint_duplicates)
    generated = [*slo_rule_groups(settings), *forecast_rule_groups(settings)]
    if not generated:
        return files
    return files.merged(load_rule_groups(generated, GENERATED_SOURCE, lint_duplicates=lint_duplicates))


def ruleset_to_dict(ruleset: RuleSet) -> dict[str, Any]:
    """The rule set as one Prometheus rule-file document (``{"groups": [...]}``)."""
    groups: list[dict[str, Any]] = []
    for group in ruleset.groups:
        out: dict[str, Any] = {"name": group.name}
        if group.interval_ms:
            from watchdog.rules.durations import format_duration

            out["interval"] = format_duration(group.interval_ms)
        if group.limit:
            out["limit"] = group.limit
        rules: list[dict[str, Any]] = []
        for rule in group.rules:
            rules.append(rule_to_dict(rule))
        out["rules"] = rules
        groups.append(out)
    return {"groups": groups}


def rule_to_dict(rule: Rule) -> dict[str, Any]:
    """One rule in rule-file shape, keys in Prometheus' order."""
    from watchdog.rules.durations import format_duration

    if isinstance(rule, RecordingRule):
        out: dict[str, Any] = {"record": rule.record, "expr": rule.expr}
        if rule.labels:
            out["labels"] = dict(rule.labels)
        return out
    out = {"alert": rule.alert, "expr": rule.expr}
    if rule.for_ms:
        out["for"] = format_duration(rule.for_ms)
    if rule.keep_firing_for_ms:
        out["keep_firing_for"] = format_duration(rule.keep_firing_for_ms)
    if rule.labels:
        out["labels"] = dict(rule.labels)
    if rule.annotations:
        out["annotations"] = dict(rule.annotations)
    return out

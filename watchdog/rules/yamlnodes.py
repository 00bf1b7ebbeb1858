"""YAML read as a node tree with line numbers, so rule and test files can report ``file:line`` errors.

Contract: :func:`compose` returns PyYAML's node tree (or None for an empty document) and raises
:class:`YamlError` with a 1-based line on a syntax error. Scalars are read as their source text, like
Go's yaml decoders read them into string fields, so ``1.0`` stays ``"1.0"`` and ``yes`` stays ``"yes"``.
:func:`mapping_entries` rejects duplicate keys (as yaml.v3 does) and resolves ``<<`` merge keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from watchdog.infra.yamlguard import YamlBoundsError, check_yaml
from watchdog.infra.yamllines import line_of

NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"

try:  # the C loader is much faster on large rule files; fall back when libyaml is absent
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


class YamlError(ValueError):
    """A YAML problem at a 1-based ``line`` (0 when unknown)."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


@dataclass(frozen=True)
class Entry:
    """One ``key: value`` pair of a mapping node."""

    key: str
    key_node: yaml.Node
    value: yaml.Node


def compose(text: str) -> yaml.Node | None:
    """The node tree of a single-document YAML text; raises :class:`YamlError` (also for a text outside
    :mod:`watchdog.infra.yamlguard`'s bounds: binary, too deep, an alias bomb)."""
    try:
        check_yaml(text)
    except YamlBoundsError as exc:
        raise YamlError(exc.line, f"yaml: {exc.problem}") from None
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise YamlError(line, f"yaml: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise YamlError(0, f"yaml: {exc}") from exc


def is_null(node: yaml.Node | None) -> bool:
    """True for an absent value or an explicit YAML null (``~``, ``null``, empty)."""
    return node is None or (isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG)


def kind_name(node: yaml.Node) -> str:
    """A short name of the node's kind for error messages."""
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "sequence"
    return f"scalar {node.value!r}"


def scalar(node: yaml.Node | None, what: str) -> str:
    """The source text of a scalar node (null reads as ""); raises :class:`YamlError` otherwise."""
    if node is None or is_null(node):
        return ""
    if not isinstance(node, yaml.ScalarNode):
        raise YamlError(line_of(node), f"{what}: expected a string, got a {kind_name(node)}")
    return str(node.value)


def sequence(node: yaml.Node | None, what: str) -> list[yaml.Node]:
    """The items of a sequence node (null reads as empty); raises :class:`YamlError` otherwise."""
    if node is None or is_null(node):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise YamlError(line_of(node), f"{what}: expected a list, got a {kind_name(node)}")
    return list(node.value)


def mapping_entries(node: yaml.Node | None, what: str) -> list[Entry]:
    """The entries of a mapping node in source order (null reads as empty); duplicate keys are errors."""
    if node is None or is_null(node):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise YamlError(line_of(node), f"{what}: expected a mapping, got a {kind_name(node)}")
    entries: list[Entry] = []
    merged: list[Entry] = []
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == MERGE_TAG:
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                merged.extend(mapping_entries(source, what))
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            raise YamlError(line_of(key_node), f"{what}: mapping keys must be strings")
        key = str(key_node.value)
        if key in seen:
            raise YamlError(
                line_of(key_node), f"{what}: mapping key {key!r} already defined at line {seen[key]}"
            )
        seen[key] = line_of(key_node)
        entries.append(Entry(key, key_node, value_node))
    entries.extend(entry for entry in merged if entry.key not in seen)
    return entries


def string_map(node: yaml.Node | None, what: str) -> dict[str, str]:
    """A mapping of strings to strings (``labels``, ``annotations``), values read as source text."""
    return {entry.key: scalar(entry.value, f"{what}.{entry.key}") for entry in mapping_entries(node, what)}

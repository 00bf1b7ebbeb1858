"""Render a :class:`RuleSet` as one Prometheus rule file (``rules render``).

Contract: the output is a single YAML document ``{"groups": [...]}`` that ``promtool check rules``
accepts: keys in Prometheus' order, multi-line expressions as literal blocks, and group names made
unique (a name that several files use gets `` (FILE)`` appended; the renames are returned).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from watchdog.rules.loader import RuleSet, ruleset_to_dict


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as ``|`` literals."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)


def render_ruleset(ruleset: RuleSet) -> tuple[str, list[tuple[str, str]]]:
    """The rule file text and the ``(old, new)`` group renames made to keep names unique."""
    doc = ruleset_to_dict(ruleset)
    seen: set[str] = set()
    renamed: list[tuple[str, str]] = []
    for group, out in zip(ruleset.groups, doc["groups"], strict=True):
        name = str(out["name"])
        if name in seen:
            new = f"{name} ({os.path.basename(group.file)})"
            suffix = 2
            while new in seen:
                new = f"{name} ({os.path.basename(group.file)} {suffix})"
                suffix += 1
            out["name"] = new
            renamed.append((name, new))
            name = new
        seen.add(name)
    header = "# The rule set this node evaluates (inference-watchdog rules render).\n"
    if ruleset.files:
        header += "# Sources: " + ", ".join(ruleset.files) + "\n"
    body: Any = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                          allow_unicode=True, width=1 << 20)
    return header + str(body), renamed

"""Render a :class:`RuleSet` as one Prometheus rule file, or as a ``PrometheusRule`` object (``rules render``).

Contract: the output is a single YAML document that ``promtool check rules`` accepts (``{"groups": [...]}``),
or, with :class:`PrometheusRuleMeta`, the prometheus-operator's ``monitoring.coreos.com/v1``
``PrometheusRule`` whose ``spec`` is that document. Keys in Prometheus' order, multi-line expressions as
literal blocks, group names made unique (a name that several files use gets `` (FILE)`` appended; the
renames are returned). Every alert that names a runbook gets a static ``runbook_url`` annotation from
``runbook_url(runbook id)`` when one is given. With :class:`CentralOptions` the rules are translated for a
central Prometheus (watchdog/rules/central.py); what was changed and left out is returned and written as
comments at the top of the output.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import yaml

from watchdog.rules.central import CentralOptions, RuleNote, translate_for_central, with_runbook_url
from watchdog.rules.loader import RuleSet, ruleset_to_dict


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as ``|`` literals."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)

PROMETHEUS_RULE_API_VERSION = "monitoring.coreos.com/v1"


@dataclasses.dataclass(frozen=True)
class PrometheusRuleMeta:
    """``metadata`` of the ``PrometheusRule`` object (``labels`` select it in a Prometheus' ruleSelector)."""

    name: str = "inference-watchdog"
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """What to render: ``central`` None is the node's own rule set; ``kubernetes`` None a plain rule file."""

    runbook_url: Callable[[str], str] | None = None
    central: CentralOptions | None = None
    kubernetes: PrometheusRuleMeta | None = None


@dataclasses.dataclass(frozen=True)
class Rendered:
    """The YAML text and what the rendering changed: group renames, rewritten and left-out rules."""

    text: str
    renamed: tuple[tuple[str, str], ...]
    changed: tuple[RuleNote, ...] = ()
    left_out: tuple[RuleNote, ...] = ()


def _unique_names(ruleset: RuleSet, groups: list[dict[str, Any]]) -> list[tuple[str, str]]:
    files = {group.name: [] for group in ruleset.groups}  # type: dict[str, list[str]]
    for group in ruleset.groups:
        files[group.name].append(group.file)
    seen: set[str] = set()
    renamed: list[tuple[str, str]] = []
    occurrence: dict[str, int] = {}
    for out in groups:
        name = str(out["name"])
        index = occurrence.get(name, 0)
        occurrence[name] = index + 1
        if name in seen:
            source = os.path.basename(files[name][min(index, len(files[name]) - 1)])
            new = f"{name} ({source})"
            suffix = 2
            while new in seen:
                new = f"{name} ({source} {suffix})"
                suffix += 1
            out["name"] = new
            renamed.append((name, new))
            name = new
        seen.add(name)
    return renamed


def _comment(lines: list[str]) -> str:
    return "".join(f"#   {line}\n" for line in lines)


def render_rules(ruleset: RuleSet, options: RenderOptions = RenderOptions()) -> Rendered:
    """The rendered text and what changed (see the module docstring)."""
    changed: tuple[RuleNote, ...] = ()
    left_out: tuple[RuleNote, ...] = ()
    if options.central is not None:
        central = translate_for_central(ruleset, options.central, options.runbook_url)
        groups = [dict(group) for group in central.groups]
        changed, left_out = central.changed, central.left_out
        header = ("# The node's rule set for a central Prometheus (inference-watchdog rules render "
                  f"--target central: node label {options.central.node_label!r}, scrape interval "
                  f"{options.central.scrape_interval_ms / 1000:g}s).\n")
    else:
        groups = list(ruleset_to_dict(ruleset)["groups"])
        if options.runbook_url is not None:
            groups = [{**g, "rules": [with_runbook_url(r, options.runbook_url) for r in g["rules"]]}
                      for g in groups]
        header = "# The rule set this node evaluates (inference-watchdog rules render).\n"
    renamed = _unique_names(ruleset, groups)
    if ruleset.files:
        header += "# Sources: " + ", ".join(ruleset.files) + "\n"
    if changed:
        header += "# Changed for a central Prometheus:\n" + _comment([note.line() for note in changed])
    if left_out:
        header += ("# Left out (the agent on each node still evaluates them and exports their results "
                   "and ALERTS):\n" + _comment([note.line() for note in left_out]))
    doc: dict[str, Any] = {"groups": groups}
    if options.kubernetes is not None:
        meta: dict[str, Any] = {"name": options.kubernetes.name}
        if options.kubernetes.namespace:
            meta["namespace"] = options.kubernetes.namespace
        if options.kubernetes.labels:
            meta["labels"] = dict(options.kubernetes.labels)
        doc = {"apiVersion": PROMETHEUS_RULE_API_VERSION, "kind": "PrometheusRule", "metadata": meta,
               "spec": doc}
    body: Any = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                          allow_unicode=True, width=1 << 20)
    return Rendered(header + str(body), tuple(renamed), changed, left_out)


def render_ruleset(ruleset: RuleSet) -> tuple[str, list[tuple[str, str]]]:
    """The node's rule file text and the ``(old, new)`` group renames made to keep names unique."""
    rendered = render_rules(ruleset)
    return rendered.text, list(rendered.renamed)

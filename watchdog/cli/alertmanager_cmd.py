"""``inference-watchdog alertmanager inhibit-rules [--merge FILE]``: Alertmanager's side of one incident, one cause.

Prints the ``inhibit_rules`` that let an incident's cause alert mute its symptoms
(:func:`watchdog.notify.decisions.incidents.inhibit_rules`, docs/incidents.md) as Alertmanager config YAML. With
``--merge FILE`` it prints FILE (an ``alertmanager.yml``) with those rules merged in: the operator's own
inhibit rules are kept, rules generated earlier (recognised by their ``alertname!~"Watchdog.*"`` target
matcher) are replaced, so re-running after an upgrade is safe. The file is read and written round-trip
(``ruamel.yaml``): its comments, key order and quoting stay as the operator wrote them. The output is
plain YAML: no ``&id001`` anchors, every rule written out in full. Errors (unreadable or invalid YAML, not a
mapping) go to stderr naming the file, exit 2. Alertmanager has no API for inhibit rules: its config is
the only way in.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

GENERATED_MARK = 'alertname!~"Watchdog.*"'


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``alertmanager`` command."""
    parser = sub.add_parser("alertmanager", help="Alertmanager config the agent's alerts need (inhibit rules)")
    inner = parser.add_subparsers(dest="alertmanager_command", metavar="ACTION")
    inner.required = True
    rules = inner.add_parser("inhibit-rules", help="print the cause/symptom inhibit rules, or merge them into "
                                                   "an alertmanager.yml")
    rules.add_argument("--merge", metavar="FILE", help="an alertmanager.yml to print with the rules merged in")
    rules.set_defaults(func=_inhibit_rules)


def merge_inhibit_rules(config: dict[str, Any], generated: list[dict[str, Any]]) -> dict[str, Any]:
    """``config`` with ``generated`` replacing earlier generated rules; the operator's own rules kept first."""
    own = [r for r in config.get("inhibit_rules") or []
           if not (isinstance(r, dict) and GENERATED_MARK in (r.get("target_matchers") or []))]
    return {**config, "inhibit_rules": [*own, *generated]}


def plain_yaml(document: Any) -> str:
    """``document`` as YAML without anchors and aliases (a rule shared by two lists is written twice)."""
    import yaml

    class NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(document, Dumper=NoAliases, sort_keys=False, width=1000)


def merge_text(text: str, source: str, generated: list[dict[str, Any]]) -> str:
    """``text`` (an alertmanager.yml) with ``generated`` merged as :func:`merge_inhibit_rules` does, its
    comments and layout kept; raises ValueError naming ``source`` for YAML that is not a mapping."""
    import io
    import json

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 1000
    rt.indent(mapping=2, sequence=4, offset=2)
    try:
        config = rt.load(text)
    except YAMLError as exc:
        raise ValueError(f"{source}: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{source}: not an Alertmanager config (a YAML mapping)")
    rules = config.get("inhibit_rules")
    if rules is None:
        config["inhibit_rules"] = rules = []
    for index in reversed(range(len(rules))):  # in place: the comments of the kept rules stay with them
        rule = rules[index]
        if isinstance(rule, dict) and GENERATED_MARK in (rule.get("target_matchers") or []):
            del rules[index]
    rules.extend(json.loads(json.dumps(generated)))  # unshared copies: no anchors in the output
    out = io.StringIO()
    rt.dump(config, out)
    return out.getvalue()


def _inhibit_rules(args: argparse.Namespace) -> int:
    from watchdog.notify.decisions.incidents import inhibit_rules

    generated = inhibit_rules()
    if not args.merge:
        sys.stdout.write(plain_yaml({"inhibit_rules": generated}))
        return 0
    try:
        with open(args.merge, encoding="utf-8") as f:
            text = f.read()
        sys.stdout.write(merge_text(text, args.merge, generated))
    except OSError as exc:
        print(f"error: {args.merge}: {exc.strerror}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0

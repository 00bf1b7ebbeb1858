"""``inference-watchdog alertmanager inhibit-rules [--merge FILE]``: Alertmanager's side of one incident, one cause.

Prints the ``inhibit_rules`` that let an incident's cause alert mute its symptoms
(:func:`watchdog.notify.decisions.incidents.inhibit_rules`, docs/incidents.md) as Alertmanager config YAML. With
``--merge FILE`` it prints FILE (an ``alertmanager.yml``) with those rules merged in: the operator's own
inhibit rules are kept, rules generated earlier (recognised by their ``alertname!~"Watchdog.*"`` target
matcher) are replaced, so re-running after an upgrade is safe. Errors (unreadable or invalid YAML, not a
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


def _inhibit_rules(args: argparse.Namespace) -> int:
    import yaml

    from watchdog.notify.decisions.incidents import inhibit_rules

    generated = inhibit_rules()
    if not args.merge:
        sys.stdout.write(yaml.safe_dump({"inhibit_rules": generated}, sort_keys=False, width=1000))
        return 0
    try:
        with open(args.merge, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        print(f"error: {args.merge}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(config, dict):
        print(f"error: {args.merge}: not an Alertmanager config (a YAML mapping)", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(merge_inhibit_rules(config, generated), sort_keys=False, width=1000))
    return 0

"""``inference-watchdog silence add|list|expire``: our silences, in the spirit of ``amtool silence``.

``add MATCHER... [--duration 2h] [--author NAME] --comment TEXT``: a silence of the notifications of
alerts matching every matcher (``name=value``, ``!=``, ``=~``, ``!~``), stored in the state database of
``--config`` (default the one ``run`` uses); prints its id. An ``alertname`` matching no alert of the rule
set is refused with the nearest name ("did you mean"), unless ``--force``. ``list [--all] [--json]``:
active and pending silences (``--all``: expired too). ``expire ID...``: end silences now (an id prefix is
enough). Exit 0 done, 1 nothing to expire or a refused matcher, 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``silence`` command."""
    parser = sub.add_parser("silence", help="silence notifications (add, list, expire)")
    inner = parser.add_subparsers(dest="silence_command", metavar="ACTION")
    inner.required = True
    add = inner.add_parser("add", help="silence alerts matching every MATCHER")
    add.add_argument("matchers", nargs="+", metavar="MATCHER", help="name=value, name!=value, name=~re, name!~re")
    add.add_argument("--duration", default="1h", help="how long (Prometheus duration, default 1h)")
    add.add_argument("--author", default=None, help="who (default: $SUDO_USER or the login name)")
    add.add_argument("--comment", required=True, help="why (shown with the silence)")
    add.add_argument("--force", action="store_true", help="accept an alertname no rule defines")
    listing = inner.add_parser("list", help="active and pending silences")
    listing.add_argument("--all", action="store_true", help="include expired silences")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    expire = inner.add_parser("expire", help="end silences now")
    expire.add_argument("ids", nargs="+", metavar="ID", help="silence id (a unique prefix is enough)")
    for p, func in ((add, _add), (listing, _list), (expire, _expire)):
        p.add_argument("--config", default=None, help="config file (default: the one run uses)")
        p.set_defaults(func=func)


def _open(config_arg: str | None) -> tuple[Any, Any]:
    from watchdog.cli.common import load_node_settings
    from watchdog.infra.state import StateDB
    from watchdog.notify.decisions.silences import SilenceStore

    settings = load_node_settings(config_arg)
    return settings, SilenceStore(StateDB.in_dir(settings.state_dir))


def _store_or_report(config_arg: str | None) -> Any:
    """The silence store of the node's config, or None after printing why it cannot be opened."""
    from watchdog.config import ConfigError

    try:
        return _open(config_arg)[1]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _alert_names(config: Any) -> set[str]:
    """Alert names of this node's rule set and of the bundled rule pack (for "did you mean")."""
    from watchdog.infra.paths import asset_dir
    from watchdog.notify.dispatcher import NOTIFIER_FAILING
    from watchdog.rules.loader import load_rule_files, load_ruleset

    bundled = load_rule_files([str(asset_dir("rules") / "*.yaml")])  # type: ignore[operator]
    rulesets = (load_ruleset(config), bundled)
    return {rule.name for rs in rulesets for _, rule in rs.alerting_rules()} | {NOTIFIER_FAILING}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _add(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError
    from watchdog.infra.suggest import did_you_mean
    from watchdog.notify.decisions.silences import Matcher, MatcherError
    from watchdog.rules.durations import parse_duration

    try:
        matchers = [Matcher.parse(text) for text in args.matchers]
        duration_ms = parse_duration(args.duration)
        config, store = _open(args.config)
    except (MatcherError, ValueError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.force:
        names = _alert_names(config)
        for m in matchers:
            if m.name == "alertname" and m.op == "=" and m.value not in names:
                print(f"error: no alert is named {m.value!r}{did_you_mean(m.value, names)}; "
                      "--force silences it anyway", file=sys.stderr)
                return 1
    author = args.author or os.environ.get("SUDO_USER") or getpass.getuser()
    now = _now_ms()
    silence = store.add(matchers, now, now + duration_ms, author, args.comment, now)
    print(silence.id)
    return 0


def _list(args: argparse.Namespace) -> int:
    store = _store_or_report(args.config)
    if store is None:
        return 2
    now = _now_ms()
    silences = [s for s in store.all() if args.all or s.ends_ms > now]
    if args.json:
        json.dump([s.to_json(now) for s in silences], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not silences:
        print("no silences" if args.all else "no active silences")
        return 0
    rows = [("ID", "STATE", "ENDS AT", "CREATED BY", "MATCHERS", "COMMENT")]
    for s in silences:
        ends = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(s.ends_ms / 1000))
        rows.append((s.id[:12], s.state(now), ends, s.created_by, " ".join(str(m) for m in s.matchers), s.comment))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:  # like amtool silence query: a header, then one silence a line, the comment last
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return 0


def _expire(args: argparse.Namespace) -> int:
    store = _store_or_report(args.config)
    if store is None:
        return 2
    code = 0
    for silence_id in args.ids:
        expired = store.expire(silence_id, _now_ms())
        if expired is None:
            print(f"error: no active silence has the id {silence_id!r} (see `silence list`)", file=sys.stderr)
            code = 1
        else:
            print(f"expired {expired.id}")
    return code

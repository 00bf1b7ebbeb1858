"""``inference-watchdog check [--config PATH] [--json | --digest]``: exit 0 ok, 1 warning, 2 critical."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``check`` command."""
    parser = sub.add_parser("check", help="one-shot collect + evaluate; exit 0 ok, 1 warning, 2 critical")
    parser.add_argument("--config", default=None, help="config file (default: built-in defaults)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (docs/cli.md)")
    parser.add_argument("--digest", action="store_true",
                        help="print only the engine-config audit's findings, per engine (docs/engine-config-audit.md)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between the two collections (default 1)")
    parser.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from watchdog.check import run_check
    from watchdog.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config)
        report = run_check(settings, interval_seconds=args.interval)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.digest:
        from watchdog.engines.config_audit import config_digest

        sys.stdout.write(config_digest(report.alerts, settings.node or "this node"))
        return report.exit_code
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return report.exit_code
    for result in report.collectors:
        mark = "ok " if result.success else "FAIL"
        print(f"collector {mark} {result.name:<24} {result.duration_seconds * 1000:7.1f} ms  {result.error}")
    for alert in report.alerts:
        summary = alert.annotations.get("summary", "")
        print(f"{alert.severity.upper():<8} {alert.name} {alert.state.value}: {summary}")
    print(f"status: {report.status}")
    return report.exit_code

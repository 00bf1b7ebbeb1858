"""``inference-watchdog check [--config PATH] [--json | --digest]``: Nagios/Icinga exit codes 0 ok,
1 warning, 2 critical, 3 unknown (the config cannot be loaded, or the check itself crashed)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger("watchdog.check")

EXIT_UNKNOWN = 3


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``check`` command."""
    parser = sub.add_parser("check", help="one-shot collect + evaluate; exit 0 ok, 1 warning, 2 critical, "
                                          "3 unknown")
    parser.add_argument("--config", default=None,
                        help="config file (default /etc/inference-watchdog/config.yaml if it exists, "
                             "like run)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (docs/cli.md)")
    parser.add_argument("--digest", action="store_true",
                        help="print only the engine-config audit's findings, per engine (docs/engine-config-audit.md)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between the two collections (default 1)")
    parser.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from watchdog.check import run_check
    from watchdog.cli.common import config_path
    from watchdog.config import ConfigError, load_settings

    path = config_path(args.config)
    try:
        settings = load_settings(path)
        report = run_check(settings, interval_seconds=args.interval)
    except ConfigError as exc:
        print(f"UNKNOWN: config error: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except Exception as exc:  # the check's own boundary: a crash is "unknown", never "critical"
        log.exception("check crashed")
        print(f"UNKNOWN: the check itself failed: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.digest:
        from watchdog.engines.config_audit import config_digest

        sys.stdout.write(config_digest(report.alerts, settings.node or "this node"))
        return report.exit_code
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return report.exit_code
    print(f"config: {path or '(built-in defaults)'}")
    for result in report.collectors:
        mark = "ok  " if result.success else "FAIL"
        print(f"collector {mark} {result.name:<24} {result.duration_seconds * 1000:7.1f} ms  {result.error}")
    for problem in report.problems:
        print(f"{problem.severity.word.upper():<8} {problem.check}: {problem.message}")
        print(f"         what to do: {problem.fix}")
    for alert in report.alerts:
        summary = alert.annotations.get("summary", "")
        print(f"{alert.severity.upper():<8} {alert.name} {alert.state.value}: {summary}")
    print(f"status: {report.status}")
    return report.exit_code

"""``inference-watchdog check [--config PATH] [--format table|json|nagios | --json | --digest]``: Nagios/Icinga
exit codes 0 ok, 1 warning, 2 critical, 3 unknown (the config cannot be loaded, or the check itself
crashed).

Three renderings of one report: a readable table (each collector ``ok``, ``FAIL`` with its reason, or
``none`` when its subject is absent here, with its own duration; then the problems with what to do, and
the active alerts), ``--json`` (docs/cli.md), and ``--format nagios``: the Nagios plugin convention, one
status line ``INFERENCE-WATCHDOG <STATUS> - <what> | <perfdata>`` then the details, one per line.
A bad config is reported as ``config check`` reports it (every problem, ``file:line``, did-you-mean).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.check import CheckReport

log = logging.getLogger("watchdog.check")

EXIT_UNKNOWN = 3
FORMATS = ("table", "json", "nagios")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``check`` command."""
    parser = sub.add_parser("check", help="one-shot collect + evaluate; exit 0 ok, 1 warning, 2 critical, "
                                          "3 unknown")
    parser.add_argument("--config", default=None,
                        help="config file (default /etc/inference-watchdog/config.yaml if it exists, "
                             "like run)")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default), json (docs/cli.md) or nagios (one status line with perfdata, "
                             "then details: for Nagios, Icinga and Sensu)")
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument("--digest", action="store_true",
                        help="print only the engine-config audit's findings, per engine (docs/engine-config-audit.md)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between the two collections (default 1)")
    parser.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from watchdog.check import run_check
    from watchdog.cli.common import checked_settings, config_path
    from watchdog.config import ConfigError
    from watchdog.rules.loader import RuleLoadError

    fmt = "json" if args.json else args.format
    path = config_path(args.config)
    settings, lines = checked_settings(path, daemon=False)
    if settings is None:
        for line in lines:
            print(line, file=sys.stderr)
        print(f"UNKNOWN: the config {path} has problems (listed above; `inference-watchdog config check` "
              "lists the same)", file=sys.stderr if fmt == "json" else sys.stdout)
        return EXIT_UNKNOWN
    try:
        report = run_check(settings, interval_seconds=args.interval)
    except (ConfigError, RuleLoadError) as exc:
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
    if fmt == "json":
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif fmt == "nagios":
        sys.stdout.write(nagios_text(report))
    else:
        sys.stdout.write(table_text(report, path))
    return report.exit_code


def _mark(status: str) -> str:
    return {"ok": "ok  ", "failed": "FAIL", "no data": "none"}[status]


def table_text(report: CheckReport, path: str | None) -> str:
    """The readable report."""
    out = [f"config: {path or '(built-in defaults)'}"]
    for row in report.collector_rows():
        detail = row["error"] or (row["note"] or "nothing to collect here" if row["status"] == "no data" else "")
        out.append(f"collector {_mark(row['status'])} {row['name']:<24} {row['duration_seconds'] * 1000:7.1f} ms  "
                   f"{detail}".rstrip())
    for problem in report.problems:
        out.append(f"{problem.severity.word.upper():<8} {problem.check}: {problem.message}")
        out.append(f"         what to do: {problem.fix}")
    for alert in report.alerts:
        out.append(f"{alert.severity.upper():<8} {alert.name} {alert.state.value}: "
                   f"{alert.annotations.get('summary', '')}")
    out.append(f"status: {report.status}")
    return "\n".join(out) + "\n"


def _perf_label(name: str) -> str:
    """A perfdata label: quoted when it holds anything but letters, digits and ``_`` (Nagios' rule)."""
    safe = name.replace("'", "")
    return safe if safe.replace("_", "").isalnum() else f"'{safe}'"


def nagios_text(report: CheckReport) -> str:
    """The Nagios plugin output: ``INFERENCE-WATCHDOG STATUS - summary | perfdata``, then one detail per line."""
    rows = report.collector_rows()
    failed = [r for r in rows if r["status"] == "failed"]
    firing = [a for a in report.alerts if a.state.value == "firing"]
    if report.problems:
        summary = "; ".join(p.message for p in report.problems[:2])
        if len(report.problems) > 2:
            summary += f" (+{len(report.problems) - 2} more)"
    elif report.alerts:
        names = sorted({a.name for a in report.alerts})
        summary = f"{len(report.alerts)} alert(s) active: {', '.join(names[:3])}" + (" ..." if len(names) > 3 else "")
    else:
        summary = f"{len(rows)} collectors ok, no alert active"
    perf = [f"alerts_active={len(report.alerts)};;;0", f"alerts_firing={len(firing)};;;0",
            f"problems={len(report.problems)};;;0", f"collectors_failed={len(failed)};;;0;{len(rows)}"]
    perf += [f"{_perf_label('collector_' + r['name'] + '_seconds')}={r['duration_seconds']:.4f}s;;;0" for r in rows]
    lines = [f"INFERENCE-WATCHDOG {report.status.upper()} - {summary.replace('|', '/')} | {' '.join(perf)}"]
    for problem in report.problems:
        lines.append(f"{problem.severity.word.upper()}: {problem.check}: {problem.message} (what to do: {problem.fix})")
    for alert in report.alerts:
        lines.append(f"{alert.severity.upper()}: {alert.name} {alert.state.value}: "
                     f"{alert.annotations.get('summary', '')}")
    for row in rows:
        why = row["error"] or row["note"]
        lines.append(f"collector {row['name']}: {row['status']}" + (f": {why}" if why else ""))
    return "\n".join(line.replace("|", "/") if i else line for i, line in enumerate(lines)) + "\n"

"""``inference-watchdog config schema | check PATH``."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``config`` command."""
    parser = sub.add_parser("config", help="print the config JSON Schema or validate a config file")
    inner = parser.add_subparsers(dest="config_command", metavar="ACTION")
    inner.required = True
    schema = inner.add_parser("schema", help="print the JSON Schema of the config file")
    schema.set_defaults(func=_schema)
    check = inner.add_parser("check", help="validate a config file (exit 2 on error, as run does)")
    check.add_argument("path")
    check.set_defaults(func=_check)


def _schema(args: argparse.Namespace) -> int:
    from watchdog.config import schema

    json.dump(schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _check(args: argparse.Namespace) -> int:
    """Every problem in one pass (``watchdog.config.lint``), then what loading finds beyond the schema
    (:func:`watchdog.cli.common.checked_settings`, which ``run`` and ``check`` share)."""
    from watchdog.cli.common import checked_settings

    settings, lines = checked_settings(args.path, daemon=True)
    for line in lines:
        print(line, file=sys.stderr)
    if settings is None:
        return 2  # the exit code of `run` for the same error
    print(f"{args.path}: ok")
    return 0

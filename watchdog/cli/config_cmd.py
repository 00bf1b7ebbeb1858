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
    """Every problem in one pass (``watchdog.config.lint``), then what loading finds beyond the schema."""
    from watchdog.config import ConfigError, load_settings
    from watchdog.config.lint import config_problems
    from watchdog.daemon.preflight import preflight

    try:
        with open(args.path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        print(f"error: {args.path}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    problems = config_problems(text, args.path)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.path}: {len(problems)} problem(s)", file=sys.stderr)
        return 2
    try:
        preflight(load_settings(args.path), str(args.path))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2  # the exit code of `run` for the same error
    print(f"{args.path}: ok")
    return 0

"""The ``inference-watchdog`` command line: one module per subcommand, registered here.

Each module in :data:`COMMAND_MODULES` defines ``register(subparsers) -> None``, which adds its
subparser and sets ``func`` (``args -> int exit code``) via ``set_defaults``. Heavy imports stay inside
the handlers so that ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from watchdog import __version__

COMMAND_MODULES: tuple[str, ...] = (
    "run",
    "demo",
    "check",
    "query",
    "rules",
    "kmsg",
    "xid",
    "gpu",
    "silence",
    "alertmanager",
    "runbooks",
    "config",
    "plan",
    "loadtest",
    "engine",
    "notify",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="inference-watchdog",
        description="Per-node agent for GPU LLM inference hosts.",
    )
    parser.add_argument("--version", action="version", version=f"inference-watchdog {__version__}")
    _add_global_flags(parser, default=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"watchdog.cli.{name}_cmd").register(sub)
    for subparser in _subparsers(parser):
        _add_global_flags(subparser, default=False)
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, *, default: bool) -> None:
    """``--log-level`` and ``--log-format``: on the top parser with their defaults, and on every
    subcommand without one (``argparse.SUPPRESS``), so ``inference-watchdog check --log-level debug``
    works like ``inference-watchdog --log-level debug check`` and a flag after the command wins."""
    parser.add_argument("--log-level", default="info" if default else argparse.SUPPRESS,
                        choices=["debug", "info", "warning", "error"], help="log level (default info)")
    parser.add_argument("--log-format", default="auto" if default else argparse.SUPPRESS,
                        choices=["auto", "json", "text"],
                        help="log and alert lines: aligned text on a terminal, JSON lines otherwise (auto, the "
                             "default), or forced")


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand parser under ``parser``, nested ones (``rules check``) included."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *_subparsers(child)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from watchdog.infra.logs import setup_logging

    setup_logging(args.log_level, json_lines=None if args.log_format == "auto" else args.log_format == "json")
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

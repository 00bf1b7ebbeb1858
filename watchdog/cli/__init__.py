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
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="inference-watchdog",
        description="Per-node agent for GPU LLM inference hosts.",
    )
    parser.add_argument("--version", action="version", version=f"inference-watchdog {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "text"],
                        help="log and alert lines: aligned text on a terminal, JSON lines otherwise (auto, the "
                             "default), or forced")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"watchdog.cli.{name}_cmd").register(sub)
    return parser


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

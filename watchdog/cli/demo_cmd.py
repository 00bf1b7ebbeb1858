"""``inference-watchdog demo [--scenario NAME|PATH] [--listen HOST:PORT] [--duration SECONDS]``."""

from __future__ import annotations

import argparse
import sys

DEFAULT_SCENARIO = "long-context-bomb"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = sub.add_parser("demo", help="run the whole pipeline on simulated GPUs and engines")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO,
                        help=f"scenario name or YAML path (default {DEFAULT_SCENARIO}); --list shows them")
    parser.add_argument("--listen", default="127.0.0.1:9847", help="exporter address (default 127.0.0.1:9847)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds to run (default: the scenario's duration)")
    parser.add_argument("--alertmanager", action="append", default=[], metavar="URL",
                        help="also send the demo's alerts to this Alertmanager (API v2); repeatable")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from watchdog.demo.scenario import ScenarioError, list_scenarios, load_scenario

    if args.list:
        for name in list_scenarios():
            scenario = load_scenario(name)
            print(f"{name:<22} {scenario.description.splitlines()[0][:100] if scenario.description else ''}")
        return 0
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from watchdog.demo.runner import run_demo

    return run_demo(scenario, args.listen, args.duration, alertmanager_urls=args.alertmanager,
                    log_format=args.log_format)

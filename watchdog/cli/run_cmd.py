"""``inference-watchdog run [--config PATH] [--listen HOST:PORT]``: the daemon systemd runs."""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger("watchdog.run")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` command."""
    parser = sub.add_parser("run", help="run the agent (the daemon systemd starts)")
    parser.add_argument("--config", default=None,
                        help="config file (default /etc/inference-watchdog/config.yaml if it exists)")
    parser.add_argument("--listen", default=None, help="exporter address HOST:PORT (default from config)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from watchdog.daemon.serve import install_early_sighup

    install_early_sighup()  # before anything slow: an early SIGHUP must not kill the daemon
    from watchdog.agent import Agent
    from watchdog.cli.common import checked_settings, config_path
    from watchdog.config.settings import with_log_format
    from watchdog.daemon.serve import serve
    from watchdog.daemon.systemd_hooks import systemd_hooks

    path = config_path(args.config)
    checked, lines = checked_settings(path, daemon=True)
    for line in lines:
        print(line, file=sys.stderr)
    if checked is None:
        return 2
    settings = checked
    settings = with_log_format(settings, args.log_format)
    try:
        agent = Agent(settings, config_path=path)
    except Exception as exc:  # start-up boundary: a clear message and a non-zero exit
        log.error("cannot start the agent", extra={"error": str(exc)})  # the message, not a traceback
        print(f"error: cannot start: {exc}", file=sys.stderr)
        return 2
    listen = args.listen or settings.listen
    log.info("agent starting", extra={"config": path or "(defaults)", "listen": listen,
                                      "collectors": [c.name for c in agent.collectors]})
    return serve(agent, listen, hooks=systemd_hooks(agent))

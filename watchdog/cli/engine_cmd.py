"""``inference-watchdog engine list|drain|admit``: serving verdicts per engine, and operators' manual states.

``engine list [--url URL] [--json]`` reads the running agent's ``GET /api/v1/engines`` (default
``http://127.0.0.1:9847``) and prints a table on a terminal, the API's JSON when piped or with ``--json``.
``engine drain JOB --reason TEXT [--for DURATION]`` and ``engine admit JOB [--reason TEXT] [--for DURATION]
[--clear]`` write a manual state to the state database of ``--config`` (default the one ``run`` uses): it
persists across restarts and takes effect at the agent's next tick. A manual drain wins over everything; a
manual admit overrides the agent's drain, shed and short-only, not ``down``; ``--clear`` removes the manual
state (the agent's own verdict applies again). Exit 0 done, 1 unknown engine or nothing to clear, 2 bad
arguments, config or an unreachable agent.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import Any

DEFAULT_URL = "http://127.0.0.1:9847"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``engine`` command."""
    parser = sub.add_parser("engine", help="serving verdicts per engine; manual drain and admit")
    inner = parser.add_subparsers(dest="engine_command", metavar="ACTION")
    inner.required = True
    listing = inner.add_parser("list", help="every engine's verdict, weight and reasons (from the running agent)")
    listing.add_argument("--url", default=DEFAULT_URL, help=f"the agent's exporter (default {DEFAULT_URL})")
    listing.add_argument("--json", action="store_true", help="print the API's JSON (the default when piped)")
    listing.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the agent (default 5)")
    listing.set_defaults(func=_list)
    drain = inner.add_parser("drain", help="take an engine out of rotation by hand (persists across restarts)")
    drain.add_argument("job", metavar="JOB", help="the engine's job (engines[].job)")
    drain.add_argument("--reason", required=True, help="why (shown in every interface and notification)")
    drain.add_argument("--for", dest="duration", default=None, help="expire after this long (e.g. 30m, 2h)")
    drain.set_defaults(func=_drain)
    admit = inner.add_parser("admit", help="put an engine back in rotation by hand, or --clear the manual state")
    admit.add_argument("job", metavar="JOB", help="the engine's job (engines[].job)")
    admit.add_argument("--reason", default="admitted by an operator", help="why")
    admit.add_argument("--for", dest="duration", default=None, help="expire after this long (e.g. 30m, 2h)")
    admit.add_argument("--clear", action="store_true", help="remove the manual state: the agent decides again")
    admit.set_defaults(func=_admit)
    for p in (drain, admit):
        p.add_argument("--config", default=None, help="config file (default: the one run uses)")


# -- list ---------------------------------------------------------------------------------------------


def _fetch(url: str, timeout: float) -> dict[str, Any]:
    """The agent's ``/api/v1/engines`` document; raises OSError/ValueError with a readable message."""
    import urllib.error
    import urllib.request

    endpoint = url.rstrip("/") + "/api/v1/engines"
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as response:
            document = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise OSError(f"{endpoint} answered HTTP {exc.code}" + (
            " (an agent without serving verdicts?)" if exc.code == 404 else "")) from exc
    except urllib.error.URLError as exc:
        raise OSError(f"cannot reach the agent at {endpoint}: {exc.reason}; is `inference-watchdog run` "
                      "running there (--url)?") from exc
    if not isinstance(document, dict) or document.get("status") != "success" or "data" not in document:
        raise ValueError(f"{endpoint} did not answer the documented JSON envelope")
    return document


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def table(document: dict[str, Any], now_seconds: float) -> str:
    """The terminal view of an ``/api/v1/engines`` document."""
    from watchdog.serving.jsonview import verdict_from_json

    data = document["data"]
    verdicts = [verdict_from_json(entry) for entry in data.get("engines", [])]
    lines = []
    if not data.get("trusted", False):
        lines.append("verdicts NOT trusted: the agent is unhealthy or stalled; balancers fail open (keep their "
                     "own view)")
    if not verdicts:
        lines.append("no engine configured")
        return "\n".join(lines)
    rows = [("JOB", "INSTANCE", "VERDICT", "WEIGHT", "FOR", "FREE KV", "WAIT", "REASONS")]
    for v in verdicts:
        free = f"{v.scores.kv_free_ratio * 100:.0f} %" if v.scores.kv_free_ratio is not None else "-"
        wait = f"{v.scores.predicted_wait_seconds:.1f} s" if v.scores.predicted_wait_seconds is not None else "-"
        verdict = v.verdict.value + (f" (proposed {v.proposed.value})" if v.proposed is not None else "")
        reasons = "; ".join(f"{r.code}: {r.detail}" for r in v.reasons) or "-"
        rows.append((v.job, v.instance, verdict, f"{v.weight_percent} %", _age(now_seconds - v.since_seconds),
                     free, wait, reasons))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, row[-1]]))
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    try:
        document = _fetch(args.url, args.timeout)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json or not sys.stdout.isatty():
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    try:
        print(table(document, time.time()))
    except (KeyError, ValueError, TypeError) as exc:
        print(f"error: malformed engine entry from {args.url}: {exc}", file=sys.stderr)
        return 2
    return 0


# -- drain / admit ------------------------------------------------------------------------------------


def _operator() -> str:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"{user} (cli)"


def _states(args: argparse.Namespace) -> tuple[Any, int]:
    """The node's manual states after checking JOB is a configured engine; (None, exit code) after printing
    why not (2 a bad config, 1 an unknown engine)."""
    from watchdog.cli.common import load_node_settings
    from watchdog.config import ConfigError
    from watchdog.infra.state import StateDB
    from watchdog.infra.suggest import did_you_mean
    from watchdog.serving.manual import ManualStates

    try:
        settings = load_node_settings(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None, 2
    jobs = [e.job for e in settings.engines]
    if args.job not in jobs:
        print(f"error: no engine has job {args.job!r}{did_you_mean(args.job, jobs)}; configured: "
              f"{', '.join(jobs) or 'none'}", file=sys.stderr)
        return None, 1
    return ManualStates(StateDB.in_dir(settings.state_dir)), 0


def _until(duration: str | None, now: float) -> float | None:
    from watchdog.rules.durations import parse_duration

    return None if duration is None else now + parse_duration(duration) / 1000


def _when(until: float | None) -> str:
    if until is None:
        return "until revoked"
    return "until " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until))


def _set(args: argparse.Namespace, verdict_name: str) -> int:
    from watchdog.serving.model import ManualState, Verdict

    now = time.time()
    try:
        until = _until(args.duration, now)
    except ValueError as exc:
        print(f"error: --for: {exc}", file=sys.stderr)
        return 2
    states, code = _states(args)
    if states is None:
        return code
    verdict = Verdict(verdict_name)
    states.set(ManualState(args.job, verdict, args.reason, _operator(), now, until))
    effect = ("load balancers send it no new requests" if verdict is Verdict.DRAIN else
              "it is admitted whatever the agent's drain, shed or short-only (not while it does not answer)")
    print(f"set manual {verdict.value} on {args.job} {_when(until)}: {effect}. Reason: {args.reason}. Takes "
          f"effect at the agent's next tick and survives restarts; undo with `inference-watchdog engine admit "
          f"{args.job} --clear`.")
    return 0


def _drain(args: argparse.Namespace) -> int:
    return _set(args, "drain")


def _admit(args: argparse.Namespace) -> int:
    if not args.clear:
        return _set(args, "admit")
    states, code = _states(args)
    if states is None:
        return code
    removed = states.clear(args.job)
    if removed is None:
        print(f"{args.job} has no manual state; the agent's own verdict applies", file=sys.stderr)
        return 1
    print(f"cleared the manual {removed.verdict.value} of {args.job} (set by {removed.set_by}: {removed.reason}); "
          "the agent's own verdict applies from its next tick")
    return 0

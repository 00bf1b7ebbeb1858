"""``inference-watchdog kmsg parse FILE [--json]``: kernel-log lines → Xid/SXid/fallen-off-bus/OOM events.

JSON output (``--json``): an array, one object per event in file order, with exactly the keys ``kind``
(``xid``, ``sxid``, ``fallen_off_bus``, ``oom_kill``), ``xid`` (int or null; the SXid for ``sxid``, 79
for ``fallen_off_bus``), ``pci_bus_id`` (``dddd:bb:dd`` or null), ``pid``, ``process``, ``message``,
``severity`` (``info``, ``warning``, ``critical``, ``fatal``), ``action`` and ``line`` (1-based).
Text output: one line per event. Exit 0 when the file was read (events or not), 2 when it could not be.
``FILE`` may be ``-`` for standard input. See docs/kmsg.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``kmsg`` command."""
    parser = sub.add_parser("kmsg", help="parse kernel-log lines into GPU and OOM events")
    inner = parser.add_subparsers(dest="kmsg_command", metavar="ACTION")
    inner.required = True
    parse = inner.add_parser(
        "parse", help="print the Xid/SXid/fallen-off-bus/OOM events of a kernel log (dmesg, journal, syslog)")
    parse.add_argument("file", metavar="FILE", help="kernel-log file, or - for standard input")
    parse.add_argument("--json", action="store_true", help="print a JSON array (see docs/kmsg.md)")
    parse.set_defaults(func=_parse)


def format_event(event: Any) -> str:
    """One readable line for an event (text mode)."""
    code = "" if event.xid is None else f" {event.xid}"
    where = f" gpu {event.pci_bus_id}" if event.pci_bus_id else ""
    who = ""
    if event.pid is not None or event.process:
        who = f" pid {event.pid if event.pid is not None else '?'} ({event.process or '?'})"
    return (f"line {event.line}: {event.kind}{code}{where}{who} [{event.severity}, action {event.action}] "
            f"{event.message}")


def _parse(args: argparse.Namespace) -> int:
    from watchdog.kmsg.parse import parse_lines

    try:
        if args.file == "-":
            events = list(parse_lines(sys.stdin))
        else:
            with open(args.file, encoding="utf-8", errors="replace", newline="\n") as handle:
                events = list(parse_lines(handle))  # streamed: a multi-gigabyte log is fine
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.json:
        json.dump([event.to_json() for event in events], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for event in events:
            print(format_event(event))
    return 0

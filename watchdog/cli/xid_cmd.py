"""``inference-watchdog xid explain CODE [--json]``: meaning, severity and recommended action of an Xid.

Text output: code, mnemonic, meaning, severity, action (and the follow-up action and NVIDIA's resolution
buckets). ``--json``: ``{"code", "mnemonic", "meaning", "severity", "action", "investigate",
"nvidia_resolution", "unused"}``. An Xid NVIDIA does not document: a message on stderr (and
``{"code": N, "error": "unknown Xid"}`` with ``--json``), exit 1. See docs/xid.md.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``xid`` command."""
    parser = sub.add_parser("xid", help="the XID catalogue")
    inner = parser.add_subparsers(dest="xid_command", metavar="ACTION")
    inner.required = True
    explain = inner.add_parser("explain", help="meaning, severity and recommended action of an Xid code")
    explain.add_argument("code", metavar="CODE", help="the Xid number, e.g. 79")
    explain.add_argument("--json", action="store_true", help="print a JSON object")
    explain.set_defaults(func=_explain)


def _explain(args: argparse.Namespace) -> int:
    from watchdog.xid.catalogue import default_catalogue

    text = str(args.code).strip()
    if text.lower().startswith("xid"):
        text = text[3:].strip()
    if not text.isdigit():
        print(f"error: {args.code!r} is not an Xid number", file=sys.stderr)
        return 2
    code = int(text)
    entry = default_catalogue().xid(code)
    if entry is None:
        if args.json:
            json.dump({"code": code, "error": "unknown Xid"}, sys.stdout)
            sys.stdout.write("\n")
        print(f"Xid {code} is unknown: NVIDIA's Xid catalogue does not document it.", file=sys.stderr)
        return 1
    if args.json:
        json.dump(entry.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"Xid {entry.code}: {entry.mnemonic}{' (unused by current drivers)' if entry.unused else ''}")
    print(f"  meaning:     {entry.meaning}")
    print(f"  severity:    {entry.severity}")
    print(f"  action:      {entry.action}")
    if entry.investigate:
        print(f"  if repeated: {entry.investigate}")
    if entry.nvidia:
        print(f"  NVIDIA resolution (immediate / investigatory): {entry.nvidia}")
    return 0

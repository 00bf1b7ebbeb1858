"""``inference-watchdog gpu list|clear``: GPUs flagged as needing a reset or a reboot.

``gpu list [--json]`` prints the flags (gpu, uuid, recovery, since, reason). ``gpu clear GPU [--reason
TEXT]`` clears the flag of one GPU (index or uuid) after an operator reset it (NVML cannot tell), audited
with the operator's name; exit 1 (with the flagged GPUs listed) when GPU is not flagged. A reboot clears
flags by itself. Both read the state database of ``--config`` (default the one ``run`` uses).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``gpu`` command."""
    parser = sub.add_parser("gpu", help="GPUs flagged as needing a reset or reboot")
    inner = parser.add_subparsers(dest="gpu_command", metavar="ACTION")
    inner.required = True
    listing = inner.add_parser("list", help="flagged GPUs")
    listing.add_argument("--config", default=None, help="config file (default: the one run uses)")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(func=_list)
    clear = inner.add_parser("clear", help="clear a GPU's flag after resetting it (audited)")
    clear.add_argument("gpu", metavar="GPU", help="GPU index or uuid")
    clear.add_argument("--config", default=None, help="config file (default: the one run uses)")
    clear.add_argument("--reason", default="reset by an operator", help="why (goes to the audit trail)")
    clear.set_defaults(func=_clear)


def _store(config_arg: str | None):  # type: ignore[no-untyped-def]
    from watchdog.cli.common import load_node_settings
    from watchdog.collectors.gpu_flags import GpuFlagStore, read_boot_id
    from watchdog.infra.state import StateDB

    settings = load_node_settings(config_arg)
    return GpuFlagStore(StateDB.in_dir(settings.state_dir), read_boot_id())


def _operator() -> str:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"{user} (cli)"


def _list(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError

    try:
        flags = _store(args.config).flags()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump([{"gpu": f.gpu, "uuid": f.uuid, "recovery": f.recovery.value, "reason": f.reason,
                    "since_ms": f.since_ms} for f in flags], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not flags:
        print("no GPU is flagged")
    for f in flags:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(f.since_ms / 1000))
        print(f"GPU {f.gpu:<3} {f.uuid}  needs a {f.recovery.value} since {since} UTC: {f.reason}")
    return 0


def _clear(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError
    from watchdog.infra.suggest import did_you_mean

    try:
        store = _store(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cleared = store.clear(args.gpu, _operator(), args.reason, int(time.time() * 1000))
    if not cleared:
        names = [name for f in store.flags() for name in (f.gpu, f.uuid)]
        hint = did_you_mean(args.gpu, names)
        flagged = ", ".join(f"{f.gpu} ({f.uuid})" for f in store.flags()) or "none"
        print(f"error: GPU {args.gpu!r} is not flagged{hint}; flagged: {flagged}", file=sys.stderr)
        return 1
    for f in cleared:
        print(f"cleared GPU {f.gpu} ({f.uuid}): no longer flagged as needing a {f.recovery.value}")
    return 0

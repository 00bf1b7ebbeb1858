"""``inference-watchdog gpu status|smoke|list|clear``: every GPU at a glance, the NVML collector's own
read, and GPUs flagged as needing a reset or a reboot.

``gpu status [--fake PROFILE] [--json]`` reads every GPU through NVML (the collector the agent runs) and
prints one table row per GPU: index, name, UUID, PCI bus id, PCIe link generation and width against
their maximum, temperature and its margin to the slowdown threshold, power against its limit, memory,
utilization, uncorrected ECC errors, uncorrectable remapped rows and flags (lost, clock-event reasons,
row remap pending/failed). ``gpu smoke [--fake PROFILE] [--no-nvlink] [--no-processes] [--compact]``
prints what two collector passes read as JSON, with the time and number of NVML calls per group
(docs/nvml.md). Both exit 2 with a message when NVML is not usable here.

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
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``gpu`` command."""
    parser = sub.add_parser("gpu", help="every GPU's state (status), an NVML smoke test, and GPUs flagged as "
                                        "needing a reset or reboot (list, clear)")
    inner = parser.add_subparsers(dest="gpu_command", metavar="ACTION")
    inner.required = True
    status = inner.add_parser("status", help="every GPU in one table, like nvidia-smi")
    status.add_argument("--fake", metavar="PROFILE", help="read the fake pynvml with this GPU profile instead")
    status.add_argument("--json", action="store_true", help="print a JSON list, one object per GPU")
    status.set_defaults(func=_status)
    smoke = inner.add_parser("smoke", help="run the NVML collector twice and print what it read, as JSON")
    smoke.add_argument("--fake", metavar="PROFILE", help="use the fake pynvml with this GPU profile")
    smoke.add_argument("--no-nvlink", action="store_true", help="skip NVLink state and counters")
    smoke.add_argument("--no-processes", action="store_true", help="skip compute processes")
    smoke.add_argument("--compact", action="store_true", help="one-line JSON")
    smoke.set_defaults(func=_smoke)
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


EXIT_NO_NVML = 2


def _nvml(fake: str | None) -> Any:
    """The simulated GPUs of profile ``fake`` (the demo's), else the real NVML; raises SmokeError."""
    from watchdog.collectors.nvml.smoke import SmokeError, open_nvml

    if not fake:
        return open_nvml()
    from watchdog.demo.gpu_driver import profile_nvml

    try:
        return profile_nvml(fake)
    except ValueError as exc:
        raise SmokeError(str(exc)) from exc


def _status(args: argparse.Namespace) -> int:
    from watchdog.collectors.nvml.smoke import SmokeError, gpu_rows, read_twice, status_table

    try:
        rows = gpu_rows(read_twice(_nvml(args.fake), processes=False).samples)
    except SmokeError as exc:
        print(f"gpu status: {exc}", file=sys.stderr)
        return EXIT_NO_NVML
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(status_table(rows) if rows else "no GPU found by NVML\n")
    return 0


def _smoke(args: argparse.Namespace) -> int:
    from watchdog.collectors.nvml.smoke import SmokeError, library_version, read_twice, smoke_report

    try:
        nvml = _nvml(args.fake)
        reading = read_twice(nvml, nvlink=not args.no_nvlink, processes=not args.no_processes)
    except SmokeError as exc:
        print(f"gpu-smoke: {exc}", file=sys.stderr)
        return EXIT_NO_NVML
    print(json.dumps(smoke_report(reading, library_version(nvml, args.fake)), indent=None if args.compact else 1))
    return 0

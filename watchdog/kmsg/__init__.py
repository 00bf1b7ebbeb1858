"""Kernel-log parsing: NVIDIA Xid/SXid, fallen-off-bus and OOM-killer lines → :class:`KernelEvent`.

Pure parsing lives in :mod:`watchdog.kmsg.parse`, PCI id handling in :mod:`watchdog.kmsg.pci`; the
readers that follow ``/dev/kmsg``, journald or a file are in :mod:`watchdog.kmsg.follow`.
"""

from watchdog.kmsg.parse import (
    KINDS,
    KernelEvent,
    KernelLogParser,
    parse_gpu_identity,
    parse_line,
    parse_lines,
    parse_text,
)
from watchdog.kmsg.pci import normalize_pci_bus_id

__all__ = [
    "KINDS",
    "KernelEvent",
    "KernelLogParser",
    "normalize_pci_bus_id",
    "parse_gpu_identity",
    "parse_line",
    "parse_lines",
    "parse_text",
]

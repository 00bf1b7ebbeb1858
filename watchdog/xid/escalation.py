"""Escalation of a recommended action from the event history: a pure fold, tested with tables.

Contract: the same Xid on the same GPU that keeps coming back after reboots is not fixed by rebooting.
:func:`reboots_survived` counts how many reboots a given (GPU, Xid) pair has survived: the number of
distinct boots (``/proc/sys/kernel/random/boot_id``) it occurred in, minus one. :func:`escalate_action`
turns ``reboot_system`` or ``reset_gpu`` into ``hardware_inspection`` once that count reaches the threshold
(default 2). A GPU reset also happens at every reboot, so a reset-requiring Xid that survives reboots is
escalated the same way. Other actions are returned unchanged. The GPU key is whatever identifies the GPU
across boots (the UUID where known, else the PCI bus id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_REBOOT_THRESHOLD = 2
ESCALATING_ACTIONS: frozenset[str] = frozenset({"reboot_system", "reset_gpu"})
ESCALATED_ACTION = "hardware_inspection"


@dataclass(frozen=True)
class XidOccurrence:
    """One Xid seen on one GPU during one boot."""

    boot_id: str
    gpu: str
    xid: int


def reboots_survived(history: Iterable[XidOccurrence], gpu: str, xid: int) -> int:
    """How many reboots the (gpu, xid) pair survived: distinct boots it occurred in, minus one (min 0)."""
    boots = {event.boot_id for event in history if event.gpu == gpu and event.xid == xid}
    return max(0, len(boots) - 1)


def escalate_action(
    action: str,
    history: Iterable[XidOccurrence],
    gpu: str,
    xid: int,
    threshold: int = DEFAULT_REBOOT_THRESHOLD,
) -> str:
    """``hardware_inspection`` when a reboot/reset action has failed ``threshold`` times; else ``action``."""
    if action not in ESCALATING_ACTIONS or not gpu or threshold < 1:
        return action
    if reboots_survived(history, gpu, xid) >= threshold:
        return ESCALATED_ACTION
    return action

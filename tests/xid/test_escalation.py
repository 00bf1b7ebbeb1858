"""Escalation as a pure fold over the event history: a reboot that does not help → hardware inspection."""

from __future__ import annotations

import pytest

from watchdog.xid.escalation import XidOccurrence, escalate_action, reboots_survived


def occ(boot: str, gpu: str = "GPU-a", xid: int = 79) -> XidOccurrence:
    return XidOccurrence(boot, gpu, xid)


TABLE = [
    # (history, action, threshold, expected action, reboots survived)
    ([], "reboot_system", 2, "reboot_system", 0),
    ([occ("b1")], "reboot_system", 2, "reboot_system", 0),
    ([occ("b1"), occ("b1"), occ("b1")], "reboot_system", 2, "reboot_system", 0),  # same boot, many times
    ([occ("b1"), occ("b2")], "reboot_system", 2, "reboot_system", 1),
    ([occ("b1"), occ("b2"), occ("b3")], "reboot_system", 2, "hardware_inspection", 2),
    ([occ("b1"), occ("b2")], "reboot_system", 1, "hardware_inspection", 1),
    ([occ("b1"), occ("b2"), occ("b3")], "reset_gpu", 2, "hardware_inspection", 2),
    ([occ("b1"), occ("b2"), occ("b3")], "restart_app", 2, "restart_app", 2),  # app errors never escalate
    ([occ("b1"), occ("b2"), occ("b3")], "none", 2, "none", 2),
    # other GPUs and other Xids do not count
    ([occ("b1"), occ("b2", gpu="GPU-b"), occ("b3", xid=48)], "reboot_system", 2, "reboot_system", 0),
    ([occ("b1"), occ("b2"), occ("b3", gpu="GPU-b")], "reboot_system", 2, "reboot_system", 1),
]


@pytest.mark.parametrize(("history", "action", "threshold", "expected", "survived"), TABLE)
def test_escalation_table(history: list[XidOccurrence], action: str, threshold: int, expected: str,
                          survived: int) -> None:
    assert reboots_survived(history, "GPU-a", 79) == survived
    assert escalate_action(action, history, "GPU-a", 79, threshold) == expected


def test_without_a_gpu_key_nothing_escalates() -> None:
    history = [occ("b1", gpu=""), occ("b2", gpu=""), occ("b3", gpu="")]
    assert escalate_action("reboot_system", history, "", 79) == "reboot_system"


def test_order_of_history_does_not_matter() -> None:
    history = [occ("b3"), occ("b1"), occ("b2"), occ("b1")]
    assert escalate_action("reboot_system", history, "GPU-a", 79) == "hardware_inspection"

"""PCI bus ids: every spelling the kernel log and NVML use → lowercase dddd:bb:dd, or None."""

from __future__ import annotations

import pytest

from watchdog.fakes.pynvml import FakeNvml
from watchdog.kmsg.pci import InitialisedNvml, find_pci_bus_id, normalize_pci_bus_id, nvml_gpus, sysfs_pci_address

CASES = [
    ("PCI:0000:3b:00", "0000:3b:00"),
    ("PCI:0000:3B:00", "0000:3b:00"),
    ("0000:03:00", "0000:03:00"),
    ("0000:05:00.0", "0000:05:00"),
    ("PCI:0000:05:00.0", "0000:05:00"),
    ("00000000:18:00.0", "0000:18:00"),  # pynvml busId: 8-digit domain
    ("00000009:01:00.0", "0009:01:00"),
    (b"00000000:DB:00.0", "0000:db:00"),
    (b"00000000:18:00.0\x00\x00", "0000:18:00"),
    ("0000:18:00.0", "0000:18:00"),
    ("18:00.0", "0000:18:00"),
    ("0001:00", "0000:01:00"),  # the oldest drivers: bus:device
    ("PCI:0004:01:00", "0004:01:00"),
    ("  PCI:0000:10:1c ", "0000:10:1c"),
    ("PCI:...", None),
    ("PCI:0000:xx:00", None),
    ("PCI:0000:XX:00", None),
    ("PCI:xxxx:xx:xx", None),
    ("<redacted>", None),
    ("", None),
    (None, None),
    ("GPU-509665ad", None),
    ("100000000:18:00.0", None),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_normalize(text: str | bytes | None, expected: str | None) -> None:
    assert normalize_pci_bus_id(text) == expected


def test_find_in_text_ignores_pci_device_ids_and_times() -> None:
    assert find_pci_bus_id("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed") == "0000:b3:00"
    assert find_pci_bus_id("NVRM: (PCI ID: 10de:26b5) installed in this system has") is None
    assert find_pci_bus_id("NVRM: GPU 18:00.0: GPU has fallen off the bus.") == "0000:18:00"
    assert find_pci_bus_id("Nov 04 10:00:00.123456 host kernel: nothing here") is None


def test_sysfs_address_keeps_function() -> None:
    assert sysfs_pci_address("00000000:18:00.0") == "0000:18:00.0"
    assert sysfs_pci_address("0000:3b:00") == "0000:3b:00.0"
    assert sysfs_pci_address("00000000:18:00.1") == "0000:18:00.1"
    with pytest.raises(ValueError):
        sysfs_pci_address("nonsense")


def test_nvml_gpus_skips_a_lost_gpu_and_keeps_the_others() -> None:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.nvmlInit()
    assert [g.pci_bus_id for g in nvml_gpus(nvml)][:3] == ["0000:18:00", "0000:2a:00", "0000:3a:00"]
    nvml.set(1, lost=True)
    gpus = nvml_gpus(nvml)
    assert len(gpus) == 7 and "0000:2a:00" not in {g.pci_bus_id for g in gpus}
    assert all(g.uuid.startswith("GPU-") for g in gpus)


def test_initialised_nvml_retries_init_until_it_works_then_inits_once() -> None:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.unload_driver()
    lister = InitialisedNvml(nvml)
    with pytest.raises(lister.error):
        lister.gpus()
    nvml.load_driver()
    assert len(lister.gpus()) == 8
    assert len(lister.gpus()) == 8
    assert nvml.calls["nvmlInitWithFlags"] == 2  # the failed try, then the one that worked

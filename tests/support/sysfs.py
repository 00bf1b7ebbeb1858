"""A fixture sysfs/modules tree: NVIDIA PCI functions, the nvidia module state, installed modules."""

from __future__ import annotations

import os
from pathlib import Path


def make_sysfs(root: Path, *, gpus: int, loaded: bool, installed: bool, nvswitches: int = 0,
               release: str | None = None) -> tuple[Path, Path, str]:
    """Write ``root/sys`` and ``root/modules`` (for ``release``, default the running kernel); returns
    (sysfs root, modules root, kernel release)."""
    release = release or os.uname().release
    sysfs, modules = root / "sys", root / "modules"
    devices = sysfs / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    functions = [("0x10de", "0x030200")] * gpus + [("0x10de", "0x068000")] * nvswitches + [
        ("0x8086", "0x030000")]  # an Intel VGA function: not NVIDIA
    for index, (vendor, klass) in enumerate(functions):
        device = devices / f"0000:{0x18 + index:02x}:00.0"
        device.mkdir()
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
    if loaded:
        (sysfs / "module" / "nvidia").mkdir(parents=True)
    (modules / release).mkdir(parents=True)
    dep = "kernel/drivers/net/e1000.ko:\n"
    if installed:
        dep += "updates/dkms/nvidia.ko.zst: kernel/drivers/i2c/i2c-core.ko\n"
    (modules / release / "modules.dep").write_text(dep)
    return sysfs, modules, release
